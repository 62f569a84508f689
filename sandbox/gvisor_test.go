package sandbox

import (
	"os"
	"strings"
	"testing"

	"github.com/airlockhq/airlock/internal/testutil"
	"github.com/airlockhq/airlock/result"
)

// backend is one isolation backend the runtime's tests run against.
type backend struct {
	name   string
	gvisor bool
	spec   func(*Spec)
}

// backends are the namespace backend, and gVisor when runsc is at hand
// (always in CI: testutil.Runsc).
func backends(t *testing.T) []backend {
	t.Helper()
	bs := []backend{{name: IsolationNamespaces}}
	if os.Getenv(testutil.RunscEnv) != "" || os.Getenv("CI") != "" {
		testutil.Runsc(t)
		bs = append(bs, backend{name: IsolationGVisor, gvisor: true, spec: func(s *Spec) { s.Isolation = IsolationGVisor }})
	}
	return bs
}

func gvisorSpec(t *testing.T) func(*Spec) {
	t.Helper()
	testutil.Runsc(t)
	return func(s *Spec) { s.Isolation = IsolationGVisor }
}

// TestGVisorRuns runs a command under gVisor: the guest kernel is
// gVisor's, the command runs as the sandbox's user with the workspace
// writable, and nothing is left.
func TestGVisorRuns(t *testing.T) {
	r := run(t, runOpts{spec: gvisorSpec(t)}, "/bin/sh", "-c", "uname -r; id -u; echo hi > /workspace/f && cat /workspace/f; pwd")
	if r.Outcome != result.Exited || r.ExitCode != 0 {
		t.Fatalf("outcome %s %d: %s %s %s", r.Outcome, r.ExitCode, r.Error, r.Stdout, r.Stderr)
	}
	lines := strings.Split(strings.TrimSpace(string(r.Stdout)), "\n")
	if len(lines) != 4 || !strings.Contains(lines[0], "gvisor") || lines[1] != "1000" || lines[2] != "hi" || lines[3] != HomeDir {
		t.Fatalf("got %q", lines)
	}
}
