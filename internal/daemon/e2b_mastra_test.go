package daemon

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlockhq/airlock/internal/testutil/isolatednet"
)

// TestMastraE2B runs Mastra's E2B integration (@mastra/e2b's E2BSandbox
// in a Mastra Workspace, as installed from npm by scripts/test) against
// the daemon (testdata/mastra_e2b.mjs): Mastra creates the sandbox with
// lifecycle onTimeout "pause", the workspace's execute_command tool runs
// in it, the workspace's stop pauses it, a start resumes it with its
// files and processes, and destroy kills it. Without a template named,
// Mastra builds one, which is refused by name.
func TestMastraE2B(t *testing.T) {
	mods := os.Getenv("AIRLOCK_TEST_MASTRA_MODULES")
	if mods == "" {
		t.Skip("AIRLOCK_TEST_MASTRA_MODULES is not set (scripts/test installs Mastra's @mastra/e2b)")
	}
	if _, err := os.Stat(filepath.Join(mods, "@mastra", "e2b")); err != nil {
		t.Fatalf("AIRLOCK_TEST_MASTRA_MODULES is set, but @mastra/e2b is not there: %v", err)
	}
	isolatednet.Require(t)
	base := serveE2B(t, "")
	// ES modules resolve packages from the script's directory: the
	// script goes beside a link to the modules.
	dir := t.TempDir()
	script, err := os.ReadFile("testdata/mastra_e2b.mjs")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "mastra.mjs"), script, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(mods, filepath.Join(dir, "node_modules")); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("node", filepath.Join(dir, "mastra.mjs"))
	cmd.Env = append(os.Environ(), "E2B_API_URL="+base, "E2B_SANDBOX_URL="+base, "E2B_API_KEY="+e2bKey,
		"MASTRA_TEMPLATE=sh", `MASTRA_CMD=echo "hi from $(cat /proc/1/comm)"; id -u`)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	outb, err := cmd.Output()
	steps := scriptSteps(outb)
	if err != nil || steps["fatal"] != nil {
		t.Fatalf("Mastra's script: %v\n%s\n%s", err, outb, stderr.String())
	}
	want := map[string]string{
		"status":       `"running"`,
		"lifecycle":    `{"onTimeout":"pause","autoResume":false}`,
		"read":         `"kept across a pause"`,
		"stopped":      `"stopped"`,
		"pausedstate":  `"paused"`,
		"listedpaused": `[true]`,
		"resumedsame":  `true`,
		"resumedstate": `"running"`,
		"again":        `"kept across a pause\nsleeper alive\n"`,
		"destroyed":    `"destroyed"`,
		"gone":         `"SandboxNotFoundError"`,
	}
	for k, v := range want {
		if got := string(steps[k]); got != v {
			t.Errorf("%s: got %s, want %s", k, got, v)
		}
	}
	if d := string(steps["default"]); !strings.Contains(d, "airlock does not build templates") {
		t.Errorf("Mastra's default template, which it builds: %s; want it refused, saying why", d)
	}
	var tool string
	_ = json.Unmarshal(steps["tool"], &tool)
	if !strings.Contains(tool, "hi from ") {
		t.Errorf("the tool's output %q lacks the command's", tool)
	}
	if !strings.Contains(string(steps["tools"]), `"mastra_workspace_execute_command"`) {
		t.Errorf("the workspace's tools %s lack execute_command", steps["tools"])
	}
	if t.Failed() {
		t.Logf("Mastra's script said:\n%s\n%s", outb, stderr.String())
	}
}
