package node

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/internal/audit"
	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/sandbox"
)

// liveRun is a run or an MCP server's process in flight, as GET /v1/ps
// lists it and DELETE /v1/runs/{id} ends it.
type liveRun struct {
	id, kind, tool, client string
	owner                  string // the caller's name: "local" or "token:NAME"
	sb                     *sandbox.Sandbox
	started                time.Time
	// kill ends it; the run's outcome then says who ended it.
	kill func(by string)
}

// liveRuns is the daemon's table of what runs now.
type liveRuns struct {
	mu sync.Mutex // guards m
	m  map[string]*liveRun
}

func (l *liveRuns) add(r *liveRun) func() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.m == nil {
		l.m = map[string]*liveRun{}
	}
	l.m[r.id] = r
	return func() {
		l.mu.Lock()
		delete(l.m, r.id)
		l.mu.Unlock()
	}
}

// visible are the runs c may see, oldest first: all of them on the local
// socket, a token's own elsewhere.
func (l *liveRuns) visible(c *Caller) []*liveRun {
	l.mu.Lock()
	var out []*liveRun
	for _, r := range l.m {
		if c.Sees(r.owner) {
			out = append(out, r)
		}
	}
	l.mu.Unlock()
	slices.SortFunc(out, func(a, b *liveRun) int { return a.started.Compare(b.started) })
	return out
}

// errKilled is the cause a killed run's context ends with.
var errKilled = errors.New("ended by airlock kill")

// Activity is what runs now that c may see: the runs, MCP servers and
// sessions in flight, with their usage so far and their ceilings.
func (n *Node) Activity(c *Caller) api.Activity {
	out := api.Activity{Runs: []api.LiveRun{}, Sessions: []api.Session{}}
	now := time.Now()
	for _, lr := range n.live.visible(c) {
		v := api.LiveRun{ID: lr.id, Kind: lr.kind, Tool: lr.tool, Client: lr.client, SandboxID: lr.sb.ID(),
			Started: lr.started.UTC().Format(time.RFC3339Nano), AgeMillis: now.Sub(lr.started).Milliseconds()}
		if s, err := lr.sb.Sample(); err == nil {
			v.MemoryBytes, v.Pids, v.CPUMillis, v.DiskBytes = s.MemoryBytes, s.Pids, s.CPUMillis, s.DiskBytes
		}
		l := lr.sb.Limits()
		v.Limits = api.LiveLimits{MemoryBytes: l.Memory, Pids: l.Pids, DiskBytes: l.Disk, TimeMillis: l.Time.Milliseconds()}
		out.Runs = append(out.Runs, v)
	}
	for _, s := range n.SessionsOf(c) {
		if v := s.View(); v.State == api.SessionActive {
			out.Sessions = append(out.Sessions, v)
		}
	}
	return out
}

// Kill ends the run (or MCP server) id that c may see, and destroys its
// sandbox, as a breach would; the kill is recorded, with who asked
// (client), before Kill returns. A run c may not see does not exist for
// it.
func (n *Node) Kill(ctx context.Context, c *Caller, id, client string) error {
	n.live.mu.Lock()
	lr := n.live.m[id]
	n.live.mu.Unlock()
	if lr == nil || !c.Sees(lr.owner) {
		return errdefs.Errorf(errdefs.ErrNotFound, "no run %q in flight", Shorten(id))
	}
	ev := audit.Event{Kind: audit.KindKilled, Tool: lr.tool, Sandbox: lr.sb.ID(), Run: lr.id, Client: client, Decision: audit.Allow}
	ev.Detail = audit.Detail(map[string]any{"kind": lr.kind, "started_by": lr.client})
	if err := n.audit.Append(ctx, ev); err != nil {
		n.opts.Logger.Error("audit: a kill could not be recorded", "run", lr.id, "err", err)
		return ErrAuditRefused
	}
	lr.kill(client)
	return nil
}

// Running is how many runs and MCP servers are in flight.
func (n *Node) Running() int {
	n.live.mu.Lock()
	defer n.live.mu.Unlock()
	return len(n.live.m)
}

// killable makes ctx end with errKilled when the run is killed.
func killable(ctx context.Context) (context.Context, func(by string), func()) {
	kctx, cancel := context.WithCancelCause(ctx)
	return kctx, func(string) { cancel(errKilled) }, func() { cancel(nil) }
}
