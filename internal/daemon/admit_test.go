package daemon

import (
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/client"
	"github.com/airlockhq/airlock/internal/config"
	"github.com/airlockhq/airlock/internal/linux/cgroup"
	"github.com/airlockhq/airlock/internal/testutil"
	"github.com/airlockhq/airlock/internal/testutil/isolatednet"
	"github.com/airlockhq/airlock/result"
	"github.com/airlockhq/airlock/sandbox"
)

// apiErr returns err as the daemon's answer, failing the test otherwise.
func apiErr(t *testing.T, err error) *client.Error {
	t.Helper()
	var ce *client.Error
	if !errors.As(err, &ce) {
		t.Fatalf("want an API error, got %v", err)
	}
	return ce
}

// waitIdle waits until pool name holds n ready sandboxes.
func waitIdle(t *testing.T, c *client.Client, name string, n int) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		ps, err := c.Pools(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range ps {
			if p.Name == name && p.Idle == n {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("pool %s never held %d: %+v", name, n, ps)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestCapacity: the node's budget counts every sandbox, warm ones too. A
// claim that finds it spent takes room from another pool's ready
// sandboxes; when the sandboxes are all at work, the call is refused with
// 503 capacity and a Retry-After, and succeeds again once one is gone.
func TestCapacity(t *testing.T) {
	d, sock := serveConfig(t, `
server:
  capacity: {sandboxes: 2}
tools:
  warm:
    pool: {warm: 2}
    limits: {memory: 64MiB}
  cold:
    limits: {memory: 64MiB, time: 20s}
`, nil)
	c := client.New(sock)
	waitIdle(t, c, "warm", 2)
	if r, err := c.Run(t.Context(), api.RunRequest{Tool: "cold", Argv: []string{"true"}}); err != nil || r.Outcome != result.Exited {
		t.Fatalf("a run with the budget held by a warm pool: %+v %v", r, err)
	}
	if st := d.Pool("warm").Stats(); st.Evicted < 1 {
		t.Fatalf("the warm pool gave up no sandbox: %+v", st)
	}
	// Two runs at work hold the whole budget. The pool refills after the
	// eviction first: a claim evicts only ready sandboxes, and one the
	// pool is still making when both runs claim would leave the second
	// nothing to evict (a slow host made the refill race them).
	waitIdle(t, c, "warm", 2)
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			if r, err := c.Run(context.Background(), api.RunRequest{Tool: "cold", Argv: []string{"sleep", "2"}}); err != nil || r.Outcome != result.Exited {
				t.Errorf("a sleeping run: %+v %v", r, err)
			}
		})
	}
	deadline := time.Now().Add(10 * time.Second)
	for d.Runtime().Usage().Sandboxes < 2 || d.Pool("warm").Stats().Idle > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the sleeping runs never held the budget: %+v", d.Runtime().Usage())
		}
		time.Sleep(10 * time.Millisecond)
	}
	_, err := c.Run(t.Context(), api.RunRequest{Tool: "cold", Argv: []string{"true"}})
	ce := apiErr(t, err)
	if ce.Status != http.StatusServiceUnavailable || ce.Code != api.CodeCapacity || ce.RetryAfter <= 0 {
		t.Fatalf("a run past the budget: %+v, want 503 %s with Retry-After", ce, api.CodeCapacity)
	}
	t.Log(ce.Message)
	if u := d.Runtime().Usage(); u.Sandboxes > 2 {
		t.Fatalf("usage %+v past the budget", u)
	}
	wg.Wait()
	if r, err := c.Run(t.Context(), api.RunRequest{Tool: "cold", Argv: []string{"true"}}); err != nil || r.Outcome != result.Exited {
		t.Fatalf("a run once the budget is free: %+v %v", r, err)
	}
}

// TestCapacityRefusesAToolThatCannotFit: a tool whose ceiling is over the
// node's whole budget is a configuration error at start, naming it.
func TestCapacityRefusesAToolThatCannotFit(t *testing.T) {
	cfg, err := config.Parse("a.yaml", []byte("server: {capacity: {memory: 256MiB}}\ntools:\n  big: {limits: {memory: 1GiB}}\n"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = New(t.Context(), Options{Config: cfg, Socket: filepath.Join(t.TempDir(), "a.sock"), AuditPath: testAudit(t),
		Sandbox: sandbox.Options{StateDir: testStateDir, CgroupParent: testCgroup, InitPath: testutil.InitPath(t)}})
	if err == nil || !contains(err.Error(), "tool big", "1GiB", "256MiB", "server.capacity") {
		t.Fatalf("New: %v", err)
	}
}

// TestSessionCapUnderRace: 40 sessions asked for at once of a daemon that
// allows 5 give exactly 5; the rest are refused with 503 and a
// Retry-After (the check and the count used to be apart, with a claim of
// tens of milliseconds between, and 20 got through).
func TestSessionCapUnderRace(t *testing.T) {
	_, sock := serveConfig(t, "tools:\n  sh: {limits: {memory: 64MiB}}\n", func(o *Options) { o.MaxSessions = 5 })
	c := client.New(sock)
	var mu sync.Mutex
	var opened []string
	refused := 0
	var wg sync.WaitGroup
	for range 40 {
		wg.Go(func() {
			s, err := c.CreateSession(t.Context(), api.SessionRequest{Tool: "sh"})
			mu.Lock()
			defer mu.Unlock()
			if err == nil {
				opened = append(opened, s.ID)
				return
			}
			var ce *client.Error
			if errors.As(err, &ce) && ce.Status == http.StatusServiceUnavailable && ce.RetryAfter > 0 {
				refused++
				return
			}
			t.Errorf("CreateSession: %v", err)
		})
	}
	wg.Wait()
	if len(opened) != 5 || refused != 35 {
		t.Fatalf("%d sessions opened and %d refused, want 5 and 35", len(opened), refused)
	}
	for _, id := range opened {
		if err := c.DeleteSession(t.Context(), id); err != nil {
			t.Fatal(err)
		}
	}
	s, err := c.CreateSession(t.Context(), api.SessionRequest{Tool: "sh"})
	if err != nil {
		t.Fatalf("a session once the others ended: %v", err)
	}
	c.DeleteSession(t.Context(), s.ID)
}

// TestTokenConcurrency: a token with concurrency 2 holding two sessions
// gets 429 too_many_requests, with a Retry-After, for a third session and
// for a run, and a run again once a session ends. Another token is not
// held back by it.
func TestTokenConcurrency(t *testing.T) {
	addr := freePort(t)
	t.Setenv("TEST_TOK_A", "token-a-0123456789abcdef")
	t.Setenv("TEST_TOK_B", "token-b-0123456789abcdef")
	serveConfig(t, `
server:
  tcp: `+addr+`
  tokens:
    - {name: a, secret: a, tools: ["*"], concurrency: 2}
    - {name: b, secret: b, tools: ["*"]}
secrets:
  a: {env: TEST_TOK_A}
  b: {env: TEST_TOK_B}
tools:
  sh: {limits: {memory: 64MiB}}
`, nil)
	a := client.NewTCP(addr, "token-a-0123456789abcdef")
	b := client.NewTCP(addr, "token-b-0123456789abcdef")
	var ids []string
	for range 2 {
		s, err := a.CreateSession(t.Context(), api.SessionRequest{Tool: "sh"})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, s.ID)
	}
	_, err := a.CreateSession(t.Context(), api.SessionRequest{Tool: "sh"})
	if ce := apiErr(t, err); ce.Status != http.StatusTooManyRequests || ce.Code != api.CodeTooManyRequests || ce.RetryAfter <= 0 {
		t.Fatalf("a third session: %+v", ce)
	}
	_, err = a.Run(t.Context(), api.RunRequest{Tool: "sh", Argv: []string{"true"}})
	if ce := apiErr(t, err); ce.Status != http.StatusTooManyRequests {
		t.Fatalf("a run beside two sessions: %+v", ce)
	}
	if r, err := b.Run(t.Context(), api.RunRequest{Tool: "sh", Argv: []string{"true"}}); err != nil || r.Outcome != result.Exited {
		t.Fatalf("another token's run: %+v %v", r, err)
	}
	if err := a.DeleteSession(t.Context(), ids[0]); err != nil {
		t.Fatal(err)
	}
	if r, err := a.Run(t.Context(), api.RunRequest{Tool: "sh", Argv: []string{"true"}}); err != nil || r.Outcome != result.Exited {
		t.Fatalf("a run once a session ended: %+v %v", r, err)
	}
	a.DeleteSession(t.Context(), ids[1])
}

// contains reports whether s contains every one of subs.
func contains(s string, subs ...string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}

// TestGatewayServersCount: each MCP session's gateway server holds a
// sandbox for the session's life, and counts as one of MaxSessions: with
// 2 allowed, the third MCP session's initialize is refused, where every
// initialize used to start a server.
func TestGatewayServersCount(t *testing.T) {
	isolatednet.Require(t)
	d, sock := serveConfig(t, `
mcp_servers:
  t:
    command: [/srv/testmcp/testmcp]
    mounts: [{source: `+testServerDir(t)+`, target: /srv/testmcp}]
    limits: {memory: 128MiB}
`, func(o *Options) { o.MaxSessions = 2 })
	for range 2 {
		mcpConnect(t, sock, nil)
	}
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
	for range 3 {
		_, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil).
			Connect(t.Context(), &mcp.StreamableClientTransport{Endpoint: "http://airlock/mcp", HTTPClient: hc}, nil)
		if err == nil {
			t.Fatal("an MCP session past MaxSessions started its server")
		}
		t.Log(err)
	}
	if u := d.Runtime().Usage(); u.Sandboxes != 2 {
		t.Fatalf("%d sandboxes live for 2 MCP sessions", u.Sandboxes)
	}
}

// TestCapacityUnderParentCeiling: the cgroups above the sandboxes (a
// container's own group, a service's MemoryMax=) hold them to less than
// the host has. The default budget is a share of that, and a configured
// capacity over it is refused at start, naming the group.
func TestCapacityUnderParentCeiling(t *testing.T) {
	testutil.RequireRoot(t)
	slice := testCgroup + "-ceiling"
	t.Cleanup(func() { removeCgroupDirs(t, slice) })
	top, err := cgroup.Open(slice)
	if err != nil {
		t.Fatal(err)
	}
	if err := top.SetCeiling(512<<20, 400); err != nil {
		t.Fatal(err)
	}
	opts := func(capacity string) Options {
		cfg, err := config.Parse("a.yaml", []byte(capacity+"tools:\n  sh: {limits: {memory: 64MiB}}\n"))
		if err != nil {
			t.Fatal(err)
		}
		return Options{Config: cfg, Socket: filepath.Join(t.TempDir(), "a.sock"), AuditPath: testAudit(t),
			Sandbox: sandbox.Options{StateDir: testStateDir, CgroupParent: slice + "/sandboxes", InitPath: testutil.InitPath(t)}}
	}
	_, err = New(t.Context(), opts("server: {capacity: {memory: 1GiB}}\n"))
	if err == nil || !contains(err.Error(), "server.capacity", "1GiB", "512MiB", "cgroup "+slice) {
		t.Fatalf("a capacity over the group's limit: %v", err)
	}
	_, err = New(t.Context(), opts("server: {capacity: {pids: 1000}}\n"))
	if err == nil || !contains(err.Error(), "server.capacity", "pids 1000", "400", "cgroup "+slice) {
		t.Fatalf("pids over the group's limit: %v", err)
	}
	d, err := New(t.Context(), opts(""))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Serve(ctx) }()
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if b := d.Runtime().Budget(); b.Memory != (512<<20)/100*80 || b.Pids != 300 {
		t.Fatalf("budget under a 512MiB, 400-pids group: %+v", b)
	}
}

// removeCgroupDirs removes an emptied cgroup tree in every hierarchy.
func removeCgroupDirs(t *testing.T, p string) {
	roots := []string{"/sys/fs/cgroup"}
	if ents, err := os.ReadDir("/sys/fs/cgroup/memory"); err == nil && len(ents) > 0 {
		roots, _ = filepath.Glob("/sys/fs/cgroup/*")
	}
	for _, r := range roots {
		var dirs []string
		_ = filepath.WalkDir(filepath.Join(r, p), func(path string, de os.DirEntry, err error) error {
			if err == nil && de.IsDir() {
				dirs = append(dirs, path)
			}
			return nil
		})
		for i := len(dirs) - 1; i >= 0; i-- {
			if err := os.Remove(dirs[i]); err != nil && !os.IsNotExist(err) {
				t.Errorf("cleanup: %v", err)
			}
		}
	}
}
