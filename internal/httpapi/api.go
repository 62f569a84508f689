// Package httpapi is the node's native HTTP API (docs/api.md), an edge of
// the node: runs (plain, streamed as NDJSON, or on a terminal), sessions
// with their commands and files, what runs now and its kill, the audit
// log, the tools, pools, health and metrics. It translates the API's JSON
// to the node's lifecycles and answers their errors through edge.WriteErr.
package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/internal/audit"
	"github.com/airlockhq/airlock/internal/config"
	"github.com/airlockhq/airlock/internal/edge"
	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/httpx"
	"github.com/airlockhq/airlock/internal/node"
	"github.com/airlockhq/airlock/internal/runner/attach"
	"github.com/airlockhq/airlock/internal/snapshot"
	"github.com/airlockhq/airlock/internal/volume"
	"github.com/airlockhq/airlock/pool"
	"github.com/airlockhq/airlock/result"
	"github.com/airlockhq/airlock/sandbox"
)

// maxBody bounds a request body.
const maxBody = 1 << 20

// Options configure the edge.
type Options struct {
	// Config holds the tools; the node's.
	Config *config.Config
	// StallTimeout bounds one write of a command's event stream (NDJSON,
	// a terminal's).
	StallTimeout time.Duration
	// Logger receives the edge's log.
	Logger *slog.Logger
	// MCP, if set, is served at /mcp (the MCP edge's streamable HTTP).
	MCP http.Handler
	// Shed counts the connections the listeners closed as soon as they
	// accepted them (their address held its share), for /metrics.
	Shed func() int64
	// Reload, if set, serves POST /v1/reload: the daemon reads its
	// config again (the local socket's call only).
	Reload func(ctx context.Context, client string, imagesOnly bool) (api.ReloadReport, error)
	// ConsoleLogin, if set, serves POST /v1/console/login: a one-time
	// link into the web console (the local socket's call only).
	ConsoleLogin func() (string, error)
}

// Server is the node's native HTTP API (docs/api.md): runs, sessions and
// their files and terminals, what runs now, the audit log, the pools and
// the metrics.
type Server struct {
	Core
	*edge.Guard
	opts Options
	// ttyEnd ends, in shutdown, the commands with a terminal, whose
	// connections the HTTP servers no longer hold (see tty.go); ttys
	// counts their handlers.
	ttyEnd    context.Context
	ttyEndNow context.CancelFunc
	ttys      ttyCount
	// suggesting holds the one policy suggestion made at a time: each
	// holds up to MaxSuggestEvents events in memory.
	suggesting chan struct{}
}

// Core is what the API asks of the node (*node.Node): the edge's tests
// put a fake behind it, and need no root.
type Core interface {
	// Tools is the config as written, the last reload's: where tools
	// are looked up.
	Tools() *config.Config
	Activity(c *node.Caller) api.Activity
	Audit() *audit.Log
	Counts() *node.Counters
	Exec(ctx context.Context, s *node.Session, client string, x sandbox.ExecRequest) (*result.Result, error)
	Kill(ctx context.Context, c *node.Caller, id, client string) error
	OpenSession(ctx context.Context, t *config.Tool, client string, c *node.Caller, idle, life time.Duration, narrowed *attach.Policy) (*node.Session, error)
	OpenSessionWith(ctx context.Context, t *config.Tool, client string, c *node.Caller, idle, life time.Duration, narrowed *attach.Policy, mounts []node.VolumeMount) (*node.Session, error)
	CreateVolume(ctx context.Context, c *node.Caller, client, name string, size int64) (volume.Meta, error)
	Volumes(c *node.Caller) ([]volume.Meta, error)
	FindVolume(c *node.Caller, idOrName string) (volume.Meta, error)
	DeleteVolume(c *node.Caller, idOrName, client string) error
	Pause(ctx context.Context, s *node.Session, client, reason string) error
	Usage() sandbox.Usage
	WriteMetrics(w io.Writer) error
	Budget() sandbox.Budget
	Snapshot(ctx context.Context, s *node.Session, c *node.Caller, client, name string) (snapshot.Meta, error)
	Snapshots(c *node.Caller) ([]snapshot.Meta, error)
	FindSnapshot(c *node.Caller, idOrName string) (snapshot.Meta, error)
	DeleteSnapshot(c *node.Caller, idOrName, client string) error
	OpenFromSnapshot(ctx context.Context, m snapshot.Meta, client string, c *node.Caller, idle, life time.Duration, narrowed *attach.Policy, mounts []node.VolumeMount) (*node.Session, error)
	Fork(ctx context.Context, s *node.Session, c *node.Caller, client string, count int, life time.Duration) ([]node.Forked, error)
	Resume(ctx context.Context, s *node.Session, client, reason string, life time.Duration) (bool, error)
	ResumeFromFiles(ctx context.Context, s *node.Session, client, reason string, life time.Duration) (bool, bool, error)
	Plan(tool string) attach.Plan
	PoolStats(tool string) (pool.Stats, bool)
	Quitting() context.Context
	RecordFile(client string, s *node.Session, op, path string, size int64, err error)
	ReserveCapture(ctx context.Context, t *config.Tool, l *sandbox.Limits) (release func(), err error)
	Run(ctx context.Context, j node.RunRequest) (*result.Result, func(), error)
	Session(c *node.Caller, id string) (*node.Session, error)
	SessionsOf(c *node.Caller) []*node.Session
}

var _ Core = (*node.Node)(nil)

// New returns the native API of n, guarded by g.
func New(n Core, g *edge.Guard, opts Options) *Server {
	if opts.Shed == nil {
		opts.Shed = func() int64 { return 0 }
	}
	d := &Server{Core: n, Guard: g, opts: opts, suggesting: make(chan struct{}, 1)}
	d.ttyEnd, d.ttyEndNow = context.WithCancel(context.Background())
	return d
}

// Handler serves the API. Requests reach it with their caller (the
// listener's WithCaller or RequireToken); one without is refused.
func (d *Server) Handler() http.Handler { return d.routes() }

// EndTerminals ends the commands with a terminal, once the HTTP servers
// have shut down (their connections are the handlers', not the
// servers'), and waits for their handlers; later ones are refused.
func (d *Server) EndTerminals() {
	d.ttyEndNow()
	d.ttys.closeAndWait()
}

func (d *Server) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/v1/runs", edge.Only(http.MethodPost, d.postRun))
	mux.HandleFunc("/v1/runs/{id}", edge.Only(http.MethodDelete, d.deleteRun))
	mux.HandleFunc("/v1/ps", edge.Only(http.MethodGet, d.getPS))
	mux.HandleFunc("/v1/tools", edge.Only(http.MethodGet, d.getTools))
	mux.HandleFunc("/v1/pools", edge.Only(http.MethodGet, d.getPools))
	mux.HandleFunc("/metrics", edge.Only(http.MethodGet, d.getMetrics))
	mux.HandleFunc("/v1/audit", edge.Only(http.MethodGet, d.getAudit))
	mux.HandleFunc("/v1/tools/{name}/policy-suggestion", edge.Only(http.MethodGet, d.getPolicySuggestion))
	if d.opts.MCP != nil {
		mux.Handle("/mcp", d.opts.MCP)
	}
	d.sessionRoutes(mux)
	d.snapshotRoutes(mux)
	d.volumeRoutes(mux)
	mux.HandleFunc("/healthz", edge.Only(http.MethodGet, d.getHealth))
	mux.HandleFunc("/v1/reload", edge.Only(http.MethodPost, d.postReload))
	mux.HandleFunc("/v1/console/login", edge.Only(http.MethodPost, d.postConsoleLogin))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		edge.WriteErr(w, errdefs.Errorf(errdefs.ErrNotFound, "no such endpoint %s", path.Clean("/"+r.URL.Path)))
	})
	// Every request needs a caller its listener gave it: none is
	// refused, never taken for the node.Local socket's.
	return d.Counted(d.Recoverer(d.RequireCaller(cleanPaths(mux))))
}

// cleanPaths refuses a path with ".", ".." or empty segments. ServeMux
// would answer it with a redirect to the cleaned path, which a client
// sending a body (a file PUT) does not follow and may take for success:
// `session cp a.txt ID:sub/../b.txt` exited 0 having written nothing.
func cleanPaths(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if p := r.URL.Path; p != "/" && p != "" && path.Clean(p) != p {
			edge.WriteErr(w, errdefs.Errorf(errdefs.ErrInvalid, "the path %q has \".\", \"..\" or empty segments; name the file by its plain path in the workspace", edge.ShortenPath(p)))
			return
		}
		h.ServeHTTP(w, r)
	})
}

// decodeRun reads and checks a run request.
func decodeRun(w http.ResponseWriter, r *http.Request) (*api.RunRequest, bool) {
	var req api.RunRequest
	if !decodeBody(w, r, &req) {
		return nil, false
	}
	if err := checkTTY(r, req.TTY, req.Stdin); err != nil {
		edge.WriteErr(w, err)
		return nil, false
	}
	switch {
	case req.Tool == "":
		edge.WriteErr(w, errdefs.New(errdefs.ErrInvalid, `"tool" is required`))
	case len(req.Argv) > 0 && req.Argv[0] == "":
		edge.WriteErr(w, errNoCommand)
	case req.Workdir != "" && !path.IsAbs(req.Workdir):
		edge.WriteErr(w, errRelativeWorkdir)
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
func (d *Server) noTool(name string) error {
	return errdefs.Errorf(errdefs.ErrNotFound, "no tool %q (tools: %s)", name, strings.Join(d.tools().Order, ", "))
}

// postRun runs one command of a tool in a fresh sandbox: claimed warm
// from the tool's pool (or created), used once, destroyed.
func (d *Server) postRun(w http.ResponseWriter, r *http.Request) {
	req, ok := decodeRun(w, r)
	if !ok {
		return
	}
	if d.ForbidTool(w, r, req.Tool) {
		return
	}
	t, ok := d.tools().Tools[req.Tool]
	if _, pooled := d.PoolStats(req.Tool); !ok || !pooled {
		edge.WriteErr(w, d.noTool(req.Tool))
		return
	}
	if len(req.Argv) == 0 {
		// The tool's image may give the command (its entrypoint and cmd).
		req.Argv = d.Plan(req.Tool).Argv
		if len(req.Argv) == 0 {
			edge.WriteErr(w, errdefs.New(errdefs.ErrInvalid, `"argv" needs at least a command (the tool's image has no default command)`))
			return
		}
	}
	stream := strings.Contains(r.Header.Get("Accept"), api.NDJSON)
	j := node.RunRequest{Tool: t, Client: edge.ClientOf(r), Caller: edge.CallerOf(r.Context()), Argv: req.Argv, Env: req.Env, Dir: node.Workdir(req.Workdir, t), Capture: !stream}
	if req.Limits != nil {
		l, err := attach.RunLimits(d.Plan(t.Name).Spec.Limits, req.Limits)
		if err != nil {
			edge.WriteErr(w, err)
			return
		}
		j.Limits = &l
	}
	if req.Stdin != "" {
		j.Stdin = strings.NewReader(req.Stdin)
	}
	ctx := r.Context()
	var ev *eventWriter
	var tty *ttyStream
	switch {
	case req.TTY != nil:
		if !d.ttys.add() {
			edge.WriteErr(w, node.ErrShutdown)
			return
		}
		defer d.ttys.done()
		var end func()
		tty, ctx, end = d.newTTY(ctx, req.TTY)
		defer end()
		ev = tty.events
		tty.request(&j)
		j.Started = func() error { return tty.upgrade(w) }
	case stream:
		ev = responseEvents(w, d.opts.StallTimeout)
		var end func()
		ctx, end = ev.context(r)
		defer end()
		j.OnEvent = ev.write
		j.Started = func() error {
			w.Header().Set("Content-Type", api.NDJSON)
			w.WriteHeader(http.StatusOK)
			return nil
		}
	}
	res, done, err := d.Run(ctx, j)
	if err != nil {
		edge.WriteErr(w, err)
		return
	}
	// The answer is out before the sandbox goes (done), but the handler
	// returns only after, so a graceful shutdown waits for it.
	defer done()
	if tty != nil && tty.conn == nil {
		// The switch failed: the connection is still an HTTP one.
		edge.WriteErr(w, errors.New(res.Error))
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
		edge.WriteErr(w, errors.New("result could not be encoded"))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.FormatInt(e.Len()+1, 10))
	w.WriteHeader(http.StatusOK)
	_, _ = e.WriteTo(w)
	_, _ = io.WriteString(w, "\n")
	_ = http.NewResponseController(w).Flush()
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

func (d *Server) getTools(w http.ResponseWriter, r *http.Request) {
	out := []api.Tool{}
	c := edge.CallerOf(r.Context())
	for _, name := range d.tools().Order {
		if !c.Allows(name) {
			continue
		}
		t := d.tools().Tools[name]
		at := api.Tool{Name: name, Description: t.Description, Warm: t.Pool.Warm, Egress: []string{}, Services: slices.Clone(t.Services)}
		if at.Services == nil {
			at.Services = []string{}
		}
		for _, e := range t.Egress {
			at.Egress = append(at.Egress, e.String())
		}
		out = append(out, at)
	}
	edge.WriteJSON(w, http.StatusOK, out)
}

// poolStats is a pool's counters as the API serves them. The two types
// have the same fields, so a field added to one and not the other stops
// the build here.
func poolStats(s pool.Stats) api.PoolStats { return api.PoolStats(s) }

func (d *Server) getPools(w http.ResponseWriter, r *http.Request) {
	out := []api.PoolStats{}
	c := edge.CallerOf(r.Context())
	for _, name := range d.tools().Order {
		if c.Allows(name) {
			st, _ := d.PoolStats(name)
			out = append(out, poolStats(st))
		}
	}
	edge.WriteJSON(w, http.StatusOK, out)
}

// getPS answers GET /v1/ps: the runs, MCP servers and sessions in flight
// that the caller may see, with their usage so far and their ceilings.
func (d *Server) getPS(w http.ResponseWriter, r *http.Request) {
	edge.WriteJSON(w, http.StatusOK, d.Activity(edge.CallerOf(r.Context())))
}

// deleteRun answers DELETE /v1/runs/{id}: the run (or MCP server) is
// ended and its sandbox destroyed, as a breach would; the kill is
// recorded, with who asked, before it is acknowledged.
func (d *Server) deleteRun(w http.ResponseWriter, r *http.Request) {
	if err := d.Kill(r.Context(), edge.CallerOf(r.Context()), r.PathValue("id"), edge.ClientOf(r)); err != nil {
		edge.WriteErr(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// tools is the config tools are looked up in: the core's, which a reload
// replaces; the options' where the core has none (a test's fake).
func (d *Server) tools() *config.Config {
	if c := d.Tools(); c != nil {
		return c
	}
	return d.opts.Config
}

// postReload answers POST /v1/reload: the local socket's alone, since a
// reload changes what every caller may do.
func (d *Server) postReload(w http.ResponseWriter, r *http.Request) {
	if edge.CallerOf(r.Context()) != node.Local {
		edge.WriteErr(w, errdefs.New(errdefs.ErrDenied, "a reload is asked on the daemon's unix socket (airlock reload), not with a token"))
		return
	}
	if d.opts.Reload == nil {
		edge.WriteErr(w, errdefs.New(errdefs.ErrUnavailable, "this daemon cannot reload its config"))
		return
	}
	var req api.ReloadRequest
	if r.ContentLength != 0 && !decodeBody(w, r, &req) {
		return
	}
	rep, err := d.opts.Reload(r.Context(), edge.ClientOf(r), req.ImagesOnly)
	if err != nil {
		edge.WriteErr(w, err)
		return
	}
	edge.WriteJSON(w, http.StatusOK, rep)
}

// postConsoleLogin answers POST /v1/console/login with a one-time link
// into the web console: the local socket's alone, since the link carries
// its rights.
func (d *Server) postConsoleLogin(w http.ResponseWriter, r *http.Request) {
	if edge.CallerOf(r.Context()) != node.Local {
		edge.WriteErr(w, errdefs.New(errdefs.ErrDenied, "a console login link is asked on the daemon's unix socket (airlock console), not with a token"))
		return
	}
	if d.opts.ConsoleLogin == nil {
		edge.WriteErr(w, errdefs.New(errdefs.ErrUnavailable, "this daemon serves no console"))
		return
	}
	u, err := d.opts.ConsoleLogin()
	if err != nil {
		edge.WriteErr(w, err)
		return
	}
	edge.WriteJSON(w, http.StatusOK, map[string]string{"url": u})
}
