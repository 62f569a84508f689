package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/internal/audit"
	"github.com/airlockhq/airlock/internal/config"
	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/httpx"
	"github.com/airlockhq/airlock/internal/runner/attach"
	"github.com/airlockhq/airlock/pool"
	"github.com/airlockhq/airlock/result"
	"github.com/airlockhq/airlock/sandbox"
)

// maxBody bounds a request body.
const maxBody = 1 << 20

func (d *Daemon) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/v1/runs", only(http.MethodPost, d.postRun))
	mux.HandleFunc("/v1/runs/{id}", only(http.MethodDelete, d.deleteRun))
	mux.HandleFunc("/v1/ps", only(http.MethodGet, d.getPS))
	mux.HandleFunc("/v1/tools", only(http.MethodGet, d.getTools))
	mux.HandleFunc("/v1/pools", only(http.MethodGet, d.getPools))
	mux.HandleFunc("/metrics", only(http.MethodGet, d.getMetrics))
	mux.HandleFunc("/v1/audit", only(http.MethodGet, d.getAudit))
	mux.Handle("/mcp", d.mcpHandler())
	d.sessionRoutes(mux)
	mux.HandleFunc("/healthz", only(http.MethodGet, d.getHealth))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeErr(w, errdefs.Errorf(errdefs.ErrNotFound, "no such endpoint %s", path.Clean("/"+r.URL.Path)))
	})
	// Every request needs a caller its listener gave it: none is
	// refused, never taken for the local socket's.
	return d.counted(recoverer(d.requireCaller(cleanPaths(mux))))
}

// cleanPaths refuses a path with ".", ".." or empty segments. ServeMux
// would answer it with a redirect to the cleaned path, which a client
// sending a body (a file PUT) does not follow and may take for success:
// `session cp a.txt ID:sub/../b.txt` exited 0 having written nothing.
func cleanPaths(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if p := r.URL.Path; p != "/" && p != "" && path.Clean(p) != p {
			writeErr(w, errdefs.Errorf(errdefs.ErrInvalid, "the path %q has \".\", \"..\" or empty segments; name the file by its plain path in the workspace", shortenPath(p)))
			return
		}
		h.ServeHTTP(w, r)
	})
}

// shortenPath bounds a path quoted in an answer.
func shortenPath(p string) string {
	if len(p) > 256 {
		return p[:256] + "..."
	}
	return p
}

// counted counts API requests.
func (d *Daemon) counted(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		d.counts.requests.Add(1)
		h.ServeHTTP(w, r)
	})
}

// recoverer turns a handler panic into a 500 instead of a dropped
// connection; the daemon must never go down on a request.
func recoverer(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if v := recover(); v != nil {
				if v == http.ErrAbortHandler {
					panic(v)
				}
				writeErr(w, errors.New("internal error"))
			}
		}()
		h.ServeHTTP(w, r)
	})
}

// only restricts a handler to one method.
func only(method string, h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Method != method {
			w.Header().Set("Allow", method)
			writeErr(w, errdefs.Errorf(errMethod, "%s is not allowed here; use %s", r.Method, method))
			return
		}
		h(w, r)
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// decodeRun reads and checks a run request.
func decodeRun(w http.ResponseWriter, r *http.Request) (*api.RunRequest, bool) {
	var req api.RunRequest
	if !decodeBody(w, r, &req) {
		return nil, false
	}
	if err := checkTTY(r, req.TTY, req.Stdin); err != nil {
		writeErr(w, err)
		return nil, false
	}
	switch {
	case req.Tool == "":
		writeErr(w, errdefs.New(errdefs.ErrInvalid, `"tool" is required`))
	case len(req.Argv) > 0 && req.Argv[0] == "":
		writeErr(w, errNoCommand)
	case req.Workdir != "" && !path.IsAbs(req.Workdir):
		writeErr(w, errRelativeWorkdir)
	default:
		return &req, true
	}
	return nil, false
}

// Refusals of a run's or an exec's request.
var (
	errNoCommand       = errdefs.New(errdefs.ErrInvalid, `"argv" needs at least a command`)
	errRelativeWorkdir = errdefs.New(errdefs.ErrInvalid, `"workdir" must be an absolute path`)
)

// noTool is the refusal of a tool the config does not have.
func (d *Daemon) noTool(name string) error {
	return errdefs.Errorf(errdefs.ErrNotFound, "no tool %q (tools: %s)", name, strings.Join(d.opts.Config.Order, ", "))
}

// postRun runs one command of a tool in a fresh sandbox: claimed warm
// from the tool's pool (or created), used once, destroyed.
func (d *Daemon) postRun(w http.ResponseWriter, r *http.Request) {
	req, ok := decodeRun(w, r)
	if !ok {
		return
	}
	if d.forbidTool(w, r, req.Tool) {
		return
	}
	t, ok := d.opts.Config.Tools[req.Tool]
	p := d.pools[req.Tool]
	if !ok || p == nil {
		writeErr(w, d.noTool(req.Tool))
		return
	}
	if len(req.Argv) == 0 {
		// The tool's image may give the command (its entrypoint and cmd).
		req.Argv = d.plans[req.Tool].Argv
		if len(req.Argv) == 0 {
			writeErr(w, errdefs.New(errdefs.ErrInvalid, `"argv" needs at least a command (the tool's image has no default command)`))
			return
		}
	}
	stream := strings.Contains(r.Header.Get("Accept"), api.NDJSON)
	j := runJob{tool: t, client: clientOf(r), caller: callerOf(r.Context()), argv: req.Argv, env: req.Env, dir: workdir(req.Workdir, t), capture: !stream}
	if req.Limits != nil {
		l, err := attach.RunLimits(d.plans[t.Name].Spec.Limits, req.Limits)
		if err != nil {
			writeErr(w, err)
			return
		}
		j.limits = &l
	}
	if req.Stdin != "" {
		j.stdin = &req.Stdin
	}
	ctx := r.Context()
	var ev *eventWriter
	switch {
	case req.TTY != nil:
		if !d.ttys.add() {
			writeErr(w, errShutdown)
			return
		}
		defer d.ttys.done()
		var end func()
		j.tty, ctx, end = d.newTTY(ctx, req.TTY)
		defer end()
		ev = j.tty.events
		j.started = func() error { return j.tty.upgrade(w) }
	case stream:
		ev = responseEvents(w, d.opts.StallTimeout)
		var end func()
		ctx, end = ev.context(r)
		defer end()
		j.onEvent = ev.write
		j.started = func() error {
			w.Header().Set("Content-Type", api.NDJSON)
			w.WriteHeader(http.StatusOK)
			return nil
		}
	}
	res, done, err := d.run(ctx, j)
	if err != nil {
		writeErr(w, err)
		return
	}
	// The answer is out before the sandbox goes (done), but the handler
	// returns only after, so a graceful shutdown waits for it.
	defer done()
	if j.tty != nil && j.tty.conn == nil {
		// The switch failed: the connection is still an HTTP one.
		writeErr(w, errors.New(res.Error))
		return
	}
	if ev != nil {
		ev.write(resultEvent(res))
		return
	}
	// The whole answer, with its length, is flushed before the deferred
	// destroy: the caller need not wait for the teardown.
	writeResult(w, res)
}

// writeResult answers with a result, its output encoded straight from
// the captured buffers (see result.Encode): many runs answered at once
// each hold their output once, not several copies of it.
func writeResult(w http.ResponseWriter, res *result.Result) {
	e, err := result.Encode(res)
	if err != nil {
		writeErr(w, errors.New("result could not be encoded"))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.FormatInt(e.Len()+1, 10))
	w.WriteHeader(http.StatusOK)
	_, _ = e.WriteTo(w)
	_, _ = io.WriteString(w, "\n")
	_ = http.NewResponseController(w).Flush()
}

// destroyLater runs done (a run's destroy) after the answer: MCP handlers
// cannot act after their answer is written, so the sandbox goes in the
// background, and shutdown waits for it. A call the fast path answers
// (see mcp_fast.go) hands done to it instead, which runs it once the
// answer is out, as postRun does.
func (d *Daemon) destroyLater(ctx context.Context, done func()) {
	if after, ok := ctx.Value(afterAnswerKey{}).(*func()); ok && *after == nil {
		*after = done
		return
	}
	d.destroying.Add(1)
	go func() {
		defer d.destroying.Done()
		done()
	}()
}

// afterAnswerKey holds a *func() that destroyLater may fill with the
// work to run once the answer is out.
type afterAnswerKey struct{}

// runJob is one run of a tool in a fresh sandbox.
type runJob struct {
	tool   *config.Tool
	client string
	// caller made the call: its token's concurrency bounds it (nil is
	// the local socket's).
	caller *caller
	argv   []string
	// recordArgv is the argv the audit log keeps (secret inputs masked);
	// nil keeps argv.
	recordArgv []string
	env        []string
	dir        string
	stdin      *string
	capture    bool
	onEvent    func(result.Event)
	// started, if set, is called once the run is recorded and has its
	// sandbox, just before the command starts; an error ends the run
	// there.
	started func() error
	// tty, if set, gives the command a terminal on this stream.
	tty *ttyStream
	// limits, if set, are the run's ceilings, lowered under the tool's
	// (attach.RunLimits); nil keeps the tool's.
	limits *sandbox.Limits
	// also, if set, gives events recorded with the run's outcome, in
	// the same write of the log (an MCP call's record).
	also func(*result.Result) []audit.Event
}

// extra is what j.also gives for res.
func (j *runJob) extra(res *result.Result) []audit.Event {
	if j.also == nil {
		return nil
	}
	return j.also(res)
}

// run records a run, claims a sandbox of its tool (warm from the pool, or
// created), runs the command with the tool's policy bound, and queues the
// record of its outcome before returning it. done waits for that record
// to be written and destroys the sandbox; call it once the answer is out.
// On error nothing ran and done is nil.
func (d *Daemon) run(ctx context.Context, j runJob) (_ *result.Result, done func(), err error) {
	// A job with no caller is refused by hold: none stands for local.
	release, err := d.hold(j.caller, false)
	if err != nil {
		return nil, nil, err
	}
	if j.capture {
		// Room for the output the answer will hold, before anything
		// starts: the daemon's own memory is no sandbox's ceiling.
		unhold := release
		free, err := d.reserveCapture(ctx, j.tool, j.limits)
		if err != nil {
			unhold()
			return nil, nil, err
		}
		release = func() { free(); unhold() }
	}
	defer func() {
		if done == nil {
			release()
		}
	}()
	scope := &runScope{tool: j.tool.Name, run: newRunID(), client: j.client}
	rec := j.recordArgv
	if rec == nil {
		rec = j.argv
	}
	// The run is recorded before its command starts. The record's write
	// (a transaction of the audit log) overlaps the claim and the binding
	// of the policy; while the log is known to fail, it is tried first, so
	// that refused runs consume no sandbox.
	recorded := func(context.Context) error { return nil }
	if d.audit.Err() != nil {
		if err := d.recordStart(ctx, *scope, rec, j.env, j.dir); err != nil {
			return nil, nil, err
		}
	} else {
		// Queued as the scope is before the claim fills in the sandbox.
		recorded = d.queueStart(ctx, *scope, rec, j.env, j.dir)
	}
	// Started on a miss: the binding below and the command's request
	// overlap init's start.
	sb, warm, err := d.claim(ctx, j.tool.Name, true)
	if err != nil {
		if rerr := recorded(context.WithoutCancel(ctx)); rerr != nil {
			return nil, nil, rerr
		}
		e := errNoSandbox
		if ctx.Err() != nil {
			e = fmt.Errorf("the caller went away before the command started: %w", context.Cause(ctx))
		} else if errors.Is(err, pool.ErrClosed) {
			e = errShutdown
		} else if errors.Is(err, sandbox.ErrCapacity) {
			e = atCapacity(err)
		} else {
			d.counts.failures.Add(1)
			d.opts.Logger.Warn("claim failed", "tool", j.tool.Name, "err", err)
		}
		d.finishRun(ctx, *scope, &result.Result{Outcome: result.Error, Error: e.Error()})
		return nil, nil, e
	}
	destroy := func() {
		if err := sb.Destroy(context.WithoutCancel(ctx)); err != nil {
			d.opts.Logger.Warn("destroy failed", "sandbox", sb.ID(), "err", err)
		}
	}
	scope.sandbox = sb.ID()
	b, bindErr := d.bindClaimed(ctx, sb, j.tool, scope, nil)
	if rerr := recorded(context.WithoutCancel(ctx)); rerr != nil {
		if bindErr == nil {
			_ = b.Close(context.WithoutCancel(ctx))
		}
		destroy()
		return nil, nil, rerr
	}
	d.claimed(*scope, warm)
	d.counts.runs.Add(1)
	if bindErr != nil {
		res := &result.Result{SandboxID: sb.ID(), Outcome: result.Error, Error: bindErr.Error()}
		d.finishRun(ctx, *scope, res, j.extra(res)...)
		return res, func() { destroy(); release() }, nil
	}
	if j.limits != nil {
		// Before the command starts, so that all of it runs under them.
		if err := sb.Lower(*j.limits); err != nil {
			d.counts.failures.Add(1)
			d.opts.Logger.Warn("lower a run's limits", "sandbox", sb.ID(), "err", err)
			res := &result.Result{SandboxID: sb.ID(), Outcome: result.Error, Error: "airlock could not apply the run's lowered limits"}
			d.finishRun(ctx, *scope, res, j.extra(res)...)
			return res, func() { _ = b.Close(context.WithoutCancel(ctx)); destroy(); release() }, nil
		}
	}
	x := sandbox.ExecRequest{
		Argv:        j.argv,
		Env:         append(append([]string(nil), j.tool.Env...), j.env...),
		Dir:         j.dir,
		SampleEvery: 250 * time.Millisecond,
		Capture:     j.capture,
		OnEvent:     j.onEvent,
	}
	if j.stdin != nil {
		x.Stdin = strings.NewReader(*j.stdin)
	}
	if j.tty != nil {
		j.tty.request(&x)
	}
	// In flight (airlock ps lists it, airlock kill ends it) before the
	// caller is told it started.
	kctx, kill, stop := killable(ctx)
	drop := d.live.add(&liveRun{id: scope.run, kind: "run", tool: j.tool.Name, client: j.client, owner: j.caller.name, sb: sb, started: time.Now(), kill: kill})
	if j.started != nil {
		if err := j.started(); err != nil {
			drop()
			stop()
			res := &result.Result{SandboxID: sb.ID(), Outcome: result.Error, Error: err.Error()}
			d.finishRun(ctx, *scope, res, j.extra(res)...)
			return res, func() { _ = b.Close(context.WithoutCancel(ctx)); destroy(); release() }, nil
		}
	}
	res, closeNet := b.RunCloseLater(kctx, x, nil)
	drop()
	if context.Cause(kctx) == errKilled && ctx.Err() == nil {
		// Killed, as the destroy does to its processes (SIGKILL): not a
		// failure of airlock, which callers (exit status 125) must be able
		// to tell apart.
		res.Outcome, res.Signal, res.ExitCode, res.Error = result.Signaled, int(syscall.SIGKILL), 0, "the run was ended by airlock kill"
	}
	stop()
	outcome := d.queueFinish(ctx, *scope, res, j.extra(res)...)
	return res, func() {
		if err := closeNet(context.WithoutCancel(ctx)); err != nil {
			d.opts.Logger.Warn("close the sandbox's network", "sandbox", sb.ID(), "err", err)
		}
		outcome()
		destroy()
		release()
	}, nil
}

func resultEvent(r *result.Result) result.Event {
	return result.Event{Type: result.EventResult, Millis: r.Usage.WallMillis, Result: r}
}

// eventWriter writes NDJSON events, one line each, flushed as they come.
// A caller that stops taking them holds nothing: a write that makes no
// progress for stall (Options.StallTimeout) ends the stream (later events
// are dropped) and tells ended, which ends the command. The output pumps that call
// write must not block for long (sandbox.ExecRequest.OnEvent): blocked,
// they would keep the command's sandbox past its limits, for as long as
// the caller kept the connection open.
type eventWriter struct {
	// mu is held across each write to out and its flush: events come
	// from the output pumps, the monitor and the gateway at once.
	mu  sync.Mutex
	out *httpx.Stream // nil: a terminal's stream before it switched
	// ended, when set, is told why the stream broke, once.
	ended func(error)
	dead  bool
}

// Why a command whose events went to its caller was ended from outside.
var (
	errStalled    = errors.New("the caller stopped reading the command's events")
	errCallerGone = errors.New("the caller went away")
)

// responseEvents writes events as the answer w, each write bounded by
// stall.
func responseEvents(w http.ResponseWriter, stall time.Duration) *eventWriter {
	return &eventWriter{out: httpx.NewStream(w, stall)}
}

// context returns the context of a command whose events e writes as r's
// answer: it ends when the caller goes away or stops reading, with that
// as its cause. end, deferred, lifts the stream's write deadline and
// releases the context.
func (e *eventWriter) context(r *http.Request) (ctx context.Context, end func()) {
	ctx, cancel := context.WithCancelCause(context.WithoutCancel(r.Context()))
	e.mu.Lock()
	e.ended = cancel
	e.mu.Unlock()
	// A write that fails cancels r's context itself, before it returns;
	// the writer says why under e.mu first, so the cause is its.
	stop := context.AfterFunc(r.Context(), func() {
		e.mu.Lock()
		defer e.mu.Unlock()
		cancel(errCallerGone)
	})
	return ctx, func() {
		stop()
		cancel(nil)
		e.done()
	}
}

func (e *eventWriter) write(ev result.Event) {
	b, err := json.Marshal(ev)
	if err != nil {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.out == nil || e.dead {
		return // a terminal's stream before it switched, or a broken one
	}
	if err := e.out.Send(append(b, '\n')); err != nil {
		e.dead = true
		if e.ended != nil {
			if errors.Is(err, httpx.ErrStalled) {
				err = fmt.Errorf("%w for %v", errStalled, e.out.Stall())
			} else {
				err = fmt.Errorf("the caller's connection broke: %w", err)
			}
			e.ended(err)
		}
	}
}

// done lifts the write deadline once the stream is over: the connection
// may carry the caller's next request.
func (e *eventWriter) done() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.out != nil && !e.dead {
		e.out.End()
	}
}

func workdir(asked string, t *config.Tool) string {
	switch {
	case asked != "":
		return asked
	case t.Workdir != "":
		return t.Workdir
	}
	return sandbox.HomeDir
}

func (d *Daemon) getTools(w http.ResponseWriter, r *http.Request) {
	out := []api.Tool{}
	c := callerOf(r.Context())
	for _, name := range d.opts.Config.Order {
		if !c.allows(name) {
			continue
		}
		t := d.opts.Config.Tools[name]
		at := api.Tool{Name: name, Description: t.Description, Warm: t.Pool.Warm, Egress: []string{}, Services: slices.Clone(t.Services)}
		if at.Services == nil {
			at.Services = []string{}
		}
		for _, e := range t.Egress {
			at.Egress = append(at.Egress, e.String())
		}
		out = append(out, at)
	}
	writeJSON(w, http.StatusOK, out)
}

// poolStats is a pool's counters as the API serves them. The two types
// have the same fields, so a field added to one and not the other stops
// the build here.
func poolStats(s pool.Stats) api.PoolStats { return api.PoolStats(s) }

func (d *Daemon) getPools(w http.ResponseWriter, r *http.Request) {
	out := []api.PoolStats{}
	c := callerOf(r.Context())
	for _, name := range d.opts.Config.Order {
		if c.allows(name) {
			out = append(out, poolStats(d.pools[name].Stats()))
		}
	}
	writeJSON(w, http.StatusOK, out)
}
