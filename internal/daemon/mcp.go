package daemon

import (
	"context"
	"net/http"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/internal/audit"
	"github.com/airlockhq/airlock/internal/mcpserver"
	"github.com/airlockhq/airlock/result"
)

// mcpIdle ends MCP sessions left without a request this long.
const mcpIdle = 30 * time.Minute

// MCPServer builds the MCP server of one client session: the configured
// tools the caller may use, each call run as a run of the daemon, and
// the tools of the MCP servers it may use, each server started in a
// sandbox of its own when the session initializes and destroyed when it
// ends. client is the caller's identity in the audit log.
func (d *Daemon) MCPServer(c *caller, client string) *mcp.Server {
	s := mcpserver.New(mcpserver.Options{
		Config:  d.opts.Config,
		Allows:  c.allows,
		Version: d.opts.Version,
		Run: func(ctx context.Context, j mcpserver.Job) (*result.Result, error) {
			res, done, err := d.run(ctx, runJob{
				tool: j.Tool, client: client, argv: j.Argv, recordArgv: j.RecordArgv,
				dir: workdir("", j.Tool), stdin: j.Stdin, capture: true, onEvent: j.OnEvent,
			})
			if err != nil {
				return nil, err
			}
			d.destroyLater(done)
			return res, nil
		},
		OnCall: d.recordCall(client),
	})
	d.addBuiltins(s, c, client)
	if len(d.opts.Config.MCPServerOrder) == 0 {
		return s
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
						<-d.quit.Done()
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
	return s
}

// recordCall records MCP tool calls of a client.
func (d *Daemon) recordCall(client string) func(mcpserver.CallRecord) {
	return func(r mcpserver.CallRecord) {
		e := audit.Event{Kind: audit.KindMCPCall, Tool: r.Tool, Sandbox: r.Sandbox, Client: client, Decision: r.Outcome}
		e.Detail = audit.Detail(map[string]any{"arguments": r.Arguments, "reason": r.Reason, "duration_ms": r.Duration.Milliseconds()})
		d.audit.Record(e)
	}
}

// LocalMCPServer is MCPServer for a caller on the host itself.
func (d *Daemon) LocalMCPServer(client string) *mcp.Server { return d.MCPServer(local, client) }

// mcpHandler serves streamable HTTP MCP at /mcp. Each MCP session gets a
// server scoped to the caller that opened it, and only that caller may
// use the session afterwards.
func (d *Daemon) mcpHandler() http.Handler {
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
		s := d.MCPServer(callerOf(r.Context()), clientOf(r))
		if b, ok := r.Context().Value(builtKey{}).(*built); ok {
			b.server = s
		}
		return s
	}, &mcp.StreamableHTTPOptions{SessionTimeout: mcpIdle, Logger: d.opts.Logger})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c := callerOf(r.Context())
		if id := r.Header.Get("Mcp-Session-Id"); id != "" {
			// A session is its opener's: another caller that learned its
			// id gets what an unknown id gets.
			if !owners.use(id, c.name, r.Method == http.MethodDelete) {
				writeError(w, http.StatusNotFound, api.CodeNotFound, "no such MCP session")
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
			defer context.AfterFunc(d.quit, cancel)()
			r = r.WithContext(ctx)
		}
		b := &built{}
		r = r.WithContext(context.WithValue(r.Context(), builtKey{}, b))
		h.ServeHTTP(&sessionWriter{ResponseWriter: w, opened: func(id string) { owners.open(id, c.name, b.server) }}, r)
	})
}

// built carries the server the SDK had built for a request that opens a
// session to the answer that names the session.
type built struct{ server *mcp.Server }

type builtKey struct{}

// sessionOwners remembers which caller opened each MCP session id. An
// entry unused for longer than the SDK keeps an idle session is dropped:
// the session is gone by then.
type sessionOwners struct {
	mu   sync.Mutex
	m    map[string]owner
	next time.Time // the next time stale entries are dropped
}

type owner struct {
	name   string
	seen   time.Time
	server *mcp.Server
}

// open notes that caller name opened session id, served by server (nil
// when the answer naming the session is not the one that opened it: the
// server noted then is kept).
func (o *sessionOwners) open(id, name string, server *mcp.Server) {
	o.mu.Lock()
	defer o.mu.Unlock()
	now := time.Now()
	if now.After(o.next) {
		for k, v := range o.m {
			if now.Sub(v.seen) > 2*mcpIdle {
				delete(o.m, k)
			}
		}
		o.next = now.Add(time.Minute)
	}
	if server == nil {
		server = o.m[id].server
	}
	o.m[id] = owner{name: name, seen: now, server: server}
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

// sessionWriter notes the MCP session id an answer hands out.
type sessionWriter struct {
	http.ResponseWriter
	opened func(id string)
	done   bool
}

func (s *sessionWriter) WriteHeader(code int) {
	if !s.done {
		s.done = true
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

// Flush passes flushes on; the SDK streams events.
func (s *sessionWriter) Flush() {
	if !s.done {
		s.WriteHeader(http.StatusOK)
	}
	if f, ok := s.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}
