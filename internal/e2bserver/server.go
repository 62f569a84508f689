// Package e2bserver is the node's E2B-compatible edge (docs/e2b.md): an
// E2B sandbox is a session of the node, its template a tool, its API key
// a token. Both the control plane and the sandbox-side ("envd") calls
// are served on one listener, server.e2b. It translates E2B's wire
// formats (REST with {code, message} errors; Connect for envd's process
// and filesystem services) to the node's lifecycles.
package e2bserver

import (
	"context"
	"crypto/subtle"
	"io"
	"log/slog"
	"net/http"
	"path"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/airlockhq/airlock/internal/audit"
	"github.com/airlockhq/airlock/internal/config"
	"github.com/airlockhq/airlock/internal/edge"
	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/image"
	"github.com/airlockhq/airlock/internal/netlimit"
	"github.com/airlockhq/airlock/internal/node"
	"github.com/airlockhq/airlock/internal/runner/attach"
	"github.com/airlockhq/airlock/internal/snapshot"
	"github.com/airlockhq/airlock/internal/templates"
	"github.com/airlockhq/airlock/internal/volume"
	"github.com/airlockhq/airlock/result"

	"github.com/airlockhq/airlock/internal/e2b"
	"github.com/airlockhq/airlock/internal/httpx"
	"github.com/airlockhq/airlock/sandbox"
)

// e2bDefaultTimeout is a sandbox's life when create names none, as E2B's.
const e2bDefaultTimeout = 300 * time.Second

// e2bSandbox is the E2B side of a session.
type e2bSandbox struct {
	s        *node.Session
	token    string // envdAccessToken: the envd calls' credential
	metadata map[string]string
	envVars  map[string]string // the create's, which a fork is given too
	env      []string          // envVars, for every command
	limits   sandbox.Limits
	// volumes are the volumes it was created with, as E2B lists them.
	volumes []e2b.VolumeMount

	// mu guards procs, nextPID, watches and the metric fields.
	mu      sync.Mutex
	procs   map[uint32]*e2bProc
	nextPID uint32
	watches int // WatchDir streams and watchers open
	// watchers are the polled watches (watcher.go), by id.
	watchers map[string]*e2bWatcher
	// portRequests counts the requests to its ports in flight (ports.go).
	portRequests atomic.Int64
	// metricAt and metricCPU are the last metrics reading's time and
	// CPU milliseconds.
	metricAt  time.Time
	metricCPU int64

	// traffic is the trafficAccessToken: the credential of the code
	// interpreter's calls, which the SDK sends on each of them.
	traffic string
	// ctxMu guards contexts and defaults: the code interpreter's
	// contexts (contexts.go) in the order they were made, and the
	// default one of each language.
	ctxMu    sync.Mutex
	contexts []*e2bContext
	defaults map[string]*e2bContext
}

// e2bTable holds the daemon's E2B sandboxes by id (the session's).
type e2bTable struct {
	mu      sync.Mutex // guards m and watches; taken before a sandbox's mu
	m       map[string]*e2bSandbox
	watches int // WatchDir streams open
}

// Options configure the edge.
type Options struct {
	// Config holds the tools (the templates); the node's.
	Config *config.Config
	// StallTimeout bounds one write of a process's or a watch's stream,
	// and one read of an upload's body.
	StallTimeout time.Duration
	// Logger receives the edge's log.
	Logger *slog.Logger
	// Domain, if set, is the domain of the sandboxes' ports
	// (server.e2b_domain; ports.go).
	Domain string
}

// Server serves the E2B API of a node.
type Server struct {
	Core
	*edge.Guard
	opts Options
	e2b  e2bTable
}

// maxBody bounds a control-plane request's body.
const maxBody = 1 << 20

// maxFile bounds one file written into or read out of a workspace.
const maxFile = node.MaxFile

// Core is what the E2B API asks of the node (*node.Node).
type Core interface {
	// Tools is the config as written, the last reload's: where tools
	// are looked up.
	Tools() *config.Config
	Audit() *audit.Log
	Counts() *node.Counters
	Exec(ctx context.Context, s *node.Session, client string, x sandbox.ExecRequest) (*result.Result, error)
	Fork(ctx context.Context, s *node.Session, c *node.Caller, client string, count int, life time.Duration) ([]node.Forked, error)
	Snapshot(ctx context.Context, s *node.Session, c *node.Caller, client, name string) (snapshot.Meta, error)
	Snapshots(c *node.Caller) ([]snapshot.Meta, error)
	FindSnapshot(c *node.Caller, idOrName string) (snapshot.Meta, error)
	DeleteSnapshot(c *node.Caller, idOrName, client string) error
	OpenFromSnapshot(ctx context.Context, m snapshot.Meta, client string, c *node.Caller, idle, life time.Duration, narrowed *attach.Policy, mounts []node.VolumeMount) (*node.Session, error)
	OpenSession(ctx context.Context, t *config.Tool, client string, c *node.Caller, idle, life time.Duration, narrowed *attach.Policy) (*node.Session, error)
	OpenSessionWith(ctx context.Context, t *config.Tool, client string, c *node.Caller, idle, life time.Duration, narrowed *attach.Policy, mounts []node.VolumeMount) (*node.Session, error)
	CreateVolume(ctx context.Context, c *node.Caller, client, name string, size int64) (volume.Meta, error)
	Volumes(c *node.Caller) ([]volume.Meta, error)
	FindVolume(c *node.Caller, idOrName string) (volume.Meta, error)
	DeleteVolume(c *node.Caller, idOrName, client string) error
	Pause(ctx context.Context, s *node.Session, client, reason string) error
	Resume(ctx context.Context, s *node.Session, client, reason string, life time.Duration) (bool, error)
	ResumeFromFiles(ctx context.Context, s *node.Session, client, reason string, life time.Duration) (bool, bool, error)
	Plan(tool string) attach.Plan
	RecordCode(client string, s *node.Session, c node.Code)
	RecordPort(client string, s *node.Session, p node.Port)
	SessionsOf(c *node.Caller) []*node.Session
	StartKernel(ctx context.Context, s *node.Session, client, language, cwd string, env []string) (*node.Kernel, error)
	Templates() (*templates.Manager, error)
	BuildSettings(c *node.Caller, client string) (templates.Settings, error)
	BuildTool() *config.Tool
	OpenFromImage(ctx context.Context, t *config.Tool, img *image.Image, tmpl, client string, c *node.Caller, idle, life time.Duration, narrowed *attach.Policy, mounts []node.VolumeMount) (*node.Session, error)
}

var _ Core = (*node.Node)(nil)

// New returns the E2B edge of n, guarded by g.
func New(n Core, g *edge.Guard, opts Options) *Server {
	return &Server{Core: n, Guard: g, opts: opts}
}

// Handler is the edge's handler of every request.
func (d *Server) Handler() http.Handler { return d.routePorts(d.e2bRoutes()) }

// SessionOf is the session of E2B sandbox id, nil when there is none.
func (d *Server) SessionOf(id string) *node.Session {
	d.e2b.mu.Lock()
	defer d.e2b.mu.Unlock()
	if sb := d.e2b.m[id]; sb != nil {
		return sb.s
	}
	return nil
}

func (d *Server) e2bRoutes() http.Handler {
	mux := http.NewServeMux()
	// api serves a control-plane call: the caller of its API key, then
	// h, whose error is answered here (writeAPIError).
	api := func(h func(http.ResponseWriter, *http.Request, *node.Caller) error) http.HandlerFunc {
		return answer(func(w http.ResponseWriter, r *http.Request) error {
			c, err := d.e2bCaller(w, r)
			if c == nil {
				return err
			}
			return h(w, edge.As(r, c), c)
		})
	}
	mux.HandleFunc("POST /v2/sandboxes", api(d.e2bCreate))
	mux.HandleFunc("GET /v2/sandboxes", api(d.e2bList))
	mux.HandleFunc("POST /v2/sandboxes/{id}/connect", api(d.e2bConnect))
	// The v1 forms, which every SDK before JS 2.51 (and the Python SDKs
	// of that time) calls: the same bodies, the same answers.
	mux.HandleFunc("POST /sandboxes", api(d.e2bCreate))
	mux.HandleFunc("GET /sandboxes", api(d.e2bList))
	mux.HandleFunc("POST /sandboxes/{id}/connect", api(d.e2bConnect))
	mux.HandleFunc("GET /sandboxes/{id}", api(d.e2bGet))
	mux.HandleFunc("GET /sandboxes/{id}/metrics", api(d.e2bMetrics))
	mux.HandleFunc("DELETE /sandboxes/{id}", api(d.e2bKill))
	mux.HandleFunc("POST /sandboxes/{id}/timeout", api(d.e2bSetTimeout))
	mux.HandleFunc("POST /sandboxes/{id}/pause", api(d.e2bPause))
	mux.HandleFunc("POST /sandboxes/{id}/resume", api(d.e2bResume))
	mux.HandleFunc("POST /sandboxes/{id}/snapshots", api(d.e2bSnapshot))
	mux.HandleFunc("POST /sandboxes/{id}/fork", api(d.e2bFork))
	mux.HandleFunc("GET /snapshots", api(d.e2bListSnapshots))
	// The SDKs' deleteSnapshot: a snapshot is a template on E2B.
	mux.HandleFunc("DELETE /templates/{id}", api(d.e2bDeleteSnapshot))
	d.e2bVolumeRoutes(mux, api)
	d.e2bTemplateRoutes(mux, api)
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("E2b-Sandbox-Port") == InterpreterPort {
			interpAnswer(d.e2bInterpreterHealth)(w, r)
			return
		}
		answer(d.e2bHealth)(w, r)
	})
	mux.HandleFunc("POST /process.Process/Start", d.e2bStart)
	mux.HandleFunc("POST /process.Process/Connect", d.e2bProcConnect)
	mux.HandleFunc("POST /process.Process/StreamInput", d.e2bStreamInput)
	mux.HandleFunc("POST /process.Process/List", d.e2bUnary(d.e2bProcList))
	mux.HandleFunc("POST /process.Process/SendSignal", d.e2bUnary(d.e2bSignal))
	mux.HandleFunc("POST /process.Process/SendInput", d.e2bUnary(d.e2bInput))
	mux.HandleFunc("POST /process.Process/CloseStdin", d.e2bUnary(d.e2bCloseStdin))
	mux.HandleFunc("POST /process.Process/Update", d.e2bUnary(d.e2bUpdate))
	d.e2bFSRoutes(mux)
	mux.HandleFunc("POST /execute", d.e2bExecute)
	mux.HandleFunc("POST /contexts", interpAnswer(d.e2bCreateContext))
	mux.HandleFunc("GET /contexts", interpAnswer(d.e2bListContexts))
	mux.HandleFunc("POST /contexts/{id}/restart", interpAnswer(d.e2bRestartContext))
	mux.HandleFunc("DELETE /contexts/{id}", interpAnswer(d.e2bDeleteContext))
	mux.HandleFunc("GET /files", answer(d.e2bReadFile))
	mux.HandleFunc("POST /files", answer(d.e2bWriteFile))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if strings.Contains(r.URL.Path, ".") && r.Header.Get("Connect-Protocol-Version") != "" {
			e2b.WriteUnaryError(w, rpcError(errdefs.Errorf(errUnsupported, "%s is not served by airlock (docs/e2b.md lists what is)", path.Clean(r.URL.Path))))
			return
		}
		writeAPIError(w, errdefs.Errorf(errdefs.ErrNotFound, "no such endpoint %s %s", r.Method, path.Clean("/"+r.URL.Path)))
	})
	return d.Counted(d.Recoverer(mux))
}

// answer serves a call whose error, if it returns one, is answered as
// the control plane's (writeAPIError). A handler that has begun its
// answer returns nil.
func answer(h func(http.ResponseWriter, *http.Request) error) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if err := h(w, r); err != nil {
			writeAPIError(w, err)
		}
	}
}

// e2bCaller is the caller of the request's API key, or errNoAPIKey when
// there is no valid one; neither when the edge's guard has answered the
// failure itself (slowing a client that keeps failing).
func (d *Server) e2bCaller(w http.ResponseWriter, r *http.Request) (*node.Caller, error) {
	if v := r.Header.Get("X-API-KEY"); v != "" {
		if t := d.Tokens().Match(v); t != nil {
			netlimit.Vouch(r.Context())
			return node.TokenCaller(t), nil
		}
	}
	d.Counts().Unauthorized.Add(1)
	if d.SlowFailures(w, r) {
		return nil, nil
	}
	return nil, errNoAPIKey
}

// e2bDecode reads a control-plane body (at most 1 MiB) into v.
func e2bDecode(r *http.Request, v any) error {
	err := httpx.JSONBody{Max: maxBody, AllowUnknown: true, AllowEmpty: true}.Decode(r.Body, v)
	switch {
	case err == nil:
		return nil
	case errdefs.IsLimit(err):
		return errdefs.Errorf(errdefs.ErrLimit, "the body is over %d KiB", maxBody>>10)
	case errdefs.IsInvalid(err):
		return errdefs.Errorf(errdefs.ErrInvalid, "the body is not valid JSON of this call: %v", err)
	default:
		return errdefs.Errorf(errdefs.ErrInvalid, "read the body: %v", err)
	}
}

// e2bTimeout reads a timeout in seconds: absent is def, and it may not be
// under a second or over the longest session.
func e2bTimeout(secs *int, def time.Duration) (time.Duration, error) {
	if secs == nil {
		return def, nil
	}
	// Checked before the multiplication, which could overflow into range.
	if *secs < 1 || *secs > int(node.MaxLife/time.Second) {
		return 0, errdefs.Errorf(errdefs.ErrInvalid, "timeout %d s: want 1 to %d seconds", *secs, int(node.MaxLife.Seconds()))
	}
	return time.Duration(*secs) * time.Second, nil
}

// e2bRefused are create's options airlock does not honour, each refused
// rather than ignored.
var e2bRefused = map[string]string{
	"mcp": "an MCP gateway in the sandbox is not supported; configure MCP servers in airlock (docs/mcp.md)",
	"iam": "identity tokens are not supported; airlock's credential broker attaches credentials at the edge (docs/config.md, services)",
}

// e2bEnvd finds the sandbox of an envd call: its E2b-Sandbox-Id, checked
// against its access token (the API key is not sent on these calls).
func (d *Server) e2bEnvd(r *http.Request) (*e2bSandbox, error) {
	id := r.Header.Get("E2b-Sandbox-Id")
	if id == "" {
		return nil, errdefs.New(errdefs.ErrInvalid, "E2b-Sandbox-Id is required")
	}
	d.e2b.mu.Lock()
	sb := d.e2b.m[id]
	d.e2b.mu.Unlock()
	if sb == nil || subtle.ConstantTimeCompare([]byte(r.Header.Get("X-Access-Token")), []byte(sb.token)) != 1 {
		d.Counts().Unauthorized.Add(1)
		// One answer for no sandbox and a wrong token: neither says
		// which sandboxes exist.
		return nil, errdefs.Errorf(errEnded, "sandbox %q was not found, or the access token is not its", node.Shorten(id))
	}
	netlimit.Vouch(r.Context())
	if err := d.awake(r, sb); err != nil {
		return nil, err
	}
	if u, ok := basicUser(r); ok {
		if err := checkUser(u); err != nil {
			return nil, err
		}
	}
	return sb, nil
}

// basicUser is the user an envd call names (Authorization: Basic, the
// user and an empty password), as the SDKs send it when asked to run as
// someone.
func basicUser(r *http.Request) (string, bool) {
	u, _, ok := r.BasicAuth()
	return u, ok
}

// checkUser refuses a call made as a user other than the sandbox's. A
// sandbox's commands and file calls all run as its one user, uid 1000
// (docs/decisions/0001), named "user" as E2B's is, or "sandbox"; there is
// no root to run as, and asking for it is refused rather than run as
// someone else.
func checkUser(u string) error {
	switch u {
	case "", "user", "sandbox":
		return nil
	case "root":
		return errdefs.New(errdefs.ErrDenied, `user "root": airlock runs every command and file call as the sandbox's user (uid 1000), never as root; install what a tool needs in its image (docs/e2b.md)`)
	}
	return errdefs.Errorf(errdefs.ErrInvalid, `user %q: a sandbox has one user, "user" (uid 1000)`, node.Shorten(u))
}

// e2bUnary serves a unary Connect call of a sandbox; h's error is
// answered here (rpcError).
func (d *Server) e2bUnary(h func(r *http.Request, sb *e2bSandbox, body []byte) (any, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		v, err := d.e2bUnaryCall(r, h)
		if err != nil {
			e2b.WriteUnaryError(w, rpcError(err))
			return
		}
		e2b.WriteUnary(w, v)
	}
}

// e2bUnaryCall is a unary call's answer: its sandbox, its body, h's.
func (d *Server) e2bUnaryCall(r *http.Request, h func(r *http.Request, sb *e2bSandbox, body []byte) (any, error)) (any, error) {
	sb, err := d.e2bEnvd(r)
	if err != nil {
		return nil, err
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, e2b.MaxMessage+1))
	if err != nil || len(body) > e2b.MaxMessage {
		return nil, errdefs.Errorf(errdefs.ErrLimit, "request over %d KiB", e2b.MaxMessage>>10)
	}
	return h(r, sb, body)
}

// e2bHealth answers envd's health check, which the SDK's isRunning asks:
// 204 while the sandbox of E2b-Sandbox-Id lives and the access token is
// its, else 502, as E2B's proxy answers for a sandbox that is gone (the
// SDK reads 502 as not running). No such sandbox, an ended one and
// another's token look the same, so the answer never tells which ids
// exist. A check that names no sandbox (a load balancer's probe of the
// listener) is answered 204: the listener is up.
func (d *Server) e2bHealth(w http.ResponseWriter, r *http.Request) error {
	if r.Header.Get("E2b-Sandbox-Id") == "" {
		w.WriteHeader(http.StatusNoContent)
		return nil
	}
	sb, err := d.e2bEnvd(r)
	if err == nil && !sb.s.Alive() {
		err = errEnded
	}
	if err != nil {
		// Worded as envd's Connect error: its code, then why.
		return errdefs.Errorf(errNotRunning, "%s: %v", rpcCode(err), err)
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// tools is the config tools are looked up in: the core's, which a reload
// replaces; the options' where the core has none (a test's fake).
func (d *Server) tools() *config.Config {
	if c := d.Tools(); c != nil {
		return c
	}
	return d.opts.Config
}
