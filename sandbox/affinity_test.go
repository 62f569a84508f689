package sandbox

import (
	"os"
	"runtime"
	"strings"
	"testing"

	"github.com/airlockhq/airlock/result"
)

// cpusAllowed returns the Cpus_allowed_list line of a status file.
func cpusAllowed(t *testing.T, status string) string {
	t.Helper()
	for _, line := range strings.Split(status, "\n") {
		if v, ok := strings.CutPrefix(line, "Cpus_allowed_list:"); ok {
			return strings.TrimSpace(v)
		}
	}
	t.Fatalf("no Cpus_allowed_list in %q", status)
	return ""
}

// TestCommandsKeepTheProcessors checks that init gives its commands every
// processor the host allowed it: init holds its threads on one while it
// confines itself (see onThisCPU in sbinit), and its own thread, which
// forks the commands, must come back from there.
func TestCommandsKeepTheProcessors(t *testing.T) {
	rt := testRuntime(t)
	if runtime.NumCPU() < 2 {
		t.Skip("one processor: nothing to tell apart")
	}
	host, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	want := cpusAllowed(t, string(host))
	for i := range 5 {
		sb, err := rt.Create(t.Context(), Spec{Limits: DefaultLimits()})
		if err != nil {
			t.Fatal(err)
		}
		r := sb.Exec(t.Context(), ExecRequest{Argv: []string{"cat", "/proc/self/status"}, Capture: true})
		if err := sb.Destroy(t.Context()); err != nil {
			t.Fatal(err)
		}
		if r.Outcome != result.Exited || r.ExitCode != 0 {
			t.Fatalf("cat: %s %d %s %q", r.Outcome, r.ExitCode, r.Error, r.Stderr)
		}
		if got := cpusAllowed(t, string(r.Stdout)); got != want {
			t.Fatalf("sandbox %d: a command may run on processors %s, the host on %s", i, got, want)
		}
	}
}
