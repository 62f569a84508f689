package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/client"
	"github.com/airlockhq/airlock/internal/config"
	"github.com/airlockhq/airlock/internal/e2b"
	"github.com/airlockhq/airlock/internal/testutil"
	"github.com/airlockhq/airlock/internal/testutil/isolatednet"
	"github.com/airlockhq/airlock/sandbox"
)

// sandboxCPU reads the CPU time a sandbox's cgroup has used, from the
// host (v1 cpuacct.usage or v2 cpu.stat).
func sandboxCPU(t *testing.T, id string) time.Duration {
	t.Helper()
	for _, dir := range sandboxCgroups(id) {
		if b, err := os.ReadFile(filepath.Join(dir, "cpuacct.usage")); err == nil {
			n, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
			return time.Duration(n)
		}
		if b, err := os.ReadFile(filepath.Join(dir, "cpu.stat")); err == nil {
			for _, l := range strings.Split(string(b), "\n") {
				if v, ok := strings.CutPrefix(l, "usage_usec "); ok {
					n, _ := strconv.ParseInt(v, 10, 64)
					return time.Duration(n) * time.Microsecond
				}
			}
		}
	}
	t.Fatalf("no CPU accounting found for sandbox %s", id)
	return 0
}

// TestSessionPauseResume pauses a session with a process spinning in it,
// over the native API: paused, the kernel's accounting (read from the
// host) shows it takes no CPU, its calls are refused as paused, and a
// second paused session is past the node's ceiling of one; resumed, the
// same process runs on. A session ended while paused leaves no cgroup,
// and the pause and the resume are in the audit log with who asked.
func TestSessionPauseResume(t *testing.T) {
	_, sock := serveConfig(t, testConfig+"server:\n  capacity: {paused: 1}\n", nil)
	c := client.New(sock)
	ctx := t.Context()
	s, err := c.CreateSession(ctx, api.SessionRequest{Tool: "sh"})
	if err != nil {
		t.Fatal(err)
	}
	r, err := c.Exec(ctx, s.ID, api.ExecRequest{Argv: []string{"sh", "-c", `sh -c 'while :; do :; done' >/dev/null 2>&1 & echo $! > spinner`}})
	if err != nil || r.ExitCode != 0 {
		t.Fatalf("start the spinner: %+v %v", r, err)
	}
	waitCPU := func(from time.Duration) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); sandboxCPU(t, s.SandboxID)-from < 50*time.Millisecond; time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatal("the spinner does not run")
			}
		}
	}
	waitCPU(0)

	p, err := c.PauseSession(ctx, s.ID)
	if err != nil {
		t.Fatalf("pause: %v", err)
	}
	if p.State != api.SessionPaused || p.PausedAt == "" {
		t.Errorf("paused session %+v; want state paused with paused_at", p)
	}
	var ce *client.Error
	if _, err := c.PauseSession(ctx, s.ID); !errors.As(err, &ce) || ce.Status != 409 {
		t.Errorf("a second pause: %v; want 409", err)
	}
	if _, err := c.Exec(ctx, s.ID, api.ExecRequest{Argv: []string{"true"}}); !errors.As(err, &ce) || ce.Status != 409 || !strings.Contains(err.Error(), "paused") {
		t.Errorf("exec while paused: %v; want 409 saying it is paused", err)
	}
	if _, err := c.GetFile(ctx, s.ID, "spinner"); !errors.As(err, &ce) || ce.Status != 409 {
		t.Errorf("a file read while paused: %v; want 409", err)
	}
	// The budget says so: still live, reserved, and paused.
	raw := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
	if resp, err := raw.Get("http://airlock/metrics"); err != nil {
		t.Error(err)
	} else {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !strings.Contains(string(b), "\nairlock_sandboxes_paused 1\n") || !strings.Contains(string(b), "\nairlock_sandboxes_paused_memory_bytes 67108864\n") {
			t.Errorf("/metrics does not say one 64 MiB sandbox is paused:\n%s", b)
		}
	}
	at := sandboxCPU(t, s.SandboxID)
	time.Sleep(500 * time.Millisecond)
	if d := sandboxCPU(t, s.SandboxID) - at; d > 5*time.Millisecond {
		t.Errorf("a paused session's sandbox used %v of CPU in 500ms; want none", d)
	}

	other, err := c.CreateSession(ctx, api.SessionRequest{Tool: "sh"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.PauseSession(ctx, other.ID); !errors.As(err, &ce) || ce.Status != 429 || !strings.Contains(err.Error(), "server.capacity.paused") {
		t.Errorf("a pause past capacity.paused: %v; want 429 naming the ceiling", err)
	}
	if o, err := c.Session(ctx, other.ID); err != nil || o.State != api.SessionActive {
		t.Errorf("the refused session: %+v %v; want it active, unchanged", o, err)
	}

	resumed, err := c.ResumeSession(ctx, s.ID, nil)
	if err != nil || resumed.State != api.SessionActive {
		t.Fatalf("resume: %+v %v", resumed, err)
	}
	waitCPU(sandboxCPU(t, s.SandboxID))
	r, err = c.Exec(ctx, s.ID, api.ExecRequest{Argv: []string{"sh", "-c", `kill -0 "$(cat spinner)" && echo alive`}})
	if err != nil || string(r.Stdout) != "alive\n" {
		t.Fatalf("the spinner after resume: %+v %v", r, err)
	}
	if _, err := c.ResumeSession(ctx, s.ID, nil); err != nil {
		t.Errorf("resuming a running session: %v; want nothing done", err)
	}
	// Its place among the paused is free again.
	if _, err := c.PauseSession(ctx, other.ID); err != nil {
		t.Errorf("pause once the first resumed: %v", err)
	}

	// Ended while paused: nothing of it is left.
	if _, err := c.PauseSession(ctx, s.ID); !errors.As(err, &ce) || ce.Status != 429 {
		t.Errorf("pause past the ceiling again: %v; want 429", err)
	}
	if err := c.DeleteSession(ctx, other.ID); err != nil {
		t.Fatal(err)
	}
	if left := sandboxCgroups(other.SandboxID); len(left) > 0 {
		t.Errorf("a session ended while paused left its cgroups: %v", left)
	}
	if _, err := c.PauseSession(ctx, s.ID); err != nil {
		t.Errorf("pause once the paused one ended: %v", err)
	}
	if err := c.DeleteSession(ctx, s.ID); err != nil {
		t.Fatal(err)
	}

	page, err := c.Audit(ctx, client.AuditQuery{Session: s.ID, Kind: "session"})
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, e := range page.Events {
		if strings.HasPrefix(e.Kind, "session.paused") || strings.HasPrefix(e.Kind, "session.resumed") {
			kinds = append(kinds, e.Kind)
			if e.Client == "" || !strings.Contains(string(e.Detail), `"reason":"asked"`) {
				t.Errorf("%s event %+v: want who asked and the reason", e.Kind, e)
			}
		}
	}
	if got, want := strings.Join(kinds, ","), "session.paused,session.resumed,session.paused"; got != want {
		t.Errorf("audit: %s; want %s", got, want)
	}
}

// TestE2BPauseJS pauses and resumes sandboxes through E2B's JavaScript
// SDK (testdata/e2b_pause.mjs): pause then connect (the same process,
// its count kept in memory, and the files), a second pause answered
// false, another key refused, the paused state listed; auto-pause on
// timeout, then a resume on traffic (autoResume) or on connect.
func TestE2BPauseJS(t *testing.T) {
	sdk := e2bSDK(t)
	isolatednet.Require(t)
	base := serveE2B(t, "")
	cmd := exec.Command("node", "testdata/e2b_pause.mjs")
	cmd.Env = append(os.Environ(), "E2B_SDK="+sdk, "E2B_API_URL="+base, "E2B_SANDBOX_URL="+base, "E2B_API_KEY="+e2bKey, "OTHER_KEY=other-0123456789abcdef")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	outb, err := cmd.Output()
	steps := scriptSteps(outb)
	if err != nil || steps["fatal"] != nil {
		t.Fatalf("the SDK's script: %v\n%s\n%s", err, outb, stderr.String())
	}
	want := map[string]string{
		"pause":        `true`,
		"pausedstate":  `"paused"`,
		"pauseagain":   `false`,
		"whilepaused":  `"SandboxNotFoundError"`,
		"otherkey":     `"SandboxNotFoundError"`,
		"listpaused":   `["this"]`,
		"resumedstate": `"running"`,
		"sameprocess":  `true`,
		"files":        `"files survive a pause"`,
		"lifecycle":    `{"onTimeout":"pause","autoResume":true}`,
		"autopaused":   `true`,
		"autoresumed":  `"running"`,
		"autosame":     `true`,
		"keptpaused":   `true`,
		"noautoresume": `"SandboxNotFoundError"`,
		"keptconnect":  `"up\n"`,
		"stillrunning": `"running"`,
	}
	for k, v := range want {
		if got := string(steps[k]); got != v {
			t.Errorf("%s: got %s, want %s", k, got, v)
		}
	}
	if m := string(steps["memoryless"]); !strings.Contains(m, "keeps only the files") {
		t.Errorf("a pause without memory: %s; want it refused, saying why", m)
	}
	if t.Failed() {
		t.Logf("the SDK said:\n%s\n%s", outb, stderr.String())
	}
}

// TestE2BPausedAcrossRestart pauses an E2B sandbox, stops the daemon and
// starts another on the same stores: the sandbox is listed paused, its
// metadata kept; a plain connect is refused, naming onResume "reboot";
// a connect with it (memory: false) gives new credentials and a fresh
// sandbox with the files.
func TestE2BPausedAcrossRestart(t *testing.T) {
	isolatednet.Require(t)
	t.Setenv("TEST_E2B_KEY", e2bKey)
	addr := freePort(t)
	base := "http://" + addr
	snaps, auditDB := filepath.Join(t.TempDir(), "snapshots"), testAudit(t)
	text := "server:\n  e2b: " + addr + "\n  tokens:\n    - {name: agent, secret: key, tools: [\"*\"]}\nsecrets:\n  key: {env: TEST_E2B_KEY}\ntools:\n  sh: {}\n"
	start := func() (*client.Client, func()) {
		cfg, err := config.Parse("airlock.yaml", []byte(text))
		if err != nil {
			t.Fatal(err)
		}
		sock := filepath.Join(t.TempDir(), "airlock.sock")
		d, err := New(t.Context(), Options{Config: cfg, Socket: sock, AuditPath: auditDB, SnapshotStore: snaps, VolumeStore: filepath.Join(t.TempDir(), "volumes"),
			Sandbox: sandbox.Options{StateDir: testStateDir, CgroupParent: testCgroup, InitPath: testutil.InitPath(t)}, Grace: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- d.Serve(ctx) }()
		var once sync.Once
		stop := func() {
			once.Do(func() {
				cancel()
				if err := <-done; err != nil {
					t.Errorf("serve: %v", err)
				}
			})
		}
		t.Cleanup(stop)
		c := client.New(sock)
		for deadline := time.Now().Add(10 * time.Second); c.Health(t.Context()) != nil; time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatal("the daemon never answered")
			}
		}
		return c, stop
	}
	call := func(method, path string, body string) (int, []byte) {
		return e2bDo(t, method, base+path, nil, map[string]string{"X-API-KEY": e2bKey, "Content-Type": "application/json"}, strings.NewReader(body))
	}
	c, stop := start()
	status, b := call("POST", "/sandboxes", `{"templateID":"sh","metadata":{"team":"blue"},"envVars":{"GREETING":"hi"}}`)
	var sb e2b.Sandbox
	if status != 201 || json.Unmarshal(b, &sb) != nil {
		t.Fatalf("create: %d %s", status, b)
	}
	if r, err := c.Exec(t.Context(), sb.SandboxID, api.ExecRequest{Argv: []string{"sh", "-c", "echo kept > /tmp/k"}}); err != nil || r.ExitCode != 0 {
		t.Fatalf("%+v %v", r, err)
	}
	if status, b := call("POST", "/sandboxes/"+sb.SandboxID+"/pause", ""); status != 204 {
		t.Fatalf("pause: %d %s", status, b)
	}
	record := filepath.Join(snaps, "paused", "session-"+sb.SandboxID+".rec")
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if _, err := os.Stat(record); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the pause's files were never kept")
		}
	}
	stop()

	c, _ = start()
	status, b = call("GET", "/sandboxes/"+sb.SandboxID, "")
	var det e2b.Detail
	if status != 200 || json.Unmarshal(b, &det) != nil || det.State != "paused" || det.Metadata["team"] != "blue" {
		t.Fatalf("after the restart: %d %s; want it paused, its metadata kept", status, b)
	}
	if status, b := call("POST", "/sandboxes/"+sb.SandboxID+"/connect", `{}`); status != 409 || !strings.Contains(string(b), "reboot") {
		t.Errorf("a plain connect: %d %s; want 409 naming onResume reboot", status, b)
	}
	status, b = call("POST", "/v2/sandboxes/"+sb.SandboxID+"/connect", `{"memory":false}`)
	var again e2b.Sandbox
	if status != 201 || json.Unmarshal(b, &again) != nil || again.EnvdAccessToken == "" || again.EnvdAccessToken == sb.EnvdAccessToken {
		t.Fatalf("connect with reboot: %d %s; want 201 and new credentials", status, b)
	}
	status, b = e2bDo(t, "GET", base+"/files?path=/tmp/k", &again, nil, nil)
	if status != 200 || string(b) != "kept\n" {
		t.Errorf("the file after the resume: %d %q", status, b)
	}
	if r, err := c.Exec(t.Context(), sb.SandboxID, api.ExecRequest{Argv: []string{"cat", "/tmp/k"}}); err != nil || string(r.Stdout) != "kept\n" {
		t.Errorf("exec after the resume: %+v %v", r, err)
	}
}
