package daemon

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"sync"
	"time"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/internal/config"
	"github.com/airlockhq/airlock/internal/runner"
	"github.com/airlockhq/airlock/result"
	"github.com/airlockhq/airlock/sandbox"
)

// Session bounds.
const (
	defaultIdle = 10 * time.Minute
	defaultLife = time.Hour
	maxLife     = 24 * time.Hour
	// endedKept is how long an ended session still answers GET, so a
	// caller can learn why it ended.
	endedKept = 10 * time.Minute
)

// session owns one sandbox for its lifetime; the sandbox is never handed
// to anyone else and is destroyed when the session ends.
type session struct {
	id      string
	owner   string // the caller that opened it: "local" or "token:NAME"
	tool    *config.Tool
	sb      *sandbox.Sandbox
	bind    *runner.Binding
	created time.Time
	idle    time.Duration
	expires time.Time
	onEnd   func(reason string) // records the end

	// mu guards lastUsed, running, ended, endReason and endedAt. A call
	// is added to wg under it, once ended is checked, so that end's wait
	// counts every call. It is taken after sessions.mu (see reap).
	mu        sync.Mutex
	lastUsed  time.Time
	running   int
	ended     bool
	endReason string
	endedAt   time.Time
	wg        sync.WaitGroup // execs and file calls in flight
	// ending is closed when the session starts to end: for what waits
	// on the sandbox without being a call (a watch of its files).
	ending chan struct{}
	// done is closed once the session has ended: its sandbox destroyed
	// and its end recorded. Every caller of end waits for it.
	done chan struct{}
}

// sessions is the daemon's table of sessions.
type sessions struct {
	// mu guards m and closed; it is taken before a session's mu.
	mu     sync.Mutex
	m      map[string]*session
	closed bool // shutting down: no new sessions
}

// newSessionID makes a session's id; a node's carry its name
// ("s_NODE-HEX"), so that any front routes them with no table of its
// own (cluster.NodeOfID).
func (d *Daemon) newSessionID() string {
	var b [12]byte
	rand.Read(b[:])
	if d.cluster != nil {
		return "s_" + d.cluster.name + "-" + hex.EncodeToString(b[:])
	}
	return "s_" + hex.EncodeToString(b[:])
}

// view is the API form of s.
func (s *session) view() api.Session {
	s.mu.Lock()
	defer s.mu.Unlock()
	v := api.Session{
		ID: s.id, Tool: s.tool.Name, SandboxID: s.sb.ID(),
		State:    api.SessionActive,
		Created:  s.created.UTC().Format(time.RFC3339Nano),
		LastUsed: s.lastUsed.UTC().Format(time.RFC3339Nano),
		Expires:  s.expires.UTC().Format(time.RFC3339Nano),
		Running:  s.running,
	}
	if s.ended {
		v.State, v.EndReason = api.SessionEnded, s.endReason
	}
	return v
}

// enter registers a call in the session; false when it has ended.
func (s *session) enter() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended {
		return false
	}
	s.running++
	s.lastUsed = time.Now()
	s.wg.Add(1)
	return true
}

func (s *session) leave() {
	s.mu.Lock()
	s.running--
	s.lastUsed = time.Now()
	s.mu.Unlock()
	s.wg.Done()
}

// end ends the session: no new calls, the sandbox killed at once (which
// ends calls in flight), then, once they have returned, the binding
// closed, the sandbox destroyed and the end recorded. The first call
// starts that work; every call, the first and any other, returns only
// once it is done, or when ctx ends first (the error is then ctx's).
// A second caller used to return at once while the first was still
// destroying: a DELETE answered 204 for a sandbox still there, and
// shutdown closed the runtime and the audit log under the destroy, losing
// its session.ended record. The work runs on its own goroutine, so that a
// caller going away (a DELETE's client hanging up) never cuts it short.
func (s *session) end(ctx context.Context, reason string) error {
	s.mu.Lock()
	first := !s.ended
	if first {
		s.ended, s.endReason, s.endedAt = true, reason, time.Now()
		close(s.ending)
	}
	s.mu.Unlock()
	if first {
		go s.finish(context.WithoutCancel(ctx), reason)
	}
	select {
	case <-s.done:
		return nil
	default:
	}
	select {
	case <-s.done:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// finish is the work of end, done once, by its first caller's goroutine;
// it closes done last.
func (s *session) finish(ctx context.Context, reason string) {
	defer close(s.done)
	// Destroy kills init first; running execs then return.
	go func() {
		_ = s.sb.Destroy(ctx)
	}()
	s.wg.Wait()
	_ = s.bind.Close(ctx)
	_ = s.sb.Destroy(ctx)
	if s.onEnd != nil {
		s.onEnd(reason)
	}
}

// afterExec ends the session when a run showed the sandbox unusable: a
// breached ceiling destroys the sandbox, and so the session.
func (s *session) afterExec(ctx context.Context, r *result.Result) {
	switch {
	case r.Outcome == result.LimitExceeded && r.Limit != nil:
		go s.end(ctx, "limit: "+r.Limit.Name)
	case !alive(s.sb):
		go s.end(ctx, "sandbox died")
	}
}

func alive(sb *sandbox.Sandbox) bool {
	select {
	case <-sb.Done():
		return false
	default:
		return true
	}
}

// parseBound parses an optional duration with a default and a maximum.
func parseBound(s string, def, limit time.Duration, what string) (time.Duration, error) {
	if s == "" {
		return def, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 || d > limit {
		return 0, fmt.Errorf("%q must be a duration from 1s to %s, like \"10m\"", what, limit)
	}
	return max(d, time.Second), nil
}

// reap ends idle and expired sessions and forgets long-ended ones, until
// ctx ends.
func (d *Daemon) reap(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			d.sessions.mu.Lock()
			var end []*session
			var why []string
			for id, s := range d.sessions.m {
				s.mu.Lock()
				switch {
				case s.ended && now.Sub(s.endedAt) > endedKept:
					delete(d.sessions.m, id)
				case s.ended:
				case now.After(s.expires):
					end, why = append(end, s), append(why, "max lifetime")
				case s.running == 0 && now.Sub(s.lastUsed) > s.idle:
					end, why = append(end, s), append(why, "idle timeout")
				case !alive(s.sb):
					end, why = append(end, s), append(why, "sandbox died")
				}
				s.mu.Unlock()
			}
			d.sessions.mu.Unlock()
			for i, s := range end {
				go s.end(ctx, why[i])
			}
		}
	}
}

// endAll ends every session, for shutdown.
func (d *Daemon) endAll(ctx context.Context) {
	d.sessions.mu.Lock()
	d.sessions.closed = true
	all := make([]*session, 0, len(d.sessions.m))
	for _, s := range d.sessions.m {
		all = append(all, s)
	}
	d.sessions.mu.Unlock()
	var wg sync.WaitGroup
	for _, s := range all {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Not cut by ctx: the runtime and the audit log close
			// next, and must not close under a destroy or its record.
			// The destroy is bounded (sandbox.Destroy's own timeouts).
			_ = s.end(context.WithoutCancel(ctx), "shutdown")
		}()
	}
	wg.Wait()
}
