package cli

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestHandOver: the commands airlockd carries reach it from airlock with
// their arguments unchanged, in the same process; without airlockd they
// fail naming it, and airlock's own commands (version, a plain run) still
// work, a plain run's sandbox refused its network at once.
func TestHandOver(t *testing.T) {
	bin := airlockBin(t)
	for _, args := range [][]string{{"serve", "-h"}, {"mcp", "-h"}, {"image", "import", "-h"}} {
		o := execAirlock(t, nil, "", args...)
		if o.code != 0 || !strings.Contains(o.stderr, "airlock "+strings.Join(args[:len(args)-1], " ")) || !strings.Contains(o.stderr, "-config") {
			t.Errorf("airlock %v: exit %d, stderr %q", args, o.code, o.stderr)
		}
	}
	// A bad flag is airlockd's to report, with the command's usage.
	if o := execAirlock(t, nil, "", "serve", "--no-such-flag"); o.code != ExitUsage || !strings.Contains(o.stderr, "no-such-flag") {
		t.Errorf("serve --no-such-flag: exit %d, stderr %q", o.code, o.stderr)
	}

	// airlock alone in a directory (and none in the directories searched
	// after it, on this machine).
	for _, d := range []string{"/usr/local/libexec/airlock", "/usr/libexec/airlock"} {
		if _, err := os.Stat(filepath.Join(d, DaemonProgram)); err == nil {
			t.Skipf("%s/%s is installed; cannot test its absence", d, DaemonProgram)
		}
	}
	alone := filepath.Join(t.TempDir(), "airlock")
	data, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(alone, data, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"serve"}, {"mcp"}, {"image", "import", "x.tar"}, {"image", "ls"}, {"session", "ls"}, {"pool", "ls"}, {"audit"},
		{"run", "--tool", "x", "--", "true"}, {"run", "--config", "/nonexistent", "--", "true"}, {"run", "--image", "x", "--", "true"},
	} {
		out, err := exec.Command(alone, args...).CombinedOutput()
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != ExitFailure || !strings.Contains(string(out), DaemonProgram+" not found in "+filepath.Dir(alone)) {
			t.Errorf("airlock %v without airlockd: %v, %q", args, err, out)
		}
	}
	if out, err := exec.Command(alone, "version").Output(); err != nil || !strings.HasPrefix(string(out), "airlock ") ||
		!strings.Contains(string(out), "\nbuilt with go") || !strings.Contains(string(out), "\nkernel Linux ") {
		t.Errorf("airlock version without airlockd: %v, %q", err, out)
	}
	// A plain run needs airlockd only for its gateway, on first use:
	// without it the sandbox's proxy and resolver refuse at once, and
	// airlock says why.
	cmd := exec.Command(alone, "run", "--", "sh", "-c", "echo ran; curl -sS -m 10 -o /dev/null http://example.com/; echo curl=$?")
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	if err := cmd.Run(); err != nil {
		t.Fatalf("plain run without airlockd: %v, %q", err, stderr.String())
	}
	// The connection that woke the watcher is reset as its listener
	// closes: curl says so as a failed receive (56) or, when the reset
	// comes while it still sends its request, a failed send (55; seen
	// under emulation). Any later connection is refused (7).
	out := stdout.String()
	if el := time.Since(start); !(strings.Contains(out, "ran\ncurl=7\n") || strings.Contains(out, "ran\ncurl=56\n") || strings.Contains(out, "ran\ncurl=55\n")) || el > 8*time.Second {
		t.Errorf("plain run without airlockd: stdout %q after %v, want curl refused (7) or reset (55, 56) at once", out, el)
	}
	if !strings.Contains(stderr.String(), "egress gateway could not start") || !strings.Contains(stderr.String(), DaemonProgram+" not found") {
		t.Errorf("plain run without airlockd: stderr %q does not say why its network is refused", stderr.String())
	}
}
