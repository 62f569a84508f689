package node

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/audit"
	"github.com/airlockhq/airlock/internal/config"
	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/testutil"
	"github.com/airlockhq/airlock/sandbox"
)

// TestReload reloads a node's config: a tool unchanged keeps its pool
// and its ready sandboxes (moving in the file changes nothing), a
// changed one gets a fresh pool while its old one drains, a removed one
// drains, a new one fills; a session opened before keeps its sandbox
// and tool; a config that cannot be planned, or whose tool does not fit
// the node, changes nothing and says why. The pools' sandboxes of a
// changed or added tool are bound to the new config's policy, not the
// one before the reload (they were, and an added tool's to none).
func TestReload(t *testing.T) {
	n := newNode(t, `
tools:
  keep: {pool: {warm: 1}, env: {V: keep}}
  change: {pool: {warm: 1}, env: {V: before}, egress: [{host: before.test, ports: [80], addresses: [127.0.0.1], private: true}]}
  gone: {pool: {warm: 1}}
`)
	waitIdle := func(tool string, want int) {
		t.Helper()
		for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			st, ok := n.PoolStats(tool)
			if ok && st.Idle >= want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("pool %s: %+v %v, want %d ready", tool, st, ok, want)
			}
		}
	}
	for _, tool := range []string{"keep", "change", "gone"} {
		waitIdle(tool, 1)
	}
	keepPool := n.Pool("keep")
	gone := n.Tools().Tools["gone"]
	oldChange, oldGone := n.Pool("change"), n.Pool("gone")
	s, err := n.OpenSession(t.Context(), n.Tools().Tools["change"], "test", Local, time.Minute, time.Minute, nil)
	if err != nil {
		t.Fatal(err)
	}
	parse := func(text string) *config.Config {
		t.Helper()
		cfg, err := config.Parse("airlock.yaml", []byte(text))
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	// Refused: nothing changes.
	for _, bad := range []string{
		"tools:\n  keep: {image: no-such-image}\n",
		"tools:\n  keep: {limits: {memory: 900TiB}}\n",
	} {
		if _, err := n.Reload(t.Context(), parse(bad), "test"); !errors.Is(err, errdefs.ErrInvalid) || !strings.Contains(err.Error(), "not reloaded") {
			t.Errorf("reload of %q: %v; want ErrInvalid saying it was not reloaded", bad, err)
		}
	}
	if n.Pool("gone") == nil || n.Pool("keep") != keepPool {
		t.Fatal("a refused reload changed the pools")
	}
	rep, err := n.Reload(t.Context(), parse(`
tools:
  added: {pool: {warm: 1}, egress: [{host: added.test, ports: [80], addresses: [127.0.0.1], private: true}]}
  change: {pool: {warm: 1}, env: {V: after}, egress: [{host: after.test, ports: [80], addresses: [127.0.0.1], private: true}]}
  keep: {pool: {warm: 1}, env: {V: keep}}
server:
  capacity: {sandboxes: 7}
tracing:
  endpoint: http://127.0.0.1:4318
`), "test")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(rep.Added, []string{"added"}) || !slices.Equal(rep.Changed, []string{"change"}) || !slices.Equal(rep.Removed, []string{"gone"}) || !slices.Equal(rep.Kept, []string{"keep"}) || !slices.Equal(rep.Restart, []string{"server", "tracing"}) {
		t.Errorf("report %+v", rep)
	}
	if n.Pool("keep") != keepPool || keepPool.Stats().Idle != 1 {
		t.Errorf("the kept tool's pool was replaced or emptied: %+v", n.Pool("keep").Stats())
	}
	if n.Pool("gone") != nil || n.Tools().Tools["gone"] != nil {
		t.Error("the removed tool is still there")
	}
	// A run that found the tool before the reload removed it is refused
	// as a tool there is no longer, not a failure of the daemon's.
	if _, _, err := n.Run(t.Context(), RunRequest{Tool: gone, Caller: Local, Client: "test", Argv: []string{"true"}}); !errors.Is(err, ErrToolRemoved) || !errors.Is(err, errdefs.ErrNotFound) || !strings.Contains(err.Error(), `"gone"`) {
		t.Errorf("a run of the removed tool: %v, want ErrNotFound saying a reload removed it", err)
	}
	// A claim that found the pools before the reload and comes to them
	// once they are closed: the changed tool's goes to its new pool, the
	// removed tool's is refused as not found. Neither is told the node is
	// stopping.
	n.draining.Wait()
	if sb, _, err := n.claimFrom(t.Context(), "change", oldChange, true); err != nil {
		t.Errorf("a claim from the changed tool's old pool: %v, want a sandbox of its new pool", err)
	} else if err := sb.Destroy(t.Context()); err != nil {
		t.Error(err)
	}
	if _, _, err := n.claimFrom(t.Context(), "gone", oldGone, true); !errors.Is(err, ErrToolRemoved) {
		t.Errorf("a claim from the removed tool's old pool: %v, want ErrNotFound", err)
	}
	waitIdle("added", 1)
	waitIdle("change", 1)
	run := func(tool string) string {
		t.Helper()
		res, done, err := n.Run(t.Context(), RunRequest{Tool: n.Tools().Tools[tool], Caller: Local, Client: "test", Argv: []string{"sh", "-c", "echo $V"}, Capture: true})
		if err != nil {
			t.Fatal(err)
		}
		done()
		return strings.TrimSpace(string(res.Stdout))
	}
	if got := run("change"); got != "after" {
		t.Errorf("a run of the changed tool: %q, want after", got)
	}
	// Each from a ready sandbox of the new pool, bound while it was
	// made: the proxy's decision is the new policy's.
	for _, tt := range []struct {
		tool, host string
		allow      bool
	}{
		{"change", "after.test", true}, {"change", "before.test", false}, {"added", "added.test", true},
	} {
		waitIdle(tt.tool, 1)
		res, done, err := n.Run(t.Context(), RunRequest{Tool: n.Tools().Tools[tt.tool], Caller: Local, Client: "test",
			Argv: []string{"sh", "-c", "curl -sS -m 5 http://" + tt.host + "/ || true"}, Capture: true})
		if err != nil {
			t.Fatal(err)
		}
		done()
		if len(res.Egress) == 0 || res.Egress[0].Destination != tt.host+":80" || res.Egress[0].Allow != tt.allow {
			t.Errorf("%s reaching %s: egress %+v, want allow %v", tt.tool, tt.host, res.Egress, tt.allow)
		}
	}
	// The session opened before keeps what it had.
	res, err := n.Exec(t.Context(), s, "test", sandbox.ExecRequest{Argv: []string{"sh", "-c", "echo $V"}, Capture: true})
	if err != nil || strings.TrimSpace(string(res.Stdout)) != "before" {
		t.Errorf("the session from before the reload: %+v %v; want before", res, err)
	}
	if err := s.End(context.WithoutCancel(t.Context()), "deleted"); err != nil {
		t.Fatal(err)
	}
	evs, err := n.Audit().Query(t.Context(), audit.Query{Kind: audit.KindDaemonReloaded})
	if err != nil || len(evs) != 1 || !strings.Contains(string(evs[0].Detail), `"removed":["gone"]`) {
		t.Errorf("audit: %+v %v; want one daemon.reloaded naming what changed", evs, err)
	}
	// A reload that changes nothing keeps every pool, wherever the
	// tools now sit in the file.
	before := map[string]any{}
	for _, tool := range []string{"added", "change", "keep"} {
		before[tool] = n.Pool(tool)
	}
	rep, err = n.Reload(t.Context(), parse(`
server:
  capacity: {sandboxes: 7}
tracing: {endpoint: 'http://127.0.0.1:4318/v1/traces'}
tools:
  keep: {pool: {warm: 1}, env: {V: keep}}

  change: {pool: {warm: 1}, env: {V: after}, egress: [{host: after.test, ports: [80], addresses: [127.0.0.1], private: true}]}
  added: {pool: {warm: 1}, egress: [{host: added.test, ports: [80], addresses: [127.0.0.1], private: true}]}
`), "test")
	// What only a restart applies is still said: the node runs the
	// server and tracing it started with.
	if err != nil || len(rep.Kept) != 3 || len(rep.Changed)+len(rep.Added)+len(rep.Removed) != 0 || !slices.Equal(rep.Restart, []string{"server", "tracing"}) {
		t.Errorf("a reload of the same config: %+v %v; want every tool kept, and server and tracing still to restart", rep, err)
	}
	for tool, p := range before {
		if any(n.Pool(tool)) != p {
			t.Errorf("tool %s's pool was replaced by a reload that changed nothing", tool)
		}
	}
}

// TestNoReloadOnceStopped: a reload that comes as the node stops (a
// SIGHUP in its shutdown) is refused, and starts no pool.
func TestNoReloadOnceStopped(t *testing.T) {
	testutil.RequireRoot(t)
	cfg, err := config.Parse("airlock.yaml", []byte("tools:\n  sh: {}\n"))
	if err != nil {
		t.Fatal(err)
	}
	n, err := New(t.Context(), Options{Config: cfg, AuditPath: filepath.Join(t.TempDir(), "audit.db"),
		Sandbox: sandbox.Options{StateDir: testStateDir, CgroupParent: testCgroup, InitPath: testutil.InitPath(t)}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.WithoutCancel(t.Context())
	if err := n.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	next, err := config.Parse("airlock.yaml", []byte("tools:\n  sh: {}\n  late: {pool: {warm: 1}}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.Reload(ctx, next, "test"); !errors.Is(err, ErrShutdown) {
		t.Errorf("a reload after Stop: %v, want ErrShutdown", err)
	}
	if n.Pool("late") != nil {
		t.Error("a reload after Stop started a pool")
	}
	if err := n.Close(ctx); err != nil {
		t.Fatal(err)
	}
}
