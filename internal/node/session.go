package node

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/internal/audit"
	"github.com/airlockhq/airlock/internal/config"
	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/linux/inroot"
	"github.com/airlockhq/airlock/internal/runner"
	"github.com/airlockhq/airlock/internal/runner/attach"
	"github.com/airlockhq/airlock/internal/snapshot"
	"github.com/airlockhq/airlock/internal/tracing"
	"github.com/airlockhq/airlock/internal/volume"
	"github.com/airlockhq/airlock/pool"
	"github.com/airlockhq/airlock/result"
	"github.com/airlockhq/airlock/sandbox"
)

// Session bounds.
const (
	// MaxFile bounds one file written into or read out of a workspace;
	// the sandbox's disk ceiling bounds them all together.
	MaxFile     = 16 << 20
	DefaultIdle = 10 * time.Minute
	DefaultLife = time.Hour
	MaxLife     = 24 * time.Hour
	// endedKept is how long an ended session still answers GET, so a
	// caller can learn why it ended.
	endedKept = 10 * time.Minute
)

// session owns one sandbox for its lifetime; the sandbox is never handed
// to anyone else and is destroyed when the session ends.
type Session struct {
	id      string
	owner   string // the caller that opened it: "local" or "token:NAME"
	tool    *config.Tool
	sb      *sandbox.Sandbox
	bind    *runner.Binding
	created time.Time
	idle    time.Duration
	expires time.Time
	onEnd   func(reason string) // records the end
	// scope is the session's audit scope; token its owner's token (nil
	// for the local socket), whose ceiling of paused sessions applies.
	scope runScope
	token *config.Token
	// narrowed is the policy its opener narrowed the tool's to, if any:
	// its forks' too.
	narrowed *attach.Policy
	// pauseMu is held by Pause and Resume, one at a time; taken before
	// mu.
	pauseMu sync.Mutex

	// mu guards lastUsed, running, ended, endReason, endedAt, kernels,
	// the pause's fields and lifecycle. A call
	// is added to wg under it, once ended is checked, so that end's wait
	// counts every call. It is taken after sessions.mu (see reap).
	mu        sync.Mutex
	lastUsed  time.Time
	running   int
	ended     bool
	endReason string
	endedAt   time.Time
	// kernels are the code interpreter's kernels started before the
	// claim (kernel.go), until an edge takes them.
	kernels []*Kernel
	// paused says the session is paused (pause.go): since pausedAt,
	// with lifeLeft of its lifetime left; unpause gives back its place
	// among the paused sessions. lifecycle says what its timeout does.
	paused    bool
	pausedAt  time.Time
	lifeLeft  time.Duration
	unpause   func()
	lifecycle Lifecycle
	// timingOut says the reaper is pausing it on timeout already.
	timingOut bool
	// pauseGen counts its pauses; kept is the archive of its files a
	// pause kept (dormant.go), until it runs again or ends; dormant
	// says it came back from a restart of the daemon with them alone,
	// and has no sandbox (sb and bind nil) until resumed from them.
	pauseGen uint64
	kept     *snapshot.Meta
	dormant  bool
	// edge is what its opening edge keeps across a restart.
	edge json.RawMessage
	// releaseVols gives back its volumes (in use while its sandbox
	// lives); nil without any. Fixed at open.
	releaseVols func()
	wg          sync.WaitGroup // execs and file calls in flight
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
	m      map[string]*Session
	closed bool // shutting down: no new sessions
}

// newSessionID makes a session's id; a node's carry its name
// ("s_NODE-HEX"), so that any front routes them with no table of its
// own (cluster.NodeOfID).
func (n *Node) newSessionID() string {
	var b [12]byte
	rand.Read(b[:])
	if n.name != "" {
		return "s_" + n.name + "-" + hex.EncodeToString(b[:])
	}
	return "s_" + hex.EncodeToString(b[:])
}

// View is the API form of s.
func (s *Session) View() api.Session {
	s.mu.Lock()
	defer s.mu.Unlock()
	v := api.Session{
		ID: s.id, Tool: s.tool.Name,
		State:    api.SessionActive,
		Created:  s.created.UTC().Format(time.RFC3339Nano),
		LastUsed: s.lastUsed.UTC().Format(time.RFC3339Nano),
		Expires:  s.expires.UTC().Format(time.RFC3339Nano),
		Running:  s.running,
	}
	if s.sb != nil {
		v.SandboxID = s.sb.ID()
	}
	v.ProcessesLost = s.dormant
	switch {
	case s.ended:
		v.State, v.EndReason = api.SessionEnded, s.endReason
	case s.paused:
		v.State, v.PausedAt = api.SessionPaused, s.pausedAt.UTC().Format(time.RFC3339Nano)
		// The lifetime stands still while paused: its end is as far
		// from now as it was from the pause.
		v.Expires = time.Now().Add(s.lifeLeft).UTC().Format(time.RFC3339Nano)
	}
	return v
}

// Enter registers a call in the session; false when it has ended or is
// paused (EnterError says which).
func (s *Session) Enter() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended || s.paused {
		return false
	}
	s.running++
	s.lastUsed = time.Now()
	s.wg.Add(1)
	return true
}

// Leave ends a call Enter registered.
func (s *Session) Leave() {
	s.mu.Lock()
	s.running--
	s.lastUsed = time.Now()
	s.mu.Unlock()
	s.wg.Done()
}

// End ends the session: no new calls, the sandbox killed at once (which
// ends calls in flight), then, once they have returned, the binding
// closed, the sandbox destroyed and the end recorded. The first call
// starts that work; every call, the first and any other, returns only
// once it is done, or when ctx ends first (the error is then ctx's).
// A second caller used to return at once while the first was still
// destroying: a DELETE answered 204 for a sandbox still there, and
// shutdown closed the runtime and the audit log under the destroy, losing
// its session.ended record. The work runs on its own goroutine, so that a
// caller going away (a DELETE's client hanging up) never cuts it short.
func (s *Session) End(ctx context.Context, reason string) error {
	s.startEnd(ctx, reason)
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

// startEnd marks the session ended, so that no call is let in from now
// on, and starts the rest of the end (finish), the first time; it does
// not wait for it.
func (s *Session) startEnd(ctx context.Context, reason string) {
	s.mu.Lock()
	first := !s.ended
	var unpause func()
	if first {
		s.ended, s.endReason, s.endedAt = true, reason, time.Now()
		close(s.ending)
		// An ended session is not paused: its place among the paused
		// is given back (its sandbox is thawed as it is killed).
		unpause, s.unpause, s.paused = s.unpause, nil, false
	}
	s.mu.Unlock()
	if unpause != nil {
		unpause()
	}
	if first {
		go s.finish(context.WithoutCancel(ctx), reason)
	}
}

// finish is the work of end, done once, by its first caller's goroutine;
// it closes done last.
func (s *Session) finish(ctx context.Context, reason string) {
	defer close(s.done)
	s.mu.Lock()
	sb, bind := s.sb, s.bind
	s.mu.Unlock()
	if sb == nil {
		// Dormant: nothing runs; its kept files go with it.
		s.wg.Wait()
	} else {
		// Destroy kills init first; running execs then return.
		go func() {
			_ = sb.Destroy(ctx)
		}()
		s.wg.Wait()
		_ = bind.Close(ctx)
		_ = sb.Destroy(ctx)
	}
	if s.onEnd != nil {
		s.onEnd(reason)
	}
}

// sessionEnd is s's onEnd: release gives back what it held; its kept
// pause, if any, is dropped; its end is recorded.
func (n *Node) sessionEnd(s *Session, release func()) func(reason string) {
	return func(reason string) {
		// Its end's span, from the end's start: its sandbox's destroy
		// and this.
		s.mu.Lock()
		began := s.endedAt
		s.mu.Unlock()
		if n.traces.t != nil {
			defer func() {
				n.traces.t.Record(s.scope.span, "airlock.session.end", began, time.Now(), "", append(scopeAttrs(s.scope), tracing.String("airlock.session.end_reason", reason))...)
			}()
		}
		release()
		s.pauseMu.Lock()
		n.dropKept(s)
		s.pauseMu.Unlock()
		e := s.auditScope().event(audit.KindSessionEnded)
		e.Detail = audit.Detail(map[string]string{"reason": reason})
		// Durable before End returns: whoever ended the session (a
		// DELETE's caller, an E2B kill's, shutdown) finds its end in
		// the log, not in the log's queue.
		if err := n.audit.Append(context.Background(), e); err != nil {
			n.opts.Logger.Error("audit: a session's end could not be recorded", "session", s.id, "err", err)
		}
	}
}

// afterExec ends the session when a run showed the sandbox unusable: a
// breached ceiling destroys the sandbox, and so the session.
func (s *Session) afterExec(ctx context.Context, r *result.Result) {
	// Marked ended before the exec's answer goes out: a call that
	// follows it is refused as one to an ended session.
	switch {
	case r.Outcome == result.LimitExceeded && r.Limit != nil:
		s.startEnd(ctx, "limit: "+r.Limit.Name)
	case !alive(s.sb):
		s.startEnd(ctx, "sandbox died")
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

// ParseBound parses an optional duration with a default and a maximum.
func ParseBound(s string, def, limit time.Duration, what string) (time.Duration, error) {
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
func (n *Node) reap(ctx context.Context) {
	t := time.NewTicker(time.Second)
	var lastCollect time.Time
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			n.sessions.mu.Lock()
			var end, pause []*Session
			var why []string
			for id, s := range n.sessions.m {
				s.mu.Lock()
				switch {
				case s.ended && now.Sub(s.endedAt) > endedKept:
					delete(n.sessions.m, id)
				case s.ended:
				case s.dormant && now.Sub(s.pausedAt) > n.opts.PausedFor:
					end, why = append(end, s), append(why, "paused too long")
				case s.dormant:
				case !alive(s.sb) && s.running == 0:
					// A call in flight says why itself (a breach's
					// limit) in afterExec, before it leaves.
					end, why = append(end, s), append(why, "sandbox died")
				case s.paused && now.Sub(s.pausedAt) > n.opts.PausedFor:
					end, why = append(end, s), append(why, "paused too long")
				case s.paused:
					// Its lifetime and idle timeout stand still.
				case now.After(s.expires) && s.lifecycle.PauseOnTimeout:
					if !s.timingOut {
						s.timingOut = true
						pause = append(pause, s)
					}
				case now.After(s.expires):
					end, why = append(end, s), append(why, "max lifetime")
				case s.running == 0 && now.Sub(s.lastUsed) > s.idle:
					end, why = append(end, s), append(why, "idle timeout")
				}
				s.mu.Unlock()
			}
			n.sessions.mu.Unlock()
			for i, s := range end {
				go s.End(ctx, why[i])
			}
			if now.Sub(lastCollect) >= time.Minute {
				lastCollect = now
				n.collectSnapshots(now)
			}
			for _, s := range pause {
				go func() {
					n.pauseOnTimeout(ctx, s)
					s.mu.Lock()
					s.timingOut = false
					s.mu.Unlock()
				}()
			}
		}
	}
}

// endAll ends every session, for shutdown.
func (n *Node) endAll(ctx context.Context) {
	n.sessions.mu.Lock()
	n.sessions.closed = true
	all := make([]*Session, 0, len(n.sessions.m))
	for _, s := range n.sessions.m {
		all = append(all, s)
	}
	n.sessions.mu.Unlock()
	var wg sync.WaitGroup
	for _, s := range all {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if n.suspend(ctx, s) {
				return
			}
			// Not cut by ctx: the runtime and the audit log close
			// next, and must not close under a destroy or its record.
			// The destroy is bounded (sandbox.Destroy's own timeouts).
			_ = s.End(context.WithoutCancel(ctx), "shutdown")
		}()
	}
	wg.Wait()
}

// claimBound claims a sandbox of t for a session or MCP server and binds
// t's policy to it for its whole life, its decisions recorded in scope.
func (n *Node) claimBound(ctx context.Context, t *config.Tool, scope *runScope, narrowed *attach.Policy) (*sandbox.Sandbox, *runner.Binding, error) {
	claimSpan := n.span(scope.span, "airlock.claim", *scope)
	sb, warm, err := n.claim(ctx, t.Name, false)
	claimSpan.Set(tracing.Bool(attrWarm, warm))
	if sb != nil {
		claimSpan.Set(tracing.String(attrSandbox, sb.ID()))
	}
	endSpan(claimSpan, err)
	if err != nil {
		if errors.Is(err, pool.ErrClosed) {
			return nil, nil, ErrShutdown
		}
		if errors.Is(err, ErrToolRemoved) {
			return nil, nil, err
		}
		if errors.Is(err, sandbox.ErrCapacity) {
			return nil, nil, AtCapacity(err)
		}
		var ue *sandbox.UnsupportedError
		if errors.As(err, &ue) {
			return nil, nil, ue // what the tool's backend refuses, by name
		}
		n.counts.Failures.Add(1)
		n.opts.Logger.Warn("claim failed", "tool", t.Name, "err", err)
		return nil, nil, ErrNoSandbox
	}
	scope.sandbox = sb.ID()
	n.claimed(*scope, warm)
	bind, err := n.bindClaimed(ctx, sb, t, scope, narrowed)
	if err != nil {
		_ = sb.Destroy(context.WithoutCancel(ctx))
		n.opts.Logger.Warn("bind failed", "tool", t.Name, "err", err)
		return nil, nil, ErrBind
	}
	return sb, bind, nil
}

// OpenSession opens a session of tool t: recorded first (refused when the
// log cannot be written), then a sandbox claimed and the tool's policy
// bound to it for the session's life. c is who may use it; the session
// is one of the daemon's MaxSessions and of c's token's concurrency
// until it ends.
func (n *Node) OpenSession(ctx context.Context, t *config.Tool, client string, c *Caller, idle, life time.Duration, narrowed *attach.Policy) (*Session, error) {
	return n.OpenSessionWith(ctx, t, client, c, idle, life, narrowed, nil)
}

// OpenSessionWith is OpenSession with volumes of c's attached where
// mounts say, in a sandbox made for the session; each volume is in use
// (it cannot be deleted) until the session ends.
func (n *Node) OpenSessionWith(ctx context.Context, t *config.Tool, client string, c *Caller, idle, life time.Duration, narrowed *attach.Policy, mounts []VolumeMount) (*Session, error) {
	return n.openSession(ctx, t, client, c, idle, life, narrowed, mounts, fresh{})
}

// fresh is what a session's sandbox is made from other than its tool's
// pool: a snapshot's files, or another image.
type fresh struct {
	seed *sandbox.Seed
	// spec replaces the tool's (its tool with a built template's image:
	// attach.For's translation with that image).
	spec *sandbox.Spec
}

// openSession is OpenSessionWith, with the fresh sandbox's /workspace
// and /tmp starting from seed when it is set (a snapshot's files).
func (n *Node) openSession(ctx context.Context, t *config.Tool, client string, c *Caller, idle, life time.Duration, narrowed *attach.Policy, mounts []VolumeMount, from fresh) (*Session, error) {
	if err := n.Authorize(c, t.Name); err != nil {
		return nil, err
	}
	var vols []sandbox.Volume
	var attached []volume.Meta
	releaseVols := func() {}
	if len(mounts) > 0 {
		var err error
		if vols, attached, releaseVols, err = n.attachVolumes(c, mounts); err != nil {
			return nil, err
		}
	}
	releaseHold, err := n.hold(c, true)
	if err != nil {
		releaseVols()
		return nil, err
	}
	release := func() {
		releaseHold()
		releaseVols()
	}
	owner := c.Name
	scope := &runScope{tool: t.Name, session: n.newSessionID(), client: client}
	// The session's trace: its open, each command and its end.
	span := n.rootSpan(tracing.ParentOf(ctx), "airlock.session.open", *scope)
	scope.span = span.Context()
	opened := scope.event(audit.KindSessionCreated)
	opened.Detail = audit.Detail(map[string]string{"idle_timeout": idle.String(), "max_lifetime": life.String()})
	if err := n.acknowledge(ctx, opened); err != nil {
		release()
		endSpan(span, err)
		return nil, err
	}
	fail := func(err error) (*Session, error) {
		endSpan(span, err)
		release()
		e := scope.event(audit.KindSessionEnded)
		e.Detail = audit.Detail(map[string]string{"reason": err.Error()})
		n.audit.Record(e)
		return nil, err
	}
	var sb *sandbox.Sandbox
	var bind *runner.Binding
	if len(vols) > 0 || from.seed != nil || from.spec != nil {
		sb, bind, err = n.createBound(ctx, t, scope, narrowed, vols, from)
	} else {
		sb, bind, err = n.claimBound(ctx, t, scope, narrowed)
	}
	if err != nil {
		return fail(err)
	}
	span.Set(tracing.String(attrSandbox, sb.ID()))
	span.End()
	n.traceDecisions(sb.ID(), scope.span)
	for i, m := range attached {
		e := scope.event(audit.KindVolumeAttached)
		e.Client = client
		e.Detail = audit.Detail(map[string]string{"volume": m.ID, "name": m.Name, "path": vols[i].Target})
		n.audit.Record(e)
	}
	now := time.Now()
	s := &Session{ending: make(chan struct{}), done: make(chan struct{}), id: scope.session, owner: owner, tool: t, sb: sb, bind: bind, created: now, lastUsed: now, idle: idle, expires: now.Add(life),
		scope: *scope, token: c.Token, narrowed: narrowed, releaseVols: releaseVols,
	}
	s.onEnd = n.sessionEnd(s, release)
	n.sessions.mu.Lock()
	closed := n.sessions.closed
	if !closed {
		n.sessions.m[s.id] = s
	}
	n.sessions.mu.Unlock()
	if closed {
		_ = s.End(context.WithoutCancel(ctx), "shutdown")
		return nil, ErrShutdown
	}
	n.claimKernels(ctx, s)
	return s, nil
}

// Exec runs a command in the session's sandbox, recorded as a run of
// the session. The caller has entered the session.
func (n *Node) Exec(ctx context.Context, s *Session, client string, x sandbox.ExecRequest) (*result.Result, error) {
	scope := runScope{tool: s.tool.Name, sandbox: s.sb.ID(), session: s.id, run: newRunID(), client: client, span: s.scope.span}
	span := n.span(scope.span, "airlock.session.exec", scope)
	if err := n.recordStart(ctx, scope, x.Argv, x.Env, x.Dir); err != nil {
		endSpan(span, err)
		return nil, err
	}
	if ctx.Err() != nil {
		res := &result.Result{Outcome: result.Error, Error: fmt.Sprintf("the caller went away before the command started: %v", context.Cause(ctx))}
		n.finishRun(ctx, scope, res)
		endSpan(span, context.Cause(ctx))
		return nil, context.Cause(ctx)
	}
	x.Env = append(append([]string(nil), s.tool.Env...), x.Env...)
	x.SampleEvery, x.KeepAlive = 250*time.Millisecond, true
	n.counts.Runs.Add(1)
	// The session outlives its caller: ctx ending (the caller went away,
	// or stopped reading the exec's events) kills the command and its
	// process group, not the session's sandbox. A caller that passes its
	// own Signal keeps the command past ctx (the E2B API's).
	if x.Signal == nil {
		sig := make(chan unix.Signal, 1)
		x.Signal = sig
		stop := context.AfterFunc(ctx, func() { sig <- unix.SIGKILL })
		defer stop()
	}
	res := s.bind.Exec(context.WithoutCancel(ctx), x, nil)
	if ctx.Err() != nil && res.Outcome == result.Signaled && res.Signal == int(unix.SIGKILL) {
		res.Outcome, res.Error = result.Error, fmt.Sprintf("the command was killed, the session goes on: %v", context.Cause(ctx))
	}
	ctx = context.WithoutCancel(ctx)
	s.afterExec(ctx, res)
	n.finishRun(ctx, scope, res)
	traceResult(span, res)
	span.End()
	return res, nil
}

// WriteFile writes a file into the session's workspace, as the sandbox's
// user, confined to the workspace. The caller has entered the session.
func (s *Session) WriteFile(rel string, r io.Reader) (int64, error) {
	ws, err := s.sb.OpenWorkspace()
	if err != nil {
		return 0, ErrGone
	}
	defer ws.Close()
	return s.WriteIn(ws, rel, r)
}

// WriteIn is WriteFile into a directory already open (the workspace or
// another of the sandbox's own: sandbox.OpenDir), for a call that writes
// several files.
func (s *Session) WriteIn(ws *os.File, rel string, r io.Reader) (int64, error) {
	return s.WriteInThen(ws, rel, r, nil)
}

// WriteInThen is WriteIn, then calls then with the file written, still
// open, as the sandbox's user (inroot.WriteFileThen).
func (s *Session) WriteInThen(ws *os.File, rel string, r io.Reader, then func(*os.File) error) (int64, error) {
	id := s.sb.UserHostID()
	var n int64
	err := inroot.AsUser(id, id, func() error {
		var err error
		n, err = inroot.WriteFileThen(ws, rel, r, MaxFile, id, id, then)
		return err
	})
	return n, err
}

// OpenFile opens a regular file of the session's workspace for reading,
// as the sandbox's user, confined to the workspace, and checks its size.
func (s *Session) OpenFile(rel string) (*os.File, int64, error) {
	return s.OpenFileIn(sandbox.HomeDir, rel)
}

// OpenFileIn is OpenFile of a file below dir, one of the sandbox's own
// directories (sandbox.ScratchDirs), confined to it.
func (s *Session) OpenFileIn(dir, rel string) (*os.File, int64, error) {
	ws, err := s.openDir(dir)
	if err != nil {
		return nil, 0, ErrGone
	}
	defer ws.Close()
	var f *os.File
	id := s.sb.UserHostID()
	err = inroot.AsUser(id, id, func() error {
		var err error
		f, err = inroot.Open(ws, rel)
		return err
	})
	if err != nil {
		return nil, 0, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, 0, err
	}
	if fi.Size() > MaxFile {
		f.Close()
		return nil, 0, fmt.Errorf("%w: the file is %d bytes; at most %d can be read", inroot.ErrTooLarge, fi.Size(), MaxFile)
	}
	return f, fi.Size(), nil
}

// SessionsOf are the sessions c may see, oldest first: all of them on the
// local socket, a token's own elsewhere.
func (n *Node) SessionsOf(c *Caller) []*Session {
	n.sessions.mu.Lock()
	var mine []*Session
	for _, s := range n.sessions.m {
		if c.Sees(s.owner) {
			mine = append(mine, s)
		}
	}
	n.sessions.mu.Unlock()
	slices.SortFunc(mine, func(a, b *Session) int { return a.created.Compare(b.created) })
	return mine
}

// Session finds session id for c: one c may not see does not exist for
// it.
func (n *Node) Session(c *Caller, id string) (*Session, error) {
	n.sessions.mu.Lock()
	s := n.sessions.m[id]
	n.sessions.mu.Unlock()
	if s == nil || !c.Sees(s.owner) {
		return nil, errdefs.Errorf(errdefs.ErrNotFound, "no session %q", Shorten(id))
	}
	return s, nil
}

// Sessions is how many sessions the node has, open or recently ended.
func (n *Node) Sessions() int {
	n.sessions.mu.Lock()
	defer n.sessions.mu.Unlock()
	return len(n.sessions.m)
}

// ID is the session's id.
func (s *Session) ID() string { return s.id }

// Owner is the Name of the caller that opened the session.
func (s *Session) Owner() string { return s.owner }

// Tool is the session's tool.
func (s *Session) Tool() *config.Tool { return s.tool }

// NetWindow collects the session's egress and broker decisions from now
// until stop, into the result stop returns: for code a resident kernel
// runs, which is no exec of its own (see runner.Binding.Window).
func (s *Session) NetWindow() (stop func() *result.Result) {
	if s.bind == nil {
		return func() *result.Result { return &result.Result{} }
	}
	return s.bind.Window()
}

// Sandbox is the session's sandbox, its own for its life.
func (s *Session) Sandbox() *sandbox.Sandbox {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sb
}

// Created is when the session was opened.
func (s *Session) Created() time.Time { return s.created }

// Expires is when the session ends at the latest; for a paused session,
// whose lifetime stands still, as far from now as it was from the pause.
func (s *Session) Expires() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.paused {
		return time.Now().Add(s.lifeLeft)
	}
	return s.expires
}

// SetLife makes the session end life from now at the latest (for a
// paused session: life after it resumes).
func (s *Session) SetLife(life time.Duration) {
	s.mu.Lock()
	if s.paused {
		s.lifeLeft = life
	} else {
		s.expires = time.Now().Add(life)
	}
	s.mu.Unlock()
}

// ExtendLife makes the session end life from now at the latest, unless
// it would end later already: it never shortens the session's life.
func (s *Session) ExtendLife(life time.Duration) {
	s.mu.Lock()
	if s.paused {
		s.lifeLeft = max(s.lifeLeft, life)
	} else if t := time.Now().Add(life); t.After(s.expires) {
		s.expires = t
	}
	s.mu.Unlock()
}

// Ending is closed when the session starts to end: for what waits on the
// sandbox without being a call (a watch of its files).
func (s *Session) Ending() <-chan struct{} { return s.ending }

// Shorten bounds a name quoted in an answer or a record.
func Shorten(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}

// InWorkspace runs fn on the session's workspace, as the sandbox's user
// (uid), confined to the workspace (see WriteFile). The caller has
// entered the session.
func (s *Session) InWorkspace(fn func(ws *os.File, uid int) error) error {
	return s.InDir(sandbox.HomeDir, fn)
}

// InDir is InWorkspace for dir, one of the sandbox's own directories
// (sandbox.ScratchDirs), confined to it.
func (s *Session) InDir(dir string, fn func(root *os.File, uid int) error) error {
	ws, err := s.openDir(dir)
	if err != nil {
		return ErrGone
	}
	defer ws.Close()
	id := s.sb.UserHostID()
	return inroot.AsUser(id, id, func() error { return fn(ws, id) })
}

// openDir opens dir of the sandbox for a file call: one of its own
// directories (sandbox.OpenDir), or its root when that is read-only, for
// reading what the sandbox itself can read: the root is mounted
// read-only (MOUNT_ATTR_RDONLY), so no write goes through it whoever
// tries, and inroot never crosses from it into another mount.
func (s *Session) openDir(dir string) (*os.File, error) {
	if dir == "/" && !s.sb.WritableRoot() {
		return s.sb.OpenRoot()
	}
	return s.sb.OpenDir(dir)
}

// Alive reports whether the session's sandbox is still there.
func (s *Session) Alive() bool {
	sb := s.Sandbox()
	return sb != nil && alive(sb)
}

// FileError is the error a file call answers for err, whatever the edge:
// inroot's errors, in their classes, with messages that name no host
// path; any other failure is the node's own.
func FileError(err error) error {
	switch {
	case errors.Is(err, ErrGone), errors.Is(err, inroot.ErrPath), errors.Is(err, inroot.ErrTooLarge):
		return err // written for the caller: the path as given, the sizes
	case errors.Is(err, inroot.ErrNotFound):
		return errdefs.New(inroot.ErrNotFound, "no such file in the workspace")
	case errors.Is(err, inroot.ErrNotRegular):
		return errdefs.New(inroot.ErrNotRegular, "not a regular file")
	case errors.Is(err, inroot.ErrNoSpace):
		return ErrDiskFull
	}
	return errors.New("file operation failed")
}
