package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/internal/audit"
	"github.com/airlockhq/airlock/internal/config"
	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/httpx"
	"github.com/airlockhq/airlock/internal/linux/inroot"
	"github.com/airlockhq/airlock/internal/runner"
	"github.com/airlockhq/airlock/internal/runner/attach"
	"github.com/airlockhq/airlock/pool"
	"github.com/airlockhq/airlock/result"
	"github.com/airlockhq/airlock/sandbox"
)

// maxFile bounds one file written into or read out of a workspace; the
// sandbox's disk ceiling bounds them all together.
const maxFile = 16 << 20

// methods dispatches on the request method, answering 405 (in JSON, with
// Allow) for any other.
func methods(hs map[string]http.HandlerFunc) http.HandlerFunc {
	var allow []string
	for m := range hs {
		allow = append(allow, m)
	}
	return func(w http.ResponseWriter, r *http.Request) {
		if h, ok := hs[r.Method]; ok {
			h(w, r)
			return
		}
		w.Header().Set("Allow", strings.Join(allow, ", "))
		writeErr(w, errdefs.Errorf(errMethod, "%s is not allowed here", r.Method))
	}
}

func (d *Daemon) sessionRoutes(mux *http.ServeMux) {
	mux.HandleFunc("/v1/sessions", methods(map[string]http.HandlerFunc{
		http.MethodGet:  d.listSessions,
		http.MethodPost: d.postSession,
	}))
	mux.HandleFunc("/v1/sessions/{id}", methods(map[string]http.HandlerFunc{
		http.MethodGet:    d.getSession,
		http.MethodDelete: d.deleteSession,
	}))
	mux.HandleFunc("/v1/sessions/{id}/exec", only(http.MethodPost, d.postExec))
	mux.HandleFunc("/v1/sessions/{id}/files/{path...}", methods(map[string]http.HandlerFunc{
		http.MethodGet: d.getFile,
		http.MethodPut: d.putFile,
	}))
}

// decodeBody reads one JSON value into v, refusing unknown fields, more
// than one value and bodies over maxBody. It answers the error itself.
func decodeBody(w http.ResponseWriter, r *http.Request, v any) bool {
	err := httpx.JSONBody{Max: maxBody}.Decode(http.MaxBytesReader(w, r.Body, maxBody), v)
	switch {
	case err == nil:
		return true
	case errdefs.IsLimit(err):
		writeErr(w, errdefs.Errorf(errdefs.ErrLimit, "request body is over %d bytes", maxBody))
	case errdefs.IsInvalid(err):
		writeErr(w, errdefs.New(errdefs.ErrInvalid, "invalid JSON body: "+err.Error()))
	default:
		writeErr(w, errdefs.New(errdefs.ErrInvalid, "invalid JSON body: "+httpx.DescribeJSON(err)))
	}
	return false
}

func (d *Daemon) postSession(w http.ResponseWriter, r *http.Request) {
	var req api.SessionRequest
	if !decodeBody(w, r, &req) || d.forbidTool(w, r, req.Tool) {
		return
	}
	t, ok := d.opts.Config.Tools[req.Tool]
	if !ok {
		writeErr(w, d.noTool(req.Tool))
		return
	}
	life, err := parseBound(req.MaxLifetime, defaultLife, maxLife, "max_lifetime")
	if err == nil {
		var idle time.Duration
		if idle, err = parseBound(req.IdleTimeout, min(defaultIdle, life), life, "idle_timeout"); err == nil {
			d.openSession(w, r, t.Name, idle, life)
			return
		}
	}
	writeErr(w, errdefs.Errorf(errdefs.ErrInvalid, "%w", err))
}

func (d *Daemon) openSession(w http.ResponseWriter, r *http.Request, tool string, idle, life time.Duration) {
	s, err := d.newSession(r.Context(), d.opts.Config.Tools[tool], clientOf(r), callerOf(r.Context()), idle, life, nil)
	if err != nil {
		if r.Context().Err() == nil {
			writeErr(w, err)
		}
		return
	}
	writeJSON(w, http.StatusCreated, s.view())
}

// claimBound claims a sandbox of t for a session or MCP server and binds
// t's policy to it for its whole life, its decisions recorded in scope.
func (d *Daemon) claimBound(ctx context.Context, t *config.Tool, scope *runScope, narrowed *attach.Policy) (*sandbox.Sandbox, *runner.Binding, error) {
	sb, warm, err := d.claim(ctx, t.Name, false)
	if err != nil {
		if errors.Is(err, pool.ErrClosed) {
			return nil, nil, errShutdown
		}
		if errors.Is(err, sandbox.ErrCapacity) {
			return nil, nil, atCapacity(err)
		}
		d.counts.failures.Add(1)
		d.opts.Logger.Warn("claim failed", "tool", t.Name, "err", err)
		return nil, nil, errNoSandbox
	}
	scope.sandbox = sb.ID()
	d.claimed(*scope, warm)
	bind, err := d.bindClaimed(ctx, sb, t, scope, narrowed)
	if err != nil {
		_ = sb.Destroy(context.WithoutCancel(ctx))
		d.opts.Logger.Warn("bind failed", "tool", t.Name, "err", err)
		return nil, nil, errBind
	}
	return sb, bind, nil
}

// newSession opens a session of tool t: recorded first (refused when the
// log cannot be written), then a sandbox claimed and the tool's policy
// bound to it for the session's life. c is who may use it; the session
// is one of the daemon's MaxSessions and of c's token's concurrency
// until it ends.
func (d *Daemon) newSession(ctx context.Context, t *config.Tool, client string, c *caller, idle, life time.Duration, narrowed *attach.Policy) (*session, error) {
	release, err := d.hold(c, true)
	if err != nil {
		return nil, err
	}
	owner := c.name
	scope := &runScope{tool: t.Name, session: d.newSessionID(), client: client}
	opened := scope.event(audit.KindSessionCreated)
	opened.Detail = audit.Detail(map[string]string{"idle_timeout": idle.String(), "max_lifetime": life.String()})
	if err := d.acknowledge(ctx, opened); err != nil {
		release()
		return nil, err
	}
	fail := func(err error) (*session, error) {
		release()
		e := scope.event(audit.KindSessionEnded)
		e.Detail = audit.Detail(map[string]string{"reason": err.Error()})
		d.audit.Record(e)
		return nil, err
	}
	sb, bind, err := d.claimBound(ctx, t, scope, narrowed)
	if err != nil {
		return fail(err)
	}
	now := time.Now()
	s := &session{ending: make(chan struct{}), done: make(chan struct{}), id: scope.session, owner: owner, tool: t, sb: sb, bind: bind, created: now, lastUsed: now, idle: idle, expires: now.Add(life),
		onEnd: func(reason string) {
			release()
			e := scope.event(audit.KindSessionEnded)
			e.Detail = audit.Detail(map[string]string{"reason": reason})
			d.audit.Record(e)
		}}
	d.sessions.mu.Lock()
	closed := d.sessions.closed
	if !closed {
		d.sessions.m[s.id] = s
	}
	d.sessions.mu.Unlock()
	if closed {
		_ = s.end(context.WithoutCancel(ctx), "shutdown")
		return nil, errShutdown
	}
	return s, nil
}

// exec runs a command in the session's sandbox, recorded as a run of
// the session. The caller has entered the session.
func (d *Daemon) exec(ctx context.Context, s *session, client string, x sandbox.ExecRequest) (*result.Result, error) {
	scope := runScope{tool: s.tool.Name, sandbox: s.sb.ID(), session: s.id, run: newRunID(), client: client}
	if err := d.recordStart(ctx, scope, x.Argv, x.Env, x.Dir); err != nil {
		return nil, err
	}
	if ctx.Err() != nil {
		res := &result.Result{Outcome: result.Error, Error: fmt.Sprintf("the caller went away before the command started: %v", context.Cause(ctx))}
		d.finishRun(ctx, scope, res)
		return nil, context.Cause(ctx)
	}
	x.Env = append(append([]string(nil), s.tool.Env...), x.Env...)
	x.SampleEvery, x.KeepAlive = 250*time.Millisecond, true
	d.counts.runs.Add(1)
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
	d.finishRun(ctx, scope, res)
	return res, nil
}

// writeFile writes a file into the session's workspace, as the sandbox's
// user, confined to the workspace. The caller has entered the session.
func (s *session) writeFile(rel string, r io.Reader) (int64, error) {
	ws, err := s.sb.OpenWorkspace()
	if err != nil {
		return 0, errGone
	}
	defer ws.Close()
	return s.writeIn(ws, rel, r)
}

// writeIn is writeFile into a workspace already open (see
// sandbox.OpenWorkspace), for a call that writes several files.
func (s *session) writeIn(ws *os.File, rel string, r io.Reader) (int64, error) {
	id := s.sb.UserHostID()
	var n int64
	err := inroot.AsUser(id, id, func() error {
		var err error
		n, err = inroot.WriteFile(ws, rel, r, maxFile, id, id)
		return err
	})
	return n, err
}

// openFile opens a regular file of the session's workspace for reading,
// as the sandbox's user, confined to the workspace, and checks its size.
func (s *session) openFile(rel string) (*os.File, int64, error) {
	ws, err := s.sb.OpenWorkspace()
	if err != nil {
		return nil, 0, errGone
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
	if fi.Size() > maxFile {
		f.Close()
		return nil, 0, fmt.Errorf("%w: the file is %d bytes; at most %d can be read", inroot.ErrTooLarge, fi.Size(), maxFile)
	}
	return f, fi.Size(), nil
}

// lookup finds the session of the request's {id}, answering that there is
// none itself.
func (d *Daemon) lookup(w http.ResponseWriter, r *http.Request) *session {
	id := r.PathValue("id")
	d.sessions.mu.Lock()
	s := d.sessions.m[id]
	d.sessions.mu.Unlock()
	// A token sees only its own sessions; to others they do not exist.
	if c := callerOf(r.Context()); s != nil && !c.sees(s.owner) {
		s = nil
	}
	if s == nil {
		writeErr(w, errdefs.Errorf(errdefs.ErrNotFound, "no session %q", shorten(id)))
	}
	return s
}

func shorten(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}

// enterOrEnded registers a call in s, or answers that it has ended.
func enterOrEnded(w http.ResponseWriter, s *session) bool {
	if s.enter() {
		return true
	}
	v := s.view()
	writeErr(w, errdefs.Errorf(errdefs.ErrConflict, "session %s has ended (%s)", v.ID, v.EndReason))
	return false
}

// listSessions answers the sessions the caller may see (a token, its
// own), open and recently ended, oldest first.
// sessionsOf are the sessions c may see, oldest first: all of them on the
// local socket, a token's own elsewhere.
func (d *Daemon) sessionsOf(c *caller) []*session {
	d.sessions.mu.Lock()
	var mine []*session
	for _, s := range d.sessions.m {
		if c.sees(s.owner) {
			mine = append(mine, s)
		}
	}
	d.sessions.mu.Unlock()
	slices.SortFunc(mine, func(a, b *session) int { return a.created.Compare(b.created) })
	return mine
}

func (d *Daemon) listSessions(w http.ResponseWriter, r *http.Request) {
	mine := d.sessionsOf(callerOf(r.Context()))
	out := make([]api.Session, 0, len(mine))
	for _, s := range mine {
		out = append(out, s.view())
	}
	writeJSON(w, http.StatusOK, out)
}

func (d *Daemon) getSession(w http.ResponseWriter, r *http.Request) {
	if s := d.lookup(w, r); s != nil {
		writeJSON(w, http.StatusOK, s.view())
	}
}

func (d *Daemon) deleteSession(w http.ResponseWriter, r *http.Request) {
	s := d.lookup(w, r)
	if s == nil {
		return
	}
	// The answer comes once the sandbox is gone and the end recorded;
	// a caller that went away first gets none (the end goes on).
	if s.end(r.Context(), "deleted") != nil {
		return
	}
	// The end is recorded before it is acknowledged.
	if err := d.audit.Append(r.Context()); err != nil {
		d.opts.Logger.Error("audit: a session's end could not be recorded", "session", s.id, "err", err)
	}
	w.WriteHeader(http.StatusNoContent)
}

func (d *Daemon) postExec(w http.ResponseWriter, r *http.Request) {
	s := d.lookup(w, r)
	if s == nil {
		return
	}
	var req api.ExecRequest
	if !decodeBody(w, r, &req) {
		return
	}
	if err := checkTTY(r, req.TTY, req.Stdin); err != nil {
		writeErr(w, err)
		return
	}
	if len(req.Argv) == 0 || req.Argv[0] == "" {
		writeErr(w, errNoCommand)
		return
	}
	if req.Workdir != "" && !path.IsAbs(req.Workdir) {
		writeErr(w, errRelativeWorkdir)
		return
	}
	if !enterOrEnded(w, s) {
		return
	}
	defer s.leave()
	x := sandbox.ExecRequest{Argv: req.Argv, Env: req.Env, Dir: workdir(req.Workdir, s.tool)}
	if req.Stdin != "" {
		x.Stdin = strings.NewReader(req.Stdin)
	}
	if req.TTY != nil {
		d.execTTY(w, r, s, req.TTY, x)
		return
	}
	if !strings.Contains(r.Header.Get("Accept"), api.NDJSON) {
		x.Capture = true
		// Room for the output the answer holds (see capture.go), until
		// it is out.
		free, err := d.reserveCapture(r.Context(), s.tool, nil)
		if err != nil {
			writeErr(w, err)
			return
		}
		defer free()
		res, err := d.exec(r.Context(), s, clientOf(r), x)
		if err != nil {
			if r.Context().Err() == nil {
				writeErr(w, err)
			}
			return
		}
		writeResult(w, res)
		return
	}
	// The status goes out with the first event, after the run is
	// recorded: a refusal is still an error answer.
	ev := responseEvents(w, d.opts.StallTimeout)
	ctx, end := ev.context(r)
	defer end()
	x.OnEvent = ev.write
	w.Header().Set("Content-Type", api.NDJSON)
	res, err := d.exec(ctx, s, clientOf(r), x)
	if err != nil {
		if r.Context().Err() == nil {
			writeErr(w, err)
		}
		return
	}
	ev.write(resultEvent(res))
}

func (d *Daemon) putFile(w http.ResponseWriter, r *http.Request) {
	s := d.lookup(w, r)
	if s == nil || !enterOrEnded(w, s) {
		return
	}
	defer s.leave()
	if r.ContentLength > maxFile {
		writeErr(w, errdefs.Errorf(errdefs.ErrLimit, "files are at most %d bytes", maxFile))
		return
	}
	n, err := s.writeFile(r.PathValue("path"), r.Body)
	d.fileEvent(clientOf(r), s, "put", r.PathValue("path"), n, err)
	if err != nil {
		writeErr(w, fileErr(err))
		return
	}
	w.Header().Set("X-Airlock-Bytes", strconv.FormatInt(n, 10))
	w.WriteHeader(http.StatusNoContent)
}

func (d *Daemon) getFile(w http.ResponseWriter, r *http.Request) {
	s := d.lookup(w, r)
	if s == nil || !enterOrEnded(w, s) {
		return
	}
	defer s.leave()
	f, size, err := s.openFile(r.PathValue("path"))
	d.fileEvent(clientOf(r), s, "get", r.PathValue("path"), size, err)
	if err != nil {
		writeErr(w, fileErr(err))
		return
	}
	defer f.Close()
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Length", strconv.FormatInt(size, 10))
	_, _ = io.Copy(w, io.LimitReader(f, size))
}

// fileErr is the error a file call answers for err, over the API and MCP
// alike: inroot's errors, in their classes, with messages that name no
// host path; any other failure is the daemon's own.
func fileErr(err error) error {
	switch {
	case errors.Is(err, errGone), errors.Is(err, inroot.ErrPath), errors.Is(err, inroot.ErrTooLarge):
		return err // written for the caller: the path as given, the sizes
	case errors.Is(err, inroot.ErrNotFound):
		return errdefs.New(inroot.ErrNotFound, "no such file in the workspace")
	case errors.Is(err, inroot.ErrNotRegular):
		return errdefs.New(inroot.ErrNotRegular, "not a regular file")
	case errors.Is(err, inroot.ErrNoSpace):
		return errDiskFull
	}
	return errors.New("file operation failed")
}

// execTTY runs an exec with a terminal: the connection switches to
// api.TTYUpgrade once the request is checked, and the exec's refusal, if
// any, comes as its result on the stream. The caller has entered s.
func (d *Daemon) execTTY(w http.ResponseWriter, r *http.Request, s *session, size *api.TTYSize, x sandbox.ExecRequest) {
	if !d.ttys.add() {
		writeErr(w, errShutdown)
		return
	}
	defer d.ttys.done()
	t, ctx, end := d.newTTY(r.Context(), size)
	defer end()
	t.request(&x)
	if err := t.upgrade(w); err != nil {
		if t.conn == nil {
			writeErr(w, err)
		}
		return
	}
	res, err := d.exec(ctx, s, clientOf(r), x)
	if err != nil {
		res = &result.Result{SandboxID: s.sb.ID(), Outcome: result.Error, Error: err.Error()}
	}
	t.events.write(resultEvent(res))
}
