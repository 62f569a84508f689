package daemon

import (
	"context"
	"errors"
	"net/http"
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
func (l *liveRuns) visible(c *caller) []*liveRun {
	l.mu.Lock()
	var out []*liveRun
	for _, r := range l.m {
		if c.sees(r.owner) {
			out = append(out, r)
		}
	}
	l.mu.Unlock()
	slices.SortFunc(out, func(a, b *liveRun) int { return a.started.Compare(b.started) })
	return out
}

// errKilled is the cause a killed run's context ends with.
var errKilled = errors.New("ended by airlock kill")

// getPS answers GET /v1/ps: the runs, MCP servers and sessions in flight
// that the caller may see, with their usage so far and their ceilings.
func (d *Daemon) getPS(w http.ResponseWriter, r *http.Request) {
	c := callerOf(r.Context())
	out := api.Activity{Runs: []api.LiveRun{}, Sessions: []api.Session{}}
	now := time.Now()
	for _, lr := range d.live.visible(c) {
		v := api.LiveRun{ID: lr.id, Kind: lr.kind, Tool: lr.tool, Client: lr.client, SandboxID: lr.sb.ID(),
			Started: lr.started.UTC().Format(time.RFC3339Nano), AgeMillis: now.Sub(lr.started).Milliseconds()}
		if s, err := lr.sb.Sample(); err == nil {
			v.MemoryBytes, v.Pids, v.CPUMillis, v.DiskBytes = s.MemoryBytes, s.Pids, s.CPUMillis, s.DiskBytes
		}
		l := lr.sb.Limits()
		v.Limits = api.LiveLimits{MemoryBytes: l.Memory, Pids: l.Pids, DiskBytes: l.Disk, TimeMillis: l.Time.Milliseconds()}
		out.Runs = append(out.Runs, v)
	}
	for _, s := range d.sessionsOf(c) {
		if v := s.view(); v.State == "active" {
			out.Sessions = append(out.Sessions, v)
		}
	}
	writeJSON(w, http.StatusOK, out)
}

// deleteRun answers DELETE /v1/runs/{id}: the run (or MCP server) is
// ended and its sandbox destroyed, as a breach would; the kill is
// recorded, with who asked, before it is acknowledged.
func (d *Daemon) deleteRun(w http.ResponseWriter, r *http.Request) {
	c := callerOf(r.Context())
	id := r.PathValue("id")
	d.live.mu.Lock()
	lr := d.live.m[id]
	d.live.mu.Unlock()
	if lr == nil || !c.sees(lr.owner) {
		writeErr(w, errdefs.Errorf(errdefs.ErrNotFound, "no run %q in flight", shorten(id)))
		return
	}
	ev := audit.Event{Kind: audit.KindKilled, Tool: lr.tool, Sandbox: lr.sb.ID(), Run: lr.id, Client: clientOf(r), Decision: audit.Allow}
	ev.Detail = audit.Detail(map[string]any{"kind": lr.kind, "started_by": lr.client})
	if err := d.audit.Append(r.Context(), ev); err != nil {
		d.opts.Logger.Error("audit: a kill could not be recorded", "run", lr.id, "err", err)
		writeErr(w, errAuditRefused)
		return
	}
	lr.kill(clientOf(r))
	w.WriteHeader(http.StatusNoContent)
}

// killable makes ctx end with errKilled when the run is killed.
func killable(ctx context.Context) (context.Context, func(by string), func()) {
	kctx, cancel := context.WithCancelCause(ctx)
	return kctx, func(string) { cancel(errKilled) }, func() { cancel(nil) }
}
