package cli

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/client"
	"github.com/airlockhq/airlock/internal/testutil"
	"github.com/airlockhq/airlock/internal/testutil/isolatednet"
)

// TestRemoteCLI points the command line at a daemon's TCP listener
// (--host, $AIRLOCK_HOST) with a token ($AIRLOCK_TOKEN, --token-file):
// runs (output, exit status, input, a terminal), sessions, ps and kill,
// the audit log and MCP all go there, a token's tools bound what it may
// use, and every setting that cannot work is refused with the reason
// before anything is sent.
func TestRemoteCLI(t *testing.T) {
	isolatednet.Require(t)
	addr := testutil.FreeAddr(t)
	const full, narrow = "remote-full-token-0123456789", "remote-narrow-token-012345"
	t.Setenv("TEST_REMOTE_FULL", full)
	t.Setenv("TEST_REMOTE_NARROW", narrow)
	sock, local := serveForTest(t, mcpTools+`
server:
  tcp: `+addr+`
  tokens:
    - {name: full, secret: full, tools: ["*"]}
    - {name: narrow, secret: narrow, tools: [echo]}
secrets:
  full: {env: TEST_REMOTE_FULL}
  narrow: {env: TEST_REMOTE_NARROW}
`)
	host := "http://" + addr
	env := []string{"AIRLOCK_TOKEN=" + full}
	remote := func(stdin string, args ...string) outcome {
		t.Helper()
		return execAirlock(t, env, stdin, args...)
	}

	t.Run("runs", func(t *testing.T) {
		o := remote("", "run", "--host", host, "--tool", "sh", "--", "sh", "-c", "echo out; echo err >&2; exit 3")
		if o.code != 3 || o.stdout != "out\n" || !strings.Contains(o.stderr, "err\n") {
			t.Fatalf("run --host: %+v", o)
		}
		if o := execAirlock(t, append(env, "AIRLOCK_HOST="+host), "piped\n", "run", "--tool", "sh", "--", "cat"); o.code != 0 || o.stdout != "piped\n" {
			t.Fatalf("run with $AIRLOCK_HOST and input: %+v", o)
		}
		tokenFile := filepath.Join(t.TempDir(), "token")
		if err := os.WriteFile(tokenFile, []byte(full+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if o := execAirlock(t, nil, "", "run", "--host", host, "--token-file", tokenFile, "--tool", "sh", "--json", "--", "echo", "from-file"); o.code != 0 || !strings.Contains(o.stdout, `"outcome": "exited"`) && !strings.Contains(o.stdout, `"outcome":"exited"`) {
			t.Fatalf("run --token-file --json: %+v", o)
		}
		// The daemon ran them, not this host: its audit log has them.
		page, err := local.AuditFeed(t.Context(), clientQuery("run.finished"))
		if err != nil || len(page.Events) < 3 {
			t.Fatalf("the daemon recorded %d finished runs: %v", len(page.Events), err)
		}
	})

	t.Run("refusals", func(t *testing.T) {
		empty := filepath.Join(t.TempDir(), "empty")
		if err := os.WriteFile(empty, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		for _, tt := range []struct {
			name string
			env  []string
			args []string
			code int
			want string
		}{
			{"no tool", env, []string{"run", "--host", host, "--", "true"}, 125, "name it with --tool"},
			{"no tool, from the environment", []string{"AIRLOCK_HOST=" + host}, []string{"run", "--", "true"}, 125, "$AIRLOCK_HOST"},
			{"a shaping flag", env, []string{"run", "--host", host, "--tool", "sh", "--disk", "64MiB", "--", "true"}, 125, "--disk changes how the sandbox is built"},
			{"a lowered limit", env, []string{"run", "--host", host, "--tool", "sh", "--time", "1s", "--", "sleep", "30"}, 124, "time limit of 1s reached"},
			{"a raised limit", env, []string{"run", "--host", host, "--tool", "sh", "--memory", "1TiB", "--", "true"}, 125, "limits.memory: 1TiB is over the tool's ceiling of"},
			{"two daemons", env, []string{"run", "--host", host, "--socket", sock, "--tool", "sh", "--", "true"}, 125, "--socket and --host"},
			{"no token", nil, []string{"run", "--host", host, "--tool", "sh", "--", "true"}, 125, "needs a token: --token-file FILE, $AIRLOCK_TOKEN_FILE or $AIRLOCK_TOKEN"},
			{"an empty token file", nil, []string{"ps", "--host", host, "--token-file", empty}, 125, "is empty"},
			{"a token file without a host", nil, []string{"ps", "--token-file", empty}, 125, "--token-file is for --host"},
			{"a run's token file without a host", nil, []string{"run", "--token-file", empty, "--", "true"}, 125, "--token-file is for --host"},
			{"not http", env, []string{"session", "ls", "--host", "unix:///run/x.sock"}, 125, "the scheme must be http or https"},
			{"credentials in the address", env, []string{"ps", "--host", "http://u:p@" + addr}, 125, "no user or password in the address"},
			{"audit file and host", env, []string{"audit", "--host", host, "--db", "/nonexistent"}, 125, "cannot go with --host"},
			{"mcp embedded and host", env, []string{"mcp", "--host", host, "--embedded"}, 125, "cannot go with --host"},
			{"a wrong token", []string{"AIRLOCK_TOKEN=wrong-token-0123456789"}, []string{"run", "--host", host, "--tool", "sh", "--", "true"}, 125, "401"},
			{"a tool the token may not use", []string{"AIRLOCK_TOKEN=" + narrow}, []string{"run", "--host", host, "--tool", "sh", "--", "true"}, 125, "403"},
			{"nobody there", env, []string{"ps", "--host", "http://127.0.0.1:1"}, 125, "no airlock daemon answers at http://127.0.0.1:1"},
		} {
			o := execAirlock(t, tt.env, "", tt.args...)
			if o.code != tt.code || !strings.Contains(o.stderr, tt.want) {
				t.Errorf("%s: exit %d, stderr %q; want %d and %q", tt.name, o.code, o.stderr, tt.code, tt.want)
			}
		}
		// A token sent in the clear off this host is warned of. (The
		// test's network namespace has only lo: nothing leaves.)
		if o := remote("", "ps", "--host", "http://192.0.2.1:7400"); !strings.Contains(o.stderr, "warning: the token goes to 192.0.2.1:7400 unencrypted") {
			t.Errorf("plain http off the host: %+v", o)
		}
		if o := remote("", "ps", "--host", host); strings.Contains(o.stderr, "warning") {
			t.Errorf("a warning for loopback: %+v", o)
		}
	})

	t.Run("sessions, ps and kill", func(t *testing.T) {
		o := remote("", "session", "create", "--host", host, "--tool", "sh")
		if o.code != 0 {
			t.Fatalf("session create: %+v", o)
		}
		id := strings.TrimSpace(o.stdout)
		if o := remote("remote file\n", "session", "cp", "--host", host, "-", id+":in.txt"); o.code != 0 {
			t.Fatalf("session cp in: %+v", o)
		}
		if o := remote("", "session", "exec", "--host", host, id, "--", "sh", "-c", "tr a-z A-Z < in.txt > out.txt"); o.code != 0 {
			t.Fatalf("session exec: %+v", o)
		}
		if o := remote("", "session", "cp", "--host", host, id+":out.txt", "-"); o.code != 0 || o.stdout != "REMOTE FILE\n" {
			t.Fatalf("session cp out: %+v", o)
		}
		if o := remote("", "session", "ls", "--host", host); o.code != 0 || !strings.Contains(o.stdout, id) {
			t.Fatalf("session ls: %+v", o)
		}
		// A run in flight, seen by ps and ended by kill, all remotely.
		bg := exec.Command(airlockBin(t), "run", "--host", host, "--tool", "sh", "--", "sleep", "60")
		bg.Env = append([]string{"PATH=/usr/bin:/bin"}, env...)
		var bgErr bytes.Buffer
		bg.Stderr = &bgErr
		if err := bg.Start(); err != nil {
			t.Fatal(err)
		}
		defer bg.Process.Kill()
		var run string
		for deadline := time.Now().Add(20 * time.Second); run == ""; {
			var a api.Activity
			o := remote("", "ps", "--host", host, "--json")
			jsonOut(t, []byte(o.stdout), &a)
			for _, r := range a.Runs {
				if r.Tool == "sh" {
					run = r.ID
				}
			}
			if run == "" && time.Now().After(deadline) {
				t.Fatalf("the run never showed in ps: %+v", o)
			}
			if len(a.Sessions) == 0 || a.Sessions[0].ID != id {
				t.Fatalf("ps shows sessions %+v, want %s", a.Sessions, id)
			}
			time.Sleep(50 * time.Millisecond)
		}
		if o := remote("", "kill", "--host", host, run, id); o.code != 0 {
			t.Fatalf("kill: %+v", o)
		}
		waited := make(chan error, 1)
		go func() { waited <- bg.Wait() }()
		select {
		case err := <-waited:
			// Killed, not a failure of airlock: 128+SIGKILL, not 125.
			if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 137 || !strings.Contains(bgErr.String(), "ended by airlock kill") {
				t.Errorf("the killed run: %v %q", err, bgErr.String())
			}
		case <-time.After(20 * time.Second):
			t.Fatal("the killed run did not end")
		}
		if o := remote("", "session", "show", "--host", host, id); o.code != 0 || !strings.Contains(o.stdout, `"state": "ended"`) {
			t.Errorf("the killed session: %+v", o)
		}
	})

	t.Run("audit", func(t *testing.T) {
		o := remote("", "audit", "--host", host, "--kind", "run.finished", "--json")
		if o.code != 0 || strings.Count(o.stdout, `"kind":"run.finished"`) < 3 {
			t.Fatalf("audit --host: %+v", o)
		}
		// --follow prints what comes after it started.
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		follow := exec.CommandContext(ctx, airlockBin(t), "audit", "--host", host, "--follow", "--kind", "run.finished", "--limit", "1")
		follow.Env = append([]string{"PATH=/usr/bin:/bin"}, env...)
		var out testutil.SyncBuffer
		follow.Stdout = &out
		if err := follow.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { cancel(); _ = follow.Wait() }()
		for deadline := time.Now().Add(10 * time.Second); !strings.Contains(out.String(), "run.finished"); time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("audit --follow printed nothing: %q", out.String())
			}
		}
		if o := remote("", "run", "--host", host, "--tool", "sh", "--", "true"); o.code != 0 {
			t.Fatal(o)
		}
		for deadline := time.Now().Add(10 * time.Second); strings.Count(out.String(), "run.finished") < 2; time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("audit --follow did not print the new run: %q", out.String())
			}
		}
	})

	t.Run("mcp", func(t *testing.T) {
		cmd := exec.Command(airlockBin(t), "mcp", "--host", host)
		cmd.Env = append([]string{"PATH=/usr/bin:/bin"}, env...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		opts, progress := progressRecorder()
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, opts).Connect(t.Context(), &mcp.CommandTransport{Command: cmd}, nil)
		if err != nil {
			t.Fatalf("connect: %v\n%s", err, stderr.String())
		}
		defer cs.Close()
		exerciseMCP(t, cs, progress)
		page, err := local.AuditFeed(t.Context(), clientQuery("mcp.call"))
		if err != nil || len(page.Events) < 3 || !strings.Contains(page.Events[0].Client, "token:full") {
			t.Fatalf("the daemon's MCP calls: %+v %v", page, err)
		}
	})

	t.Run("a terminal", func(t *testing.T) {
		tm := newTmux(t, fmt.Sprintf("AIRLOCK_TOKEN=%s %s run --host %s --tool sh -it -- bash --norc", full, airlockBin(t), host))
		tm.wait(`(?m)\$ $`)
		tm.keys("echo remote-$((6*7)) $(stty size)", "Enter")
		tm.wait("remote-42 30 100")
		tm.keys("exit 4", "Enter")
		tm.wait("exit=4 restored=yes")
	})
}

// clientQuery asks for the events of a kind, as many as a page holds.
func clientQuery(kind string) client.AuditQuery { return client.AuditQuery{Kind: kind, Limit: 1000} }
