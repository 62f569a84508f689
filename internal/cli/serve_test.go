package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/client"
	"github.com/airlockhq/airlock/result"
)

// TestServeBinary runs the real `airlock serve`, makes a run through its
// socket, and stops it with SIGTERM as an init system would.
func TestServeBinary(t *testing.T) {
	requireRoot(t)
	cfg := writeConfig(t, "tools:\n  sh:\n    pool: {warm: 1}\n")
	sock := filepath.Join(t.TempDir(), "airlock.sock")
	auditDB := filepath.Join(t.TempDir(), "audit.db")
	cmd := exec.Command(airlockBin(t), "serve", "--config", cfg, "--socket", sock, "--audit", auditDB,
		"--state-dir", "/run/airlock-test-cli", "--cgroup-parent", testCgroup)
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	var logs bytes.Buffer
	cmd.Stderr = &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	c := waitForDaemon(t, sock, &logs, 20*time.Second)
	r, err := c.Run(t.Context(), api.RunRequest{Tool: "sh", Argv: []string{"echo", "through the daemon"}})
	if err != nil || string(r.Stdout) != "through the daemon\n" {
		t.Fatalf("run: %+v %v", r, err)
	}
	// The CLI goes through the daemon for a tool when no flag reshapes
	// the sandbox; output and exit codes are those of a run here.
	cli := func(stdin string, args ...string) (string, string, int) {
		o := execAirlock(t, nil, stdin, append([]string{"run", "--socket", sock, "--tool", "sh"}, args...)...)
		return o.stdout, o.stderr, o.code
	}
	if out, errs, code := cli("piped in", "--", "sh", "-c", "cat; echo; echo to-stderr >&2; exit 3"); out != "piped in\n" || !strings.Contains(errs, "to-stderr") || code != 3 {
		t.Fatalf("through the daemon: %q %q exit %d", out, errs, code)
	}
	out, _, code := cli("", "--json", "--", "sh", "-c", "exit 4")
	var res result.Result
	if err := json.Unmarshal([]byte(out), &res); err != nil || code != 4 || res.ExitCode != 4 {
		t.Fatalf("--json through the daemon: %q exit %d (%v)", out, code, err)
	}
	// A flag that reshapes the sandbox makes the run here, from the
	// config file, and airlock says so rather than switch silently.
	if out, errs, code := cli("", "--memory", "64MiB", "--config", cfg, "--state-dir", "/run/airlock-test-cli", "--cgroup-parent", testCgroup, "--", "echo", "here"); out != "here\n" || code != 0 ||
		!strings.Contains(errs, "--config, --state-dir, --cgroup-parent change how the sandbox is built, so this run is made here from the config file, not by the daemon on "+sock) {
		t.Fatalf("a reshaping flag: %q %q exit %d", out, errs, code)
	}
	// A flag that lowers a ceiling goes to the daemon, which holds the
	// run to it; one that would raise it is refused there, naming it.
	if out, errs, code := cli("", "--time", "1s", "--", "sleep", "30"); code != ExitLimit || !strings.Contains(errs, "time limit of 1s reached") || !strings.Contains(errs, "raise it with tools.sh.limits.time in the daemon's config") || strings.Contains(errs, "made here") {
		t.Fatalf("a lowered ceiling through the daemon: %q %q exit %d", out, errs, code)
	}
	if out, errs, code := cli("", "--time", "24h", "--", "true"); code == 0 || !strings.Contains(errs, "limits.time: 24h0m0s is over the tool's ceiling of") {
		t.Fatalf("a raised ceiling through the daemon: %q %q exit %d", out, errs, code)
	}
	// airlock mcp relays to the daemon, and says that its flags meant
	// for an embedded run are not used.
	mcpOut := execAirlock(t, nil, "", "mcp", "--socket", sock, "--config", "/nonexistent.yaml")
	if !strings.Contains(mcpOut.stderr, "the daemon on "+sock+" serves these calls with its config, audit log and image store, so --config is ignored; --embedded runs the tools here instead") {
		t.Fatalf("airlock mcp --config beside a daemon: exit %d %q", mcpOut.code, mcpOut.stderr)
	}
	st, err := c.Pools(t.Context())
	if err != nil || st[0].Hits+st[0].Misses < 4 {
		t.Fatalf("the runs did not go through the daemon: %+v %v", st, err)
	}
	// Sessions and pools from the command line.
	ac := func(stdin string, args ...string) (string, int) {
		o := execAirlock(t, nil, stdin, args...)
		if o.code != 0 && o.code != 5 {
			t.Logf("%v: stderr %s", args, o.stderr)
		}
		return o.stdout, o.code
	}
	id, code := ac("", "session", "create", "--socket", sock, "--tool", "sh")
	id = strings.TrimSpace(id)
	if code != 0 || !strings.HasPrefix(id, "s_") {
		t.Fatalf("session create: %q %d", id, code)
	}
	if _, code := ac("file body", "session", "cp", "--socket", sock, "-", id+":f.txt"); code != 0 {
		t.Fatalf("cp in: %d", code)
	}
	// A directory is refused plainly; a path with ".." is refused by the
	// daemon, not taken for a success.
	if o := execAirlock(t, nil, "", "session", "cp", "--socket", sock, t.TempDir(), id+":d"); o.code != ExitFailure || !strings.Contains(o.stderr, "is a directory: session cp copies one file") {
		t.Fatalf("cp of a directory: exit %d %q", o.code, o.stderr)
	}
	if o := execAirlock(t, nil, "x", "session", "cp", "--socket", sock, "-", id+":sub/../g.txt"); o.code == 0 || !strings.Contains(o.stderr, "segments") {
		t.Fatalf("cp to sub/../g.txt: exit %d %q", o.code, o.stderr)
	}
	if out, code := ac("", "session", "exec", "--socket", sock, id, "--", "cat", "f.txt"); out != "file body" || code != 0 {
		t.Fatalf("exec: %q %d", out, code)
	}
	if _, code := ac("", "session", "exec", "--socket", sock, id, "--", "sh", "-c", "exit 5"); code != 5 {
		t.Fatalf("exec exit code: %d", code)
	}
	if out, code := ac("", "session", "cp", "--socket", sock, id+":f.txt", "-"); out != "file body" || code != 0 {
		t.Fatalf("cp out: %q %d", out, code)
	}
	if out, code := ac("", "pool", "ls", "--socket", sock); code != 0 || !strings.Contains(out, "sh ") || !strings.Contains(out, "fixed: pool.warm is") {
		t.Fatalf("pool ls: %q %d", out, code)
	}
	if out, code := ac("", "ps", "--socket", sock); code != 0 || !strings.HasPrefix(out, "ID ") || !strings.Contains(out, id+"  session  sh") {
		t.Fatalf("ps: %q %d", out, code)
	}
	if o := execAirlock(t, nil, "", "kill", "--socket", sock, "r_0000"); o.code != ExitFailure || !strings.Contains(o.stderr, `no run "r_0000" in flight`) {
		t.Fatalf("kill of no run: exit %d %q", o.code, o.stderr)
	}
	// airlock audit: the runs above, as JSON lines and as text.
	o := execAirlock(t, nil, "", "audit", "--socket", sock, "--kind", "run.finished", "--json")
	lines := strings.Split(strings.TrimSpace(o.stdout), "\n")
	if o.code != 0 || len(lines) != 6 {
		t.Fatalf("audit --json: exit %d, %d lines, want 6:\n%s%s", o.code, len(lines), o.stdout, o.stderr)
	}
	var ev api.AuditEvent
	if err := json.Unmarshal([]byte(lines[5]), &ev); err != nil || ev.Decision != "exited" || ev.Session != id || !strings.Contains(string(ev.Detail), `"exit_code":5`) {
		t.Fatalf("the last run.finished: %s (%v)", lines[5], err)
	}
	o = execAirlock(t, nil, "", "audit", "--socket", sock, "--since", "1h", "--tool", "sh", "--decision", "exited")
	if o.code != 0 || strings.Count(o.stdout, " run.finished ") != 5 || !strings.Contains(o.stdout, "client=unix:uid=0,pid=") {
		t.Fatalf("audit text: exit %d\n%s%s", o.code, o.stdout, o.stderr)
	}
	if o := execAirlock(t, nil, "", "audit", "--socket", sock, "--since", "later"); o.code == 0 || !strings.Contains(o.stderr, "since") {
		t.Fatalf("audit --since later: exit %d %q", o.code, o.stderr)
	}
	if o := execAirlock(t, nil, "", "audit", "--socket", sock, "--limit", "0"); o.code != ExitUsage {
		t.Fatalf("audit --limit 0: exit %d %q", o.code, o.stderr)
	}
	// --follow prints the newest, then what is recorded after it.
	follow := exec.Command(airlockBin(t), "audit", "--socket", sock, "--follow", "--kind", "run.finished", "--limit", "1")
	pr, err := follow.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := follow.Start(); err != nil {
		t.Fatal(err)
	}
	defer follow.Process.Kill()
	lr := bufio.NewReader(pr)
	if l, err := lr.ReadString('\n'); err != nil || !strings.Contains(l, `"exit_code":5`) {
		t.Fatalf("follow's first line: %q %v", l, err)
	}
	if _, err := c.Run(t.Context(), api.RunRequest{Tool: "sh", Argv: []string{"sh", "-c", "exit 7"}}); err != nil {
		t.Fatal(err)
	}
	got := make(chan string, 1)
	go func() { l, _ := lr.ReadString('\n'); got <- l }()
	select {
	case l := <-got:
		if !strings.Contains(l, `"exit_code":7`) {
			t.Fatalf("follow's next line: %q", l)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("--follow did not print the new run")
	}
	if out, code := ac("", "session", "ls", "--socket", sock); code != 0 || !strings.Contains(out, id) || !strings.Contains(out, "active") {
		t.Fatalf("session ls: %q %d", out, code)
	}
	if _, code := ac("", "session", "rm", "--socket", sock, id); code != 0 {
		t.Fatalf("session rm: %d", code)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("daemon exit: %v\n%s", err, logs.String())
	}
	if _, err := os.Stat(sock); !os.IsNotExist(err) {
		t.Fatalf("socket left behind: %v", err)
	}
	// With the daemon gone, audit says so, and --db reads the file.
	if o := execAirlock(t, nil, "", "audit", "--socket", sock); o.code != ExitFailure || !strings.Contains(o.stderr, "no airlock daemon answers on "+sock) || !strings.Contains(o.stderr, "--db FILE") {
		t.Errorf("audit without a daemon: exit %d %q", o.code, o.stderr)
	}
	if o := execAirlock(t, nil, "", "audit", "--db", auditDB, "--kind", "run.finished", "--json"); o.code != 0 || strings.Count(o.stdout, "\n") != 7 || !strings.Contains(o.stdout, `"exit_code":7`) {
		t.Errorf("audit --db: exit %d\n%s%s", o.code, o.stdout, o.stderr)
	}
	if o := execAirlock(t, nil, "", "audit", "--db", auditDB, "--kind", "nope"); o.code != ExitFailure || !strings.Contains(o.stderr, `no events are of kind "nope"`) {
		t.Errorf("audit --db --kind nope: exit %d %q", o.code, o.stderr)
	}
	// The log says where it listened, what it serves and that it stopped.
	for _, want := range []string{"msg=listening socket=" + sock, "msg=serving", "config=" + cfg, "tools=1", "msg=\"shutting down\"", "msg=stopped"} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("the daemon's log lacks %q:\n%s", want, logs.String())
		}
	}
}

// waitForDaemon waits up to d for the daemon on sock to answer and returns
// a client of it; logs are the daemon's, shown if it never does.
func waitForDaemon(t *testing.T, sock string, logs *bytes.Buffer, d time.Duration) *client.Client {
	t.Helper()
	c := client.New(sock)
	deadline := time.Now().Add(d)
	for c.Health(t.Context()) != nil {
		if time.Now().After(deadline) {
			t.Fatalf("daemon never answered:\n%s", logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	return c
}

// serveCmd starts `airlock serve` with the config file cfg on sock, with
// the tests' state directory and cgroup parent, its stderr in logs.
func serveCmd(t *testing.T, cfg, sock, auditDB string) (cmd *exec.Cmd, logs *bytes.Buffer) {
	t.Helper()
	cmd = exec.Command(airlockBin(t), "serve", "--config", cfg, "--socket", sock, "--audit", auditDB,
		"--state-dir", "/run/airlock-test-cli", "--cgroup-parent", testCgroup)
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	logs = &bytes.Buffer{}
	cmd.Stderr = logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return cmd, logs
}

func cliCgroups(t *testing.T) int {
	dir := "/sys/fs/cgroup" + testCgroup
	if _, err := os.Stat("/sys/fs/cgroup/pids"); err == nil {
		dir = "/sys/fs/cgroup/pids" + testCgroup
	}
	ents, _ := os.ReadDir(dir)
	n := 0
	for _, e := range ents {
		if e.IsDir() {
			n++
		}
	}
	return n
}

// cliSandboxesAnywhere counts the sandboxes that have a cgroup in any
// hierarchy under the tests' parent.
func cliSandboxesAnywhere(t *testing.T) int {
	t.Helper()
	dirs, _ := filepath.Glob("/sys/fs/cgroup/*" + testCgroup)
	if _, err := os.Stat("/sys/fs/cgroup" + testCgroup); err == nil {
		dirs = append(dirs, "/sys/fs/cgroup"+testCgroup)
	}
	ids := map[string]bool{}
	for _, d := range dirs {
		ents, _ := os.ReadDir(d)
		for _, e := range ents {
			if e.IsDir() {
				ids[e.Name()] = true
			}
		}
	}
	return len(ids)
}

// TestServeKilledThenRestarted kills the daemon with SIGKILL in the middle
// of a run: its sandboxes die with it, and the next daemon sweeps what is
// left before it serves, even on the same socket path. Every event the
// first daemon acknowledged is still in the audit log, and the sweep is
// recorded.
func TestServeKilledThenRestarted(t *testing.T) {
	requireRoot(t)
	cfg := writeConfig(t, "tools:\n  sh:\n    pool: {warm: 2}\n")
	sock := filepath.Join(t.TempDir(), "airlock.sock")
	auditDB := filepath.Join(t.TempDir(), "audit.db")
	start := func() *exec.Cmd {
		cmd := exec.Command(airlockBin(t), "serve", "--config", cfg, "--socket", sock, "--audit", auditDB,
			"--state-dir", "/run/airlock-test-cli", "--cgroup-parent", testCgroup)
		cmd.Env = []string{"PATH=/usr/bin:/bin"}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		// A test that fails before it ends this daemon itself still
		// ends it, as a shutdown (which destroys its sandboxes), so
		// nothing of it meets the next test.
		t.Cleanup(func() {
			if cmd.ProcessState != nil {
				return
			}
			_ = cmd.Process.Signal(syscall.SIGTERM)
			done := make(chan struct{})
			go func() { _ = cmd.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(15 * time.Second):
				_ = cmd.Process.Kill()
				<-done
			}
		})
		c := client.New(sock)
		deadline := time.Now().Add(20 * time.Second)
		for {
			ps, err := c.Pools(t.Context())
			if err == nil && ps[0].Idle == 2 {
				return cmd
			}
			if time.Now().After(deadline) {
				t.Fatalf("daemon not ready: %+v %v", ps, err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	first := start()
	c := client.New(sock)
	// Runs answered before the crash, from several clients at once.
	var mu sync.Mutex
	acked := map[string]bool{} // sandbox ids of answered runs
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 5 {
				r, err := c.Run(t.Context(), api.RunRequest{Tool: "sh", Argv: []string{"true"}})
				if err != nil || r.Outcome != result.Exited {
					t.Errorf("run: %+v %v", r, err)
					return
				}
				mu.Lock()
				acked[r.SandboxID] = true
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	s, err := c.CreateSession(t.Context(), api.SessionRequest{Tool: "sh"})
	if err != nil {
		t.Fatal(err)
	}
	go c.Run(context.Background(), api.RunRequest{Tool: "sh", Argv: []string{"sleep", "60"}})
	deadline := time.Now().Add(10 * time.Second)
	for cliCgroups(t) < 4 {
		if time.Now().After(deadline) {
			t.Fatalf("%d sandbox cgroups while running, want at least 4", cliCgroups(t))
		}
		time.Sleep(20 * time.Millisecond)
	}
	first.Process.Kill()
	first.Wait()
	// Counted once the first daemon is dead: until then its pool could
	// still make a sandbox (or the cgroup of the next) after a count.
	// In every hierarchy: one killed in the middle of its teardown may
	// be gone from some of v1's and not from others, and is a leftover
	// the sweep finds.
	left := cliSandboxesAnywhere(t)
	second := start()
	// The first daemon's sandboxes are gone; only the new pool remains,
	// and the cgroup its runtime may have made ahead for the next one.
	if n := cliCgroups(t); n != 2 && n != 3 {
		t.Fatalf("%d sandbox cgroups after the restart, want the new pool's 2 (and one made ahead)", n)
	}
	finished := map[string]bool{}
	for after := int64(0); ; {
		p, err := c.Audit(t.Context(), client.AuditQuery{Kind: "run.finished", After: after, Limit: 1000})
		if err != nil {
			t.Fatal(err)
		}
		if len(p.Events) == 0 {
			break
		}
		for _, ev := range p.Events {
			finished[ev.Sandbox] = true
		}
		after = p.Next
	}
	for id := range acked {
		if !finished[id] {
			t.Errorf("the answered run in sandbox %s is missing from the audit log after kill -9", id)
		}
	}
	if len(acked) != 20 {
		t.Errorf("%d runs answered, want 20", len(acked))
	}
	if p, err := c.Audit(t.Context(), client.AuditQuery{Session: s.ID, Kind: "session.created"}); err != nil || len(p.Events) != 1 {
		t.Errorf("the acknowledged session is not in the log: %+v %v", p, err)
	}
	swept, err := c.Audit(t.Context(), client.AuditQuery{Kind: "sandbox.swept"})
	if err != nil {
		t.Fatal(err)
	}
	if len(swept.Events) != left {
		t.Errorf("%d sweeps recorded, want the %d sandboxes the first daemon left", len(swept.Events), left)
	}
	second.Process.Signal(syscall.SIGTERM)
	if err := second.Wait(); err != nil {
		t.Fatal(err)
	}
	if n := cliCgroups(t); n != 0 {
		t.Fatalf("%d sandbox cgroups after shutdown", n)
	}
}
