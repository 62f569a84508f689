package mcpedge

import (
	"context"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlockhq/airlock/internal/audit"
	"github.com/airlockhq/airlock/internal/config"
	"github.com/airlockhq/airlock/internal/edge"
	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/mcpserver"
	"github.com/airlockhq/airlock/internal/node"
	"github.com/airlockhq/airlock/internal/runner/attach"
	"github.com/airlockhq/airlock/result"
	"github.com/airlockhq/airlock/sandbox"
)

// Options configure the edge.
type Options struct {
	// Config holds the tools and MCP servers; the node's.
	Config *config.Config
	// Version is reported to MCP clients.
	Version string
	// Logger receives the edge's log.
	Logger *slog.Logger
}

// Server serves MCP for a node: the configured tools, the built-in
// session tools and the configured MCP servers of each client session.
type Server struct {
	Core
	*edge.Guard
	opts      Options
	instances instances   // MCP servers of client sessions
	mcpSess   mcpSessions // sandboxes of the built-in session tools
	// mcpFast counts the tools/call requests answered by the fast path
	// (see fast.go).
	mcpFast atomic.Int64
	// fastOff sends every request to the SDK (SetFastPath).
	fastOff atomic.Bool
}

// Core is what MCP asks of the node (*node.Node).
type Core interface {
	// Tools is the config as written, the last reload's: where tools
	// are looked up.
	Tools() *config.Config
	Audit() *audit.Log
	Exec(ctx context.Context, s *node.Session, client string, x sandbox.ExecRequest) (*result.Result, error)
	Later(done func())
	OpenSession(ctx context.Context, t *config.Tool, client string, c *node.Caller, idle, life time.Duration, narrowed *attach.Policy) (*node.Session, error)
	Quitting() context.Context
	RecordFile(client string, s *node.Session, op, path string, size int64, err error)
	ReserveCapture(ctx context.Context, t *config.Tool, l *sandbox.Limits) (release func(), err error)
	Run(ctx context.Context, j node.RunRequest) (*result.Result, func(), error)
	StartProcess(ctx context.Context, t *config.Tool, c *node.Caller, client string) (*node.Process, error)
}

var _ Core = (*node.Node)(nil)

// New returns the MCP edge of n, guarded by g.
func New(n Core, g *edge.Guard, opts Options) *Server {
	return &Server{Core: n, Guard: g, opts: opts}
}

// Handler serves MCP's streamable HTTP transport (mounted at /mcp).
func (d *Server) Handler() http.Handler { return d.mcpHandler() }

// Stop stops every MCP server the edge started, for shutdown.
func (d *Server) Stop() { d.instances.stopAll() }

// Running is how many MCP servers the edge runs now.
func (d *Server) Running() int { return d.instances.count() }

// FastCalls counts the tools/call requests the fast path answered.
func (d *Server) FastCalls() int64 { return d.mcpFast.Load() }

// SetFastPath turns the fast path of tools/call (see fast.go) on, as it
// is from the start, or off: every request then goes to the SDK. It is
// for tests, which run the same calls through both paths and check that
// they give the same answers and the same audit records; the fast path is
// a second path that must stay equivalent to the SDK's. A session keeps
// its state (initialized, its protocol version) either way.
func (d *Server) SetFastPath(on bool) { d.fastOff.Store(!on) }

// destroyLater runs done (a run's destroy) after the answer: MCP handlers
// cannot act after their answer is written, so the sandbox goes in the
// background, and shutdown waits for it. A call the fast path answers
// (see mcp_fast.go) hands done to it instead, which runs it once the
// answer is out, as postRun does.
func (d *Server) destroyLater(ctx context.Context, done func()) {
	if after, ok := ctx.Value(afterAnswerKey{}).(*func()); ok && *after == nil {
		*after = done
		return
	}
	d.Later(done)
}

// afterAnswerKey holds a *func() that destroyLater may fill with the
// work to run once the answer is out.
type afterAnswerKey struct{}

// mcpIdle ends MCP sessions left without a request this long.
const mcpIdle = 30 * time.Minute

// MCPServer builds the MCP server of one client session: the configured
// tools the caller may use, each call run as a run of the daemon, and
// the tools of the MCP servers it may use, each server started in a
// sandbox of its own when the session initializes and destroyed when it
// ends. client is the caller's identity in the audit log.
func (d *Server) MCPServer(c *node.Caller, client string) *mcp.Server {
	s, _ := d.mcpServer(c, client)
	return s
}

// mcpServer is MCPServer, and also returns the handlers of the configured
// tools it serves with airlock's own handler, by name: what the fast path
// of tools/call may call (see mcp_fast.go). The built-in tools and the
// MCP servers' tools are not among them.
func (d *Server) mcpServer(c *node.Caller, client string) (*mcp.Server, map[string]mcp.ToolHandler) {
	s, fast := mcpserver.NewWithHandlers(mcpserver.Options{
		Config:  d.tools(),
		Allows:  c.Allows,
		Version: d.opts.Version,
		Run: func(ctx context.Context, j mcpserver.Job) (*result.Result, error) {
			rr := node.RunRequest{
				Tool: j.Tool, Client: client, Caller: c, Argv: j.Argv, RecordArgv: j.RecordArgv,
				Dir: node.Workdir("", j.Tool), Capture: true, OnEvent: j.OnEvent,
				Also: func(res *result.Result) []audit.Event { return []audit.Event{callEvent(client, j.Record(res))} },
			}
			if j.Stdin != nil {
				rr.Stdin = strings.NewReader(*j.Stdin)
			}
			res, done, err := d.Run(ctx, rr)
			if err != nil {
				return nil, err
			}
			d.destroyLater(ctx, done)
			return res, nil
		},
		OnCall: d.recordCall(client),
	})
	d.addBuiltins(s, c, client)
	// A call the SDK itself refuses (a tool this caller is not given, or
	// that does not exist) never reaches a tool's handler, which records
	// the others: it is recorded here.
	s.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			res, err := next(ctx, method, req)
			if p, ok := req.GetParams().(*mcp.CallToolParamsRaw); ok && err != nil && method == "tools/call" {
				e := audit.Event{Kind: audit.KindMCPCall, Tool: node.Shorten(p.Name), Client: client, Decision: audit.Deny}
				e.Detail = audit.Detail(map[string]any{"reason": err.Error()})
				d.Audit().Record(e)
			}
			return res, err
		}
	})
	for name := range fast {
		if strings.HasPrefix(name, "airlock_") {
			delete(fast, name)
		}
		for _, srv := range d.tools().MCPServerOrder {
			if strings.HasPrefix(name, srv+".") {
				delete(fast, name)
			}
		}
	}
	if len(d.tools().MCPServerOrder) == 0 {
		return s, fast
	}
	// The servers start while the session initializes, before it is
	// answered, so their tools are listed from the first tools/list. The
	// streamable HTTP handler builds a server per request, so nothing may
	// start before a session exists.
	var once sync.Once
	s.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			if method != "initialize" {
				return next(ctx, method, req)
			}
			var err error
			once.Do(func() {
				var stop func()
				if stop, err = d.addServers(ctx, s, c, client); err != nil {
					return
				}
				ss, _ := req.GetSession().(*mcp.ServerSession)
				go func() {
					if ss != nil {
						_ = ss.Wait()
					} else {
						<-d.Quitting().Done()
					}
					stop()
				}()
			})
			if err != nil {
				return nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "airlock could not start the MCP servers: " + err.Error()}
			}
			return next(ctx, method, req)
		}
	})
	return s, fast
}

// recordCall records MCP tool calls of a client.
func (d *Server) recordCall(client string) func(mcpserver.CallRecord) {
	return func(r mcpserver.CallRecord) { d.Audit().Record(callEvent(client, r)) }
}

// callEvent is the audit record of an MCP tool call.
func callEvent(client string, r mcpserver.CallRecord) audit.Event {
	e := audit.Event{Kind: audit.KindMCPCall, Tool: r.Tool, Sandbox: r.Sandbox, Client: client, Decision: r.Outcome}
	e.Detail = audit.Detail(map[string]any{"arguments": r.Arguments, "reason": r.Reason, "duration_ms": r.Duration.Milliseconds()})
	return e
}

// LocalMCPServer is MCPServer for a caller on the host itself.
func (d *Server) LocalMCPServer(client string) *mcp.Server { return d.MCPServer(node.Local, client) }

// mcpHandler serves streamable HTTP MCP at /mcp. Each MCP session gets a
// server scoped to the caller that opened it, and only that caller may
// use the session afterwards.
func (d *Server) mcpHandler() http.Handler {
	owners := &sessionOwners{m: map[string]owner{}}
	h := mcp.NewStreamableHTTPHandler(func(r *http.Request) *mcp.Server {
		if id := r.Header.Get("Mcp-Session-Id"); id != "" {
			// A request of a session, which has its server: the SDK
			// asks only for the protocol versions it speaks. (Nil for
			// an id not known here: the SDK then checks against its
			// own list, and answers an unknown session itself.)
			// Building a server for every request was most of what
			// an MCP call cost over the plain API.
			return owners.server(id)
		}
		s, fast := d.mcpServer(edge.CallerOf(r.Context()), edge.ClientOf(r))
		if b, ok := r.Context().Value(builtKey{}).(*built); ok {
			b.server, b.fast = s, fast
		}
		return s
	}, &mcp.StreamableHTTPOptions{SessionTimeout: mcpIdle, Logger: d.opts.Logger})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c := edge.CallerOf(r.Context())
		if c == nil {
			// No server, no session: one with no caller would be
			// scoped to nobody (or, once, to the node.Local socket).
			edge.WriteErr(w, node.ErrNoCaller)
			return
		}
		if id := r.Header.Get("Mcp-Session-Id"); id != "" {
			// A session is its opener's: another caller that learned its
			// id gets what an unknown id gets.
			if !owners.use(id, c.Name, r.Method == http.MethodDelete) {
				edge.MarkRefused(r, "an MCP session another caller opened")
				edge.WriteErr(w, errdefs.New(errdefs.ErrNotFound, "no such MCP session"))
				return
			}
		}
		if r.Method == http.MethodGet {
			// A GET is a session's standing event stream, open for as
			// long as the client likes; it ends when shutdown begins so
			// that it does not hold the grace period (calls in flight,
			// which are POSTs, still finish).
			ctx, cancel := context.WithCancel(r.Context())
			defer cancel()
			defer context.AfterFunc(d.Quitting(), cancel)()
			r = r.WithContext(ctx)
		}
		id := r.Header.Get("Mcp-Session-Id")
		initialized := false
		// Only a request of a session this handler knows is looked at:
		// one naming any other id goes to the SDK (which answers 404)
		// with its body unread.
		if id != "" && r.Method == http.MethodPost && owners.known(id) {
			body, whole, err := peekBody(r, MaxFastBody)
			if err != nil {
				edge.WriteErr(w, errdefs.New(errdefs.ErrInvalid, "reading the request: "+err.Error()))
				return
			}
			if whole {
				if call, ok := parseFastCall(r.Header, body); ok && !d.fastOff.Load() {
					if th := owners.fastHandler(id, call.name, r.Header.Get(mcpVersionHeader)); th != nil {
						d.serveFastCall(w, r, th, call)
						return
					}
				}
				initialized = isInitialized(body)
			}
		}
		b := &built{}
		r = r.WithContext(context.WithValue(r.Context(), builtKey{}, b))
		sw := &sessionWriter{ResponseWriter: w, opened: func(id string) { owners.open(id, c.Name, b.server, b.fast) }}
		h.ServeHTTP(sw, r)
		if id != "" {
			owners.sdkServed(id, initialized && sw.code == http.StatusAccepted, r.Header.Get(mcpVersionHeader))
		}
	})
}

// built carries the server the SDK had built for a request that opens a
// session, and its fast handlers, to the answer that names the session.
type built struct {
	server *mcp.Server
	fast   map[string]mcp.ToolHandler
}

type builtKey struct{}

// sessionOwners remembers which caller opened each MCP session id. An
// entry unused for longer than the SDK keeps an idle session is dropped:
// the session is gone by then.
type sessionOwners struct {
	mu   sync.Mutex // guards m and next
	m    map[string]owner
	next time.Time // the next time stale entries are dropped
}

type owner struct {
	name   string
	seen   time.Time
	server *mcp.Server
	// fast are the session's handlers for the fast path of tools/call;
	// it is taken once the client has said it finished initializing
	// (ready), with the protocol version it said that with, and while
	// the SDK has seen the session recently enough (sdkSeen) to keep it
	// open: the SDK ends a session idle for mcpIdle, and fast calls do
	// not reach it.
	fast    map[string]mcp.ToolHandler
	ready   bool
	version string
	sdkSeen time.Time
}

// open notes that caller name opened session id, served by server with
// the fast handlers fast (nil when the answer naming the session is not
// the one that opened it: what was noted then is kept).
func (o *sessionOwners) open(id, name string, server *mcp.Server, fast map[string]mcp.ToolHandler) {
	o.mu.Lock()
	defer o.mu.Unlock()
	now := time.Now()
	if now.After(o.next) {
		// An owner is forgotten only with its session: an entry long
		// unused is dropped only when its server no longer holds the
		// session. (Entries used to go after an hour unused, while a
		// standing GET stream kept the session alive, and then any
		// caller who knew the id was let in.) A session's end drops its
		// entry on its own (see below); this catches any that did not.
		for k, v := range o.m {
			if now.Sub(v.seen) > OwnerCheck && !serves(v.server, k) {
				delete(o.m, k)
			}
		}
		o.next = now.Add(OwnerPrune)
	}
	ow, ok := o.m[id]
	if !ok || server != nil {
		ow = owner{server: server, fast: fast}
		if server != nil {
			// When the SDK ends the session (idle, closed, broken),
			// so does the fast path.
			for ss := range server.Sessions() {
				if ss.ID() == id {
					go func() { _ = ss.Wait(); o.drop(id, server) }()
				}
			}
		}
	}
	ow.name, ow.seen, ow.sdkSeen = name, now, now
	o.m[id] = ow
}

// OwnerCheck is how long an owner entry goes unused before open looks
// whether its session still exists, and OwnerPrune how often it looks.
// Variables for tests.
var (
	OwnerCheck = 2 * mcpIdle
	OwnerPrune = time.Minute
)

// serves reports whether server still serves session id.
func serves(server *mcp.Server, id string) bool {
	if server == nil {
		return false
	}
	for ss := range server.Sessions() {
		if ss.ID() == id {
			return true
		}
	}
	return false
}

// drop forgets session id if it is still the one server serves.
func (o *sessionOwners) drop(id string, server *mcp.Server) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if ow, ok := o.m[id]; ok && ow.server == server {
		delete(o.m, id)
	}
}

// fastHandler returns the handler the fast path may call for tool name on
// session id, asked with protocol version version; nil sends the request
// to the SDK.
func (o *sessionOwners) fastHandler(id, name, version string) mcp.ToolHandler {
	o.mu.Lock()
	defer o.mu.Unlock()
	ow, ok := o.m[id]
	if !ok || !ow.ready || ow.version != version || time.Since(ow.sdkSeen) > mcpIdle/2 {
		return nil
	}
	return ow.fast[name]
}

// sdkServed notes that the SDK served a request of session id; initialized
// says it was the client's notification that it finished initializing,
// accepted, sent with protocol version version.
func (o *sessionOwners) sdkServed(id string, initialized bool, version string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	ow, ok := o.m[id]
	if !ok {
		return
	}
	ow.sdkSeen = time.Now()
	if initialized {
		ow.ready, ow.version = true, version
	}
	o.m[id] = ow
}

// known reports whether session id is one this handler noted.
func (o *sessionOwners) known(id string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	_, ok := o.m[id]
	return ok
}

// server returns the server of session id, or nil.
func (o *sessionOwners) server(id string) *mcp.Server {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.m[id].server
}

// use reports whether caller name may use session id (true for an id it
// does not know: the SDK answers those), noting the use.
func (o *sessionOwners) use(id, name string, end bool) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	ow, ok := o.m[id]
	if !ok {
		return true
	}
	if ow.name != name {
		return false
	}
	if end {
		delete(o.m, id)
	} else {
		ow.seen = time.Now()
		o.m[id] = ow
	}
	return true
}

// sessionWriter notes the MCP session id an answer hands out, and the
// answer's status.
type sessionWriter struct {
	http.ResponseWriter
	opened func(id string)
	done   bool
	code   int
}

func (s *sessionWriter) WriteHeader(code int) {
	if !s.done {
		s.done, s.code = true, code
		if id := s.Header().Get("Mcp-Session-Id"); id != "" {
			s.opened(id)
		}
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *sessionWriter) Write(b []byte) (int, error) {
	if !s.done {
		s.WriteHeader(http.StatusOK)
	}
	return s.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach Flush.
func (s *sessionWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// FlushError passes flushes on with their failure (see
// statusWriter.FlushError); the SDK streams events.
func (s *sessionWriter) FlushError() error {
	if !s.done {
		s.WriteHeader(http.StatusOK)
	}
	return http.NewResponseController(s.ResponseWriter).Flush()
}

// Flush is FlushError for handlers that assert http.Flusher.
func (s *sessionWriter) Flush() { _ = s.FlushError() }

// tools is the config tools are looked up in: the core's, which a reload
// replaces; the options' where the core has none (a test's fake).
func (d *Server) tools() *config.Config {
	if c := d.Tools(); c != nil {
		return c
	}
	return d.opts.Config
}
