package daemon

import (
	"bytes"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/testutil/isolatednet"
)

// TestE2BSDKCompat drives the daemon with the newest E2B SDK the tests
// pin and with an older one (AIRLOCK_TEST_E2B_OLD_MODULES, e2b 2.50.0,
// whose create and connect are the v1 calls): create, a command, files
// in and out, several files at once in subdirectories (each where its
// path says, checked from the host) and paths outside the workspace
// refused, connect, isRunning while alive and after kill, kill.
func TestE2BSDKCompat(t *testing.T) {
	isolatednet.Require(t)
	for _, sdk := range []struct{ name, env string }{
		{"newest", "AIRLOCK_TEST_E2B_MODULES"},
		{"2.50", "AIRLOCK_TEST_E2B_OLD_MODULES"},
	} {
		t.Run(sdk.name, func(t *testing.T) {
			dir := os.Getenv(sdk.env)
			if dir == "" {
				t.Skipf("%s is not set (scripts/test installs the E2B SDKs)", sdk.env)
			}
			entry := filepath.Join(dir, "e2b", "dist", "index.mjs")
			if _, err := os.Stat(entry); err != nil {
				t.Fatalf("%s is set, but the SDK is not there: %v", sdk.env, err)
			}
			d, base := serveE2BDaemon(t, "", nil)
			cmd := exec.Command("node", "testdata/e2b_sdk_compat.mjs")
			cmd.Env = append(os.Environ(), "E2B_SDK="+entry, "E2B_API_URL="+base, "E2B_SANDBOX_URL="+base, "E2B_API_KEY="+e2bKey)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			outb, err := cmd.Output()
			steps := scriptSteps(outb)
			t.Logf("the SDK said:\n%s", outb)
			if err != nil || steps["fatal"] != nil {
				t.Fatalf("the SDK's script: %v\n%s\n%s", err, outb, stderr.String())
			}
			want := map[string]string{
				"run":     `"ok\n"`,
				"read":    `"one"`,
				"alive":   `true`,
				"many":    `["/workspace/d/a/f.txt","/workspace/sub/g.txt"]`,
				"connect": `"one"`,
				"alive2":  `true`,
				"kill":    `true`,
				"dead":    `false`,
			}
			for k, w := range want {
				if string(steps[k]) != w {
					t.Errorf("%s: got %s, want %s", k, steps[k], w)
				}
			}
			for k, want := range map[string]string{"dotdot": "InvalidArgumentError", "outside": "SandboxError", "nested": "InvalidArgumentError"} {
				var e struct{ Name, Message string }
				if json.Unmarshal(steps[k], &e) != nil || e.Name != want {
					t.Errorf("%s: got %s, want %s", k, steps[k], want)
				}
			}
			// From the host: each file where its path said, none at its
			// base name, nothing of the refused ones anywhere.
			var id string
			_ = json.Unmarshal(steps["created"], &id)
			ws := hostWorkspace(t, d, id)
			root := filepath.Dir(ws)
			for p, want := range map[string]string{"d/a/f.txt": "A", "sub/g.txt": "G"} {
				if got, err := os.ReadFile(filepath.Join(ws, p)); string(got) != want {
					t.Errorf("/workspace/%s: %q %v, want %q", p, got, err, want)
				}
			}
			for _, p := range []string{filepath.Join(ws, "f.txt"), filepath.Join(ws, "g.txt"), filepath.Join(ws, "x.txt"), filepath.Join(ws, "y.txt"),
				filepath.Join(ws, "z.txt"), filepath.Join(root, "x.txt"), filepath.Join(root, "z.txt"), filepath.Join(root, "etc", "y.txt"), "/etc/y.txt"} {
				if _, err := os.Lstat(p); !os.IsNotExist(err) {
					t.Errorf("%s exists (%v)", strings.TrimPrefix(p, root), err)
				}
			}
		})
	}
}

// TestE2BHealth: envd's health check (the SDK's isRunning) is 204 for a
// live sandbox with its own access token only; for another's token, an
// unknown sandbox and a killed one it is 502, E2B's answer for a sandbox
// that is gone. Before, it was 204 for anything.
func TestE2BHealth(t *testing.T) {
	base := serveE2B(t, "")
	sb, other := e2bCreate(t, base), e2bCreate(t, base)
	health := func(id, token string) int {
		status, _ := e2bDo(t, "GET", base+"/health", nil, map[string]string{"E2b-Sandbox-Id": id, "X-Access-Token": token}, nil)
		return status
	}
	if got := health(sb.SandboxID, sb.EnvdAccessToken); got != http.StatusNoContent {
		t.Errorf("a live sandbox: %d, want 204", got)
	}
	for _, c := range []struct{ name, id, token string }{
		{"another sandbox's token", sb.SandboxID, other.EnvdAccessToken},
		{"no token", sb.SandboxID, ""},
		{"no such sandbox", "s_nosuch", sb.EnvdAccessToken},
	} {
		if got := health(c.id, c.token); got != http.StatusBadGateway {
			t.Errorf("%s: %d, want 502", c.name, got)
		}
	}
	// A check that names no sandbox is a probe of the listener.
	if got := health("", ""); got != http.StatusNoContent {
		t.Errorf("no sandbox id: %d, want 204", got)
	}
	if status := e2bKill(t, base, sb.SandboxID, 30*time.Second); status != http.StatusNoContent {
		t.Fatalf("DELETE: %d", status)
	}
	if got := health(sb.SandboxID, sb.EnvdAccessToken); got != http.StatusBadGateway {
		t.Errorf("a killed sandbox: %d, want 502", got)
	}
}
