package daemon

import (
	"bytes"
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/client"
	"github.com/airlockhq/airlock/internal/config"
	"github.com/airlockhq/airlock/internal/testutil"
	"github.com/airlockhq/airlock/internal/testutil/isolatednet"
	"github.com/airlockhq/airlock/result"
	"github.com/airlockhq/airlock/sandbox"
)

func TestMain(m *testing.M) {
	// Sandboxes re-execute the test binary as their init.
	if code, ok := sandbox.Child(); ok {
		os.Exit(code)
	}
	os.Exit(isolatednet.Main(m))
}

const testStateDir = "/run/airlock-test-daemon"

var testCgroup = testutil.CgroupParent("/airlock-test-daemon")

const testConfig = `
tools:
  sh:
    description: a shell
    pool: {warm: 2}
    limits: {memory: 64MiB, time: 5s}
    env: {GREETING: hello}
  cold:
    limits: {time: 300ms}
`

// start runs a daemon on a private socket until the test ends.
func start(t *testing.T) (*Daemon, *client.Client, string) {
	t.Helper()
	d, sock := serveConfig(t, testConfig, nil)
	return d, client.New(sock), sock
}

func cgroupCount(t *testing.T) int {
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

func TestRunThroughSocket(t *testing.T) {
	_, c, sock := start(t)
	ctx := t.Context()
	if err := c.Health(ctx); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(sock); err != nil || fi.Mode().Perm() != 0o660 {
		t.Fatalf("socket mode: %v %v", fi.Mode(), err)
	}
	r, err := c.Run(ctx, api.RunRequest{Tool: "sh", Argv: []string{"sh", "-c", `read x; echo "$GREETING $x from $(pwd)"`}, Stdin: "world\n"})
	if err != nil {
		t.Fatal(err)
	}
	if r.Outcome != result.Exited || r.ExitCode != 0 || string(r.Stdout) != "hello world from /workspace\n" {
		t.Fatalf("result %+v (stdout %q)", r, r.Stdout)
	}
	// Each run gets its own sandbox, never a used one.
	r2, err := c.Run(ctx, api.RunRequest{Tool: "sh", Argv: []string{"true"}})
	if err != nil || r2.SandboxID == r.SandboxID {
		t.Fatalf("second run: %+v, %v", r2, err)
	}
	pools, err := c.Pools(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if pools[0].Name != "sh" || pools[0].Hits+pools[0].Misses != 2 || pools[0].Warm != 2 {
		t.Fatalf("pools %+v", pools)
	}
	tools, err := c.Tools(ctx)
	if err != nil || len(tools) != 2 || tools[0].Name != "sh" || tools[0].Warm != 2 || tools[0].Description != "a shell" {
		t.Fatalf("tools %+v, %v", tools, err)
	}
}

// TestRunStreamAndLimit streams a command's output events, then its time
// breach. The ceiling is derived from how long the same command takes
// here without the sleep, so that on a slow machine (an emulated guest
// is tens of times slower) the output still comes before the breach: the
// run lowers its tool's 5 s ceiling to ten times that, at least 500 ms.
func TestRunStreamAndLimit(t *testing.T) {
	_, c, _ := start(t)
	const prints = "echo out; echo err >&2"
	began := time.Now()
	if r, err := c.Run(t.Context(), api.RunRequest{Tool: "sh", Argv: []string{"sh", "-c", prints}}); err != nil || r.Outcome != result.Exited {
		t.Fatalf("measure: %+v %v", r, err)
	}
	ceiling := min(max(10*time.Since(began), 500*time.Millisecond), 5*time.Second)
	var kinds []string
	r, err := c.RunStream(t.Context(), api.RunRequest{Tool: "sh", Argv: []string{"sh", "-c", prints + "; sleep 60"}, Limits: &api.RunLimits{Time: ceiling.String()}}, func(ev result.Event) {
		kinds = append(kinds, ev.Type)
	})
	if err != nil {
		t.Fatal(err)
	}
	if r.Outcome != result.LimitExceeded || r.Limit.Name != result.LimitTime || r.Limit.Ceiling != ceiling.Milliseconds() {
		t.Fatalf("result %+v (limit %+v), want the time limit at %v", r, r.Limit, ceiling)
	}
	joined := strings.Join(kinds, " ")
	if !strings.Contains(joined, "stdout") || !strings.Contains(joined, "stderr") {
		t.Fatalf("events %v", kinds)
	}
}

func TestBadRequests(t *testing.T) {
	_, c, sock := start(t)
	ctx := t.Context()
	_, err := c.Run(ctx, api.RunRequest{Tool: "nope", Argv: []string{"true"}})
	var ce *client.Error
	if !errors.As(err, &ce) || ce.Status != 404 || ce.Code != api.CodeNotFound || !strings.Contains(ce.Message, "sh") {
		t.Fatalf("unknown tool: %v", err)
	}
	raw := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
	tests := []struct {
		name, method, path, body string
		status                   int
		code                     string
	}{
		{"not json", "POST", "/v1/runs", "{", 400, api.CodeInvalid},
		{"unknown field", "POST", "/v1/runs", `{"tool":"sh","argv":["true"],"nope":{}}`, 400, api.CodeInvalid},
		{"unknown limit", "POST", "/v1/runs", `{"tool":"sh","argv":["true"],"limits":{"disk":"1MiB"}}`, 400, api.CodeInvalid},
		{"no argv", "POST", "/v1/runs", `{"tool":"sh"}`, 400, api.CodeInvalid},
		{"no tool", "POST", "/v1/runs", `{"argv":["true"]}`, 400, api.CodeInvalid},
		{"relative workdir", "POST", "/v1/runs", `{"tool":"sh","argv":["true"],"workdir":"tmp"}`, 400, api.CodeInvalid},
		{"two values", "POST", "/v1/runs", `{"tool":"sh","argv":["true"]} {}`, 400, api.CodeInvalid},
		{"too large", "POST", "/v1/runs", `{"tool":"sh","argv":["` + strings.Repeat("a", 2<<20) + `"]}`, 413, api.CodeTooLarge},
		{"wrong method", "GET", "/v1/runs", "", 405, api.CodeMethodNotAllowed},
		{"wrong method tools", "DELETE", "/v1/tools", "", 405, api.CodeMethodNotAllowed},
		{"no such endpoint", "GET", "/v2/things", "", 404, api.CodeNotFound},
	}
	for _, tt := range tests {
		req, _ := http.NewRequestWithContext(ctx, tt.method, "http://airlock"+tt.path, bytes.NewReader([]byte(tt.body)))
		resp, err := raw.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		var body api.Error
		_ = decodeJSON(resp, &body)
		if resp.StatusCode != tt.status || body.Code != tt.code || body.Message == "" {
			t.Errorf("%s: got %d %+v, want %d %s", tt.name, resp.StatusCode, body, tt.status, tt.code)
		}
	}
	// Still serving after all that.
	if err := c.Health(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestShutdownLeavesNothing(t *testing.T) {
	isolatednet.Require(t)
	before := cgroupCount(t)
	cfg, _ := config.Parse("airlock.yaml", []byte(testConfig))
	sock := filepath.Join(t.TempDir(), "airlock.sock")
	d, err := New(t.Context(), Options{Config: cfg, Socket: sock, Sandbox: sandbox.Options{StateDir: testStateDir, CgroupParent: testCgroup, InitPath: testutil.InitPath(t)}, AuditPath: testAudit(t), Grace: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Serve(ctx) }()
	c := client.New(sock)
	// An open session's sandbox is destroyed by the shutdown too.
	if _, err := c.CreateSession(context.Background(), api.SessionRequest{Tool: "sh"}); err != nil {
		t.Fatal(err)
	}
	// A run in flight when shutdown begins finishes.
	got := make(chan *result.Result, 1)
	go func() {
		r, _ := c.Run(context.Background(), api.RunRequest{Tool: "sh", Argv: []string{"sh", "-c", "sleep 0.5; echo done"}})
		got <- r
	}()
	deadline := time.Now().Add(10 * time.Second)
	for d.Pool("sh").Stats().Hits+d.Pool("sh").Stats().Misses < 2 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if r := <-got; r == nil || string(r.Stdout) != "done\n" {
		t.Fatalf("run in flight: %+v", r)
	}
	if n := cgroupCount(t); n != before {
		t.Fatalf("%d sandbox cgroups after shutdown, want %d", n, before)
	}
	if _, err := os.Stat(sock); !os.IsNotExist(err) {
		t.Fatalf("socket still there: %v", err)
	}
}

func TestSecondDaemonRefused(t *testing.T) {
	d, _, sock := start(t)
	// The refused daemon had started its pools (and their sandboxes'
	// gateways) before it found the socket taken: they all go.
	cfg, _ := config.Parse("airlock.yaml", []byte("tools:\n  p: {pool: {warm: 2}}\n"))
	deadline := time.Now().Add(10 * time.Second)
	for d.Pool("sh").Stats().Idle < 2 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond) // the first daemon's pool full: its count is steady
	}
	before := cgroupCount(t)
	_, err := New(t.Context(), Options{Config: cfg, Socket: sock, Sandbox: sandbox.Options{StateDir: testStateDir, CgroupParent: testCgroup, InitPath: testutil.InitPath(t)}, AuditPath: testAudit(t)})
	if err == nil || !strings.Contains(err.Error(), "another daemon") {
		t.Fatalf("second daemon on the same socket: %v", err)
	}
	if n := cgroupCount(t); n != before {
		t.Errorf("%d sandbox cgroups after the refusal, %d before (the first daemon's)", n, before)
	}
}

func TestMetrics(t *testing.T) {
	_, c, sock := start(t)
	ctx := t.Context()
	if _, err := c.Run(ctx, api.RunRequest{Tool: "sh", Argv: []string{"true"}}); err != nil {
		t.Fatal(err)
	}
	// A breach of the time ceiling (cold's is 300ms), and a session.
	if r, err := c.Run(ctx, api.RunRequest{Tool: "cold", Argv: []string{"sleep", "5"}}); err != nil || r.Outcome != result.LimitExceeded {
		t.Fatalf("a run past its time: %+v %v", r, err)
	}
	s, err := c.CreateSession(ctx, api.SessionRequest{Tool: "sh"})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.DeleteSession(ctx, s.ID); err != nil {
		t.Fatal(err)
	}
	raw := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
	get := func() string {
		resp, err := raw.Get("http://airlock/metrics")
		if err != nil {
			t.Fatal(err)
		}
		var b bytes.Buffer
		b.ReadFrom(resp.Body)
		resp.Body.Close()
		return b.String()
	}
	wants := []string{
		`# TYPE airlock_pool_hits_total counter`,
		`airlock_pool_warm_target{tool="sh"} 2`,
		`airlock_pool_warm_target{tool="cold"} 0`,
		`airlock_pool_claim_rate{tool="sh"} 0`,
		`# TYPE airlock_pool_released_total counter`,
		`airlock_runs_total 2`,
		`# TYPE airlock_run_duration_seconds histogram`,
		`airlock_run_outcomes_total{tool="sh",outcome="exited"} 1`,
		`airlock_run_outcomes_total{tool="cold",outcome="limit"} 1`,
		`airlock_limit_breaches_total{tool="cold",limit="time"} 1`,
		`airlock_sessions_opened_total{tool="sh"} 1`,
		`airlock_sessions_ended_total{tool="sh",reason="deleted"} 1`,
		`airlock_claim_duration_seconds_count{tool="cold",pool="cold"} 1`,
	}
	// The labelled ones are counted as the audit log commits: a moment
	// after the answers.
	var got string
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		got = get()
		missing := 0
		for _, want := range wants {
			if !strings.Contains(got, want) {
				missing++
			}
		}
		if missing == 0 || time.Now().After(deadline) {
			break
		}
	}
	for _, want := range wants {
		if !strings.Contains(got, want) {
			t.Errorf("metrics lack %q:\n%s", want, got)
		}
	}
	if !strings.Contains(got, `airlock_pool_hits_total{tool="sh"} 2`) && !strings.Contains(got, `airlock_pool_misses_total{tool="sh"} 1`) {
		t.Errorf("the claims are not counted:\n%s", got)
	}
	if !strings.Contains(got, `airlock_claim_duration_seconds_count{tool="sh",pool="warm"}`) && !strings.Contains(got, `airlock_claim_duration_seconds_count{tool="sh",pool="cold"}`) {
		t.Errorf("the claims' durations are not observed:\n%s", got)
	}
}

// testAudit is a fresh audit log path for one test's daemon.
func testAudit(t *testing.T) string {
	return filepath.Join(t.TempDir(), "audit.db")
}

// serveConfig runs a daemon with the config text until the test ends;
// adjust, if set, changes its options first. It returns the daemon and
// its socket.
func serveConfig(t *testing.T, text string, adjust func(*Options)) (*Daemon, string) {
	t.Helper()
	isolatednet.Require(t)
	cfg, err := config.Parse("airlock.yaml", []byte(text))
	if err != nil {
		t.Fatal(err)
	}
	opts := Options{Config: cfg, Socket: filepath.Join(t.TempDir(), "airlock.sock"), AuditPath: testAudit(t), SnapshotStore: filepath.Join(t.TempDir(), "snapshots"),
		VolumeStore: filepath.Join(t.TempDir(), "volumes"),
		Sandbox:     sandbox.Options{StateDir: testStateDir, CgroupParent: testCgroup, InitPath: testutil.InitPath(t)},
		// Over 5s: http.Server.Shutdown waits up to 5s for a connection
		// that has connected but not yet sent its request (an MCP
		// client reopening its event stream as shutdown begins).
		Grace: 10 * time.Second}
	if adjust != nil {
		adjust(&opts)
	}
	d, err := New(t.Context(), opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			buf := make([]byte, 1<<20)
			t.Errorf("%v; goroutines:\n%s", err, buf[:runtime.Stack(buf, true)])
		}
	})
	return d, opts.Socket
}

// mcpConnect opens an MCP client session (the Go SDK's) to the daemon's
// /mcp on its unix socket, closed when the test ends.
func mcpConnect(t *testing.T, sock string, opts *mcp.ClientOptions) *mcp.ClientSession {
	t.Helper()
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, opts).
		Connect(t.Context(), &mcp.StreamableClientTransport{Endpoint: "http://airlock/mcp", HTTPClient: hc}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}
