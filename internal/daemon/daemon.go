// Package daemon is `airlock serve` (run by airlockd): the long-lived
// process of a node. It is wiring only: from a config it builds the node
// (internal/node, the core: the runtime, the warm pools, the audit log,
// the image store, runs and sessions), the guard the HTTP edges share
// (internal/edge), and the three protocol edges over the node: the native
// HTTP API (internal/httpapi) on a unix socket (trusted by its file
// permissions) and, with server.tcp, on TCP with bearer tokens; MCP
// (internal/mcpedge) at /mcp on those listeners and, embedded without a
// listener, over stdio for `airlock mcp`; and, with server.e2b, the E2B
// API (internal/e2bserver) on a listener of its own. It opens the
// listeners (here and in listen.go), keeps the node's lease when the
// config has a cluster section (cluster.go, internal/cluster), and stops
// it all in order (Shutdown). No lifecycle, protocol or error mapping
// lives here: see docs/architecture.md, "The daemon: one core, thin
// edges".
//
// Only internal/cli/daemoncmd (airlockd's commands) imports it, and
// bench, which measures a whole daemon; internal/deptest keeps every
// package below the edges, the protocol edges themselves and airlock's
// own program off it.
package daemon

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/user"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/internal/certfile"
	"github.com/airlockhq/airlock/internal/config"
	"github.com/airlockhq/airlock/internal/console"
	"github.com/airlockhq/airlock/internal/e2bserver"
	"github.com/airlockhq/airlock/internal/edge"
	"github.com/airlockhq/airlock/internal/httpapi"
	"github.com/airlockhq/airlock/internal/httpx"
	"github.com/airlockhq/airlock/internal/mcpedge"
	"github.com/airlockhq/airlock/internal/netlimit"
	"github.com/airlockhq/airlock/internal/node"
	"github.com/airlockhq/airlock/internal/tokens"
	"github.com/airlockhq/airlock/sandbox"
)

// DefaultSocket is where the daemon listens unless told otherwise.
const DefaultSocket = api.DefaultSocket

// Options configure a daemon.
type Options struct {
	// Config holds the tools; nil is the built-in default (no tools).
	Config *config.Config
	// Socket is the unix socket path; "" is DefaultSocket. It is created
	// with mode 0660, owned by root.
	Socket string
	// Sandbox configures the runtime (state directory, cgroup parent).
	Sandbox sandbox.Options
	// Grace is how long running calls may take to finish on shutdown;
	// 0 means 30s.
	Grace time.Duration
	// MaxSessions bounds the sessions open at once (each holds a sandbox
	// and a uid range); 0 means 256.
	MaxSessions int
	// Embedded runs the daemon's parts without listening anywhere: for
	// `airlock mcp` when no daemon is running.
	Embedded bool
	// Version is reported to MCP clients.
	Version string
	// AuditPath, if set, overrides the config's audit log path.
	AuditPath string
	// ImageStore, if set, overrides the config's image store directory.
	ImageStore string
	// SnapshotStore, if set, overrides the config's snapshot directory.
	SnapshotStore string
	// VolumeStore, if set, overrides the config's volume directory.
	VolumeStore string
	// Logger receives the daemon's log; nil discards it.
	Logger *slog.Logger
	// IdleTimeout closes a keep-alive connection that sends no request
	// for this long; 0 means 30s.
	IdleTimeout time.Duration
	// MaxConns bounds each TCP listener's open connections (the API's,
	// the E2B API's); 0 means 512. While three quarters are taken, one
	// remote address may hold a quarter of them (netlimit.Network).
	MaxConns int
	// StallTimeout bounds one write of a command's event stream (NDJSON,
	// a terminal's, an E2B process stream): a caller that takes nothing
	// for this long has stopped reading, and a command whose events it
	// was given ends; and one read of an E2B upload's body (a client
	// that sends nothing for this long is cut); 0 means 30s.
	StallTimeout time.Duration
	// CaptureWait is how long a run whose output is captured waits for
	// room in the captured-output budget (server.capacity.output) before
	// it is refused; 0 means 30s.
	CaptureWait time.Duration
}

// Defaults of Options.
const (
	// defaultIdleTimeout closes a keep-alive connection with no request
	// for this long.
	defaultIdleTimeout = 30 * time.Second
	// defaultMaxConns bounds the TCP listener's open connections.
	defaultMaxConns = 512
	// defaultStallTimeout bounds one write of an event stream: a caller
	// that takes nothing for this long has stopped reading.
	defaultStallTimeout = 30 * time.Second
)

// Daemon serves the API. Create it with New and run it with Serve. Its
// node (the core: runs, sessions, pools, the audit log) is embedded; the
// rest is its edges' state and its listeners.
type Daemon struct {
	*node.Node
	*edge.Guard
	opts Options
	// startPath is the config file it started from ("" for the embedded
	// defaults): what Reload reads.
	startPath string
	// console is the web console on the TCP listener; nil without one.
	console *console.Console
	ln      net.Listener
	srv     *http.Server
	tcp     net.Listener // nil unless the config has server.tcp
	tsrv    *http.Server
	// e2bl and e2bsrv serve the E2B-compatible API (server.e2b), e2b
	// is that edge (nil when it is not served).
	e2bl   net.Listener
	e2bsrv *http.Server
	e2b    *e2bserver.Server
	// mcp is the MCP edge, served at /mcp and over stdio (airlock mcp).
	mcp *mcpedge.Server
	// api is the native API, served on the socket and on server.tcp.
	api *httpapi.Server
	// flushStop ends the flusher of refusals (Serve).
	flushStop context.CancelFunc

	// cluster is the daemon's part as a node of a cluster; nil when it
	// is not one.
	cluster *clusterNode

	shutdown sync.Once
	shutErr  error
}

// New sweeps what a crashed predecessor left, starts a pool per tool, and
// opens the socket. Nothing is served until Serve.
func New(ctx context.Context, opts Options) (_ *Daemon, err error) {
	if opts.Config == nil {
		opts.Config = config.Empty()
	}
	if opts.Socket == "" {
		opts.Socket = opts.Config.Server.Socket
	}
	if opts.Sandbox.Runsc == "" {
		opts.Sandbox.Runsc = opts.Config.Server.Runsc
	}
	if opts.Socket == "" {
		opts.Socket = DefaultSocket
	}
	if opts.Grace <= 0 {
		opts.Grace = 30 * time.Second
	}
	if opts.MaxSessions <= 0 {
		opts.MaxSessions = 256
	}
	if opts.IdleTimeout <= 0 {
		opts.IdleTimeout = defaultIdleTimeout
	}
	if opts.MaxConns <= 0 {
		opts.MaxConns = defaultMaxConns
	}
	if opts.StallTimeout <= 0 {
		opts.StallTimeout = defaultStallTimeout
	}
	if opts.CaptureWait <= 0 {
		opts.CaptureWait = node.DefaultCaptureWait
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	no := node.Options{Config: opts.Config, Sandbox: opts.Sandbox, MaxSessions: opts.MaxSessions, CaptureWait: opts.CaptureWait,
		MaxPaused: opts.Config.Server.Capacity.Paused, PausedFor: opts.Config.Server.Capacity.PausedFor,
		SnapshotStore: opts.SnapshotStore, MaxSnapshots: opts.Config.Server.Capacity.Snapshots, SnapshotBytes: opts.Config.Server.Capacity.SnapshotBytes,
		VolumeStore: opts.VolumeStore, MaxVolumes: opts.Config.Server.Capacity.Volumes, VolumeBytes: opts.Config.Server.Capacity.VolumeBytes,
		AuditPath: opts.AuditPath, ImageStore: opts.ImageStore, Logger: opts.Logger, Version: opts.Version}
	if !opts.Embedded {
		no.ExportAudit = os.Stdout
	}
	d := &Daemon{opts: opts, startPath: opts.Config.Path}
	// The tokens are read before anything starts.
	toks, err := tokens.Load(opts.Config)
	if err != nil {
		return nil, err
	}
	if d.Node, err = node.New(ctx, no); err != nil {
		return nil, err
	}
	// The node's config has each image's defaults applied.
	d.opts.Config = d.Config()
	d.Guard = edge.NewGuard(d.Node, toks, opts.Logger)
	d.mcp = mcpedge.New(d.Node, d.Guard, mcpedge.Options{Config: d.opts.Config, Version: opts.Version, Logger: opts.Logger})
	d.api = httpapi.New(d.Node, d.Guard, httpapi.Options{Config: d.opts.Config, StallTimeout: opts.StallTimeout, Logger: opts.Logger,
		MCP: d.mcp.Handler(), Shed: func() int64 { return netlimit.Refused(d.tcp) + netlimit.Refused(d.e2bl) }, Reload: d.reload, ConsoleLogin: d.consoleLogin})
	defer func() {
		if err != nil {
			d.Stop(context.WithoutCancel(ctx))
			d.Close(context.WithoutCancel(ctx))
		}
	}()
	if opts.Embedded {
		return d, nil
	}
	if err := d.setupCluster(); err != nil {
		return nil, err
	}
	if d.ln, err = listenUnix(opts.Socket, opts.Config.Server.SocketGroup); err != nil {
		return nil, err
	}
	routes := d.api.Handler()
	serverOpts := httpx.Options{IdleTimeout: opts.IdleTimeout, Logger: opts.Logger, BodyStall: opts.StallTimeout}
	unixOpts := serverOpts
	unixOpts.ConnContext = edge.ConnContext
	// The unix socket is trusted by its file permissions, and says so:
	// routes refuses a request that no wrapper gave a caller.
	d.srv = httpx.New(d.Audited(edge.WithCaller(node.Local, routes)), unixOpts)
	if tcp := opts.Config.Server.TCP; tcp.IsValid() {
		if d.tcp, err = net.Listen("tcp", tcp.String()); err != nil {
			d.ln.Close()
			return nil, fmt.Errorf("listen on %s: %w", tcp, err)
		}
		d.tcp = netlimit.Network(d.tcp, opts.MaxConns)
		// The web console is served here (a browser cannot reach the
		// socket): its page to anyone, the API to its sessions as to
		// tokens.
		d.console = console.New(d.Tokens)
		d.SetConsole(func(r *http.Request) *node.Caller {
			switch tok, _, ok := d.console.Session(r); {
			case !ok:
				return nil
			case tok == nil:
				return node.Local // the socket's one-time login
			default:
				return node.TokenCaller(tok)
			}
		})
		d.tsrv = httpx.New(d.Audited(edge.Healthz(d.Audit().Err, edge.CheckHost(tcp, d.console.Handler(d.RequireToken(routes))))), serverOpts)
	}
	if addr := opts.Config.Server.E2B; addr.IsValid() {
		if d.e2bl, err = net.Listen("tcp", addr.String()); err != nil {
			d.ln.Close()
			if d.tcp != nil {
				d.tcp.Close()
			}
			return nil, fmt.Errorf("listen on %s (server.e2b): %w", addr, err)
		}
		d.e2bl = netlimit.Network(d.e2bl, opts.MaxConns)
		domain := opts.Config.Server.E2BDomain
		d.e2b = e2bserver.New(d.Node, d.Guard, e2bserver.Options{Config: d.opts.Config, StallTimeout: opts.StallTimeout, Logger: opts.Logger, Domain: domain})
		if n := d.e2b.Adopt(); n > 0 {
			opts.Logger.Info("E2B sandboxes paused before a restart are back, their files only", "sandboxes", n)
		}
		d.e2bsrv = httpx.New(d.Audited(edge.Healthz(d.Audit().Err, edge.CheckHostOr(addr, domain, d.e2b.Handler()))), serverOpts)
		if t := opts.Config.Server.E2BTLS; t != nil {
			src, err := certfile.Load(t.Cert, t.Key, opts.Logger)
			if err != nil {
				d.ln.Close()
				if d.tcp != nil {
					d.tcp.Close()
				}
				d.e2bl.Close()
				return nil, fmt.Errorf("server.e2b_tls: %w", err)
			}
			// TLS 1.2 at least; HTTP/2 as well as HTTP/1.1, which
			// ServeTLS offers (the SDKs negotiate HTTP/2 over TLS).
			d.e2bsrv.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: src.GetCertificate}
		}
	}
	return d, nil
}

// listenUnix opens the socket, replacing a stale one left by a crashed
// daemon but never one a live daemon still answers on.
//
// Which daemon owns the path is decided by a lock, not by whether the
// socket answers a connect: a POSIX record lock on PATH.lock, which the
// kernel drops when its process dies and which, unlike flock, no child
// holds for it. A daemon killed while it was cloning a sandbox leaves
// that clone alive for a moment, holding a copy of the listening socket;
// a connect then succeeds (the backlog takes it) though nobody will ever
// accept, and a restart used to give up on a dead daemon's socket.
func listenUnix(path, group string) (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("socket directory: %w", err)
	}
	unlock, err := lockSocket(path + ".lock")
	if err != nil {
		return nil, err
	}
	// The path is this daemon's: whatever socket is there is stale.
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		unlock()
		return nil, fmt.Errorf("remove the stale socket %s: %w", path, err)
	}
	ul, err := listenUnixMode(path, 0o660)
	if err != nil {
		unlock()
		return nil, fmt.Errorf("listen on %s: %w", path, err)
	}
	ul.(*net.UnixListener).SetUnlinkOnClose(true)
	// The lock goes with the listener: a daemon closes it last, after
	// the socket is removed.
	ln := &lockedListener{Listener: ul, unlock: unlock}
	if group != "" {
		gid, err := SocketGroup(group)
		if err == nil {
			if err = os.Chown(path, 0, gid); err != nil {
				err = fmt.Errorf("socket group %q: %w", group, err)
			}
		}
		if err != nil {
			ln.Close()
			return nil, err
		}
	}
	return ln, nil
}

// lockedListener drops the socket's lock once the listener is closed.
type lockedListener struct {
	net.Listener
	unlock func()
}

func (l *lockedListener) Close() error {
	err := l.Listener.Close()
	l.unlock()
	return err
}

// socketLocks are the socket locks this process holds, by path: POSIX
// record locks belong to a process, so a second daemon in the same
// process would be granted the lock again; this refuses it.
var socketLocks = struct {
	sync.Mutex // guards fds
	fds        map[string]int
}{fds: map[string]int{}}

// lockSocket takes the POSIX write lock of path (created) and returns what
// drops it. The descriptor stays open until then: closing any descriptor
// of the file would drop the lock.
func lockSocket(path string) (unlock func(), err error) {
	socket := strings.TrimSuffix(path, ".lock")
	socketLocks.Lock()
	defer socketLocks.Unlock()
	if _, ok := socketLocks.fds[path]; ok {
		return nil, fmt.Errorf("another daemon is listening on %s (in this process)", socket)
	}
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CREAT|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("socket lock: %w", &os.PathError{Op: "open", Path: path, Err: err})
	}
	lk := unix.Flock_t{Type: unix.F_WRLCK, Whence: 0}
	if err := unix.FcntlFlock(uintptr(fd), unix.F_SETLK, &lk); err != nil {
		msg := "another daemon is listening on " + socket
		if unix.FcntlFlock(uintptr(fd), unix.F_GETLK, &lk) == nil && lk.Type != unix.F_UNLCK {
			msg += fmt.Sprintf(" (pid %d)", lk.Pid)
		}
		unix.Close(fd)
		if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EACCES) {
			return nil, errors.New(msg)
		}
		return nil, fmt.Errorf("socket lock %s: %w", path, err)
	}
	socketLocks.fds[path] = fd
	var once sync.Once
	return func() {
		once.Do(func() {
			socketLocks.Lock()
			defer socketLocks.Unlock()
			delete(socketLocks.fds, path)
			unix.Close(fd) // drops the lock
		})
	}, nil
}

// Serve answers requests until ctx ends, then shuts down: it stops
// accepting, lets running calls finish within the grace period, destroys
// every sandbox and removes the socket.
func (d *Daemon) Serve(ctx context.Context) error {
	// Half the processors for the daemon's goroutines, the rest for its
	// sandboxes (procs.go), until it has stopped.
	defer shareProcessors()()
	errc := make(chan error, 1)
	rctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	d.flushStop = stop
	d.Start()
	go d.RefusalFlusher(rctx)
	if d.srv != nil {
		go func() { errc <- d.srv.Serve(d.ln) }()
	}
	if d.tsrv != nil {
		go func() { errc <- d.tsrv.Serve(d.tcp) }()
	}
	// Whether the E2B listener answers TLS, read from the config: Serve
	// itself sets the server's TLSConfig (for HTTP/2) as it starts.
	e2bTLS := d.opts.Config.Server.E2BTLS != nil
	if d.e2bsrv != nil {
		go func() {
			if e2bTLS {
				errc <- d.e2bsrv.ServeTLS(d.e2bl, "", "")
				return
			}
			errc <- d.e2bsrv.Serve(d.e2bl)
		}()
	}
	// Every listener opened, so an operator sees where the daemon
	// answers (and that a TCP listener is open at all).
	if d.ln != nil {
		d.opts.Logger.Info("listening", "socket", d.opts.Socket, "group", d.opts.Config.Server.SocketGroup)
	}
	if d.tcp != nil {
		d.opts.Logger.Info("listening", "tcp", d.tcp.Addr().String(), "tokens", len(d.opts.Config.Server.Tokens))
	}
	if d.e2bl != nil {
		d.opts.Logger.Info("listening", "e2b", d.e2bl.Addr().String(), "tls", e2bTLS, "tokens", len(d.opts.Config.Server.Tokens))
	}
	if len(d.opts.Config.Order) == 0 && len(d.opts.Config.MCPServerOrder) == 0 {
		d.opts.Logger.Warn("no tools are configured: every run and session names a tool, so none can start (see docs/config.md)", "config", d.opts.Config.Path)
	}
	if err := d.joinCluster(); err != nil {
		return errors.Join(err, d.Shutdown(context.WithoutCancel(ctx)))
	}
	d.opts.Logger.Info("serving", "version", d.opts.Version, "config", d.opts.Config.Path, "tools", len(d.opts.Config.Order), "mcp_servers", len(d.opts.Config.MCPServerOrder), "gomaxprocs", runtime.GOMAXPROCS(0))
	select {
	case err := <-errc:
		if errors.Is(err, http.ErrServerClosed) {
			err = nil
		}
		return errors.Join(err, d.Shutdown(context.WithoutCancel(ctx)))
	case <-ctx.Done():
		return d.Shutdown(context.WithoutCancel(ctx))
	}
}

// Shutdown stops the daemon as Serve does when its context ends.
func (d *Daemon) Shutdown(ctx context.Context) error {
	d.shutdown.Do(func() {
		start := time.Now()
		d.opts.Logger.Info("shutting down", "grace", d.opts.Grace)
		defer func() {
			if d.shutErr != nil {
				d.opts.Logger.Error("stopped, with errors", "err", d.shutErr, "took", time.Since(start).Round(time.Millisecond))
			} else {
				d.opts.Logger.Info("stopped", "took", time.Since(start).Round(time.Millisecond))
			}
		}()
		d.Quit()
		// Fronts place nothing more here from now on.
		d.drainCluster()
		gctx, cancel := context.WithTimeout(ctx, d.opts.Grace)
		defer cancel()
		var errs []error
		var wg sync.WaitGroup
		var mu sync.Mutex // guards errs while the servers shut down
		for _, srv := range []*http.Server{d.srv, d.tsrv, d.e2bsrv} {
			if srv == nil {
				continue
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := srv.Shutdown(gctx); err != nil {
					// Calls still running past the grace period are
					// cut; their handlers destroy their sandboxes.
					mu.Lock()
					errs = append(errs, fmt.Errorf("shutdown: %w", err), srv.Close())
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		// The servers are done with every call they still held; the
		// commands with a terminal end now (a shell has no end of its
		// own to wait for), and their handlers destroy what they hold.
		d.api.EndTerminals()
		if d.flushStop != nil {
			d.flushStop()
		}
		// MCP servers end, then sessions (their sandboxes destroyed),
		// before the pools.
		d.mcp.Stop()
		errs = append(errs, d.Stop(ctx))
		d.FlushRefusals()
		// Every sandbox is gone: the node leaves the cluster.
		d.leaveCluster()
		// Last, so every destroy above is in the log.
		errs = append(errs, d.Close(ctx))
		d.shutErr = errors.Join(errs...)
	})
	return d.shutErr
}

// SocketGroup returns the gid of server.socket_group, a group name or
// number, as serve gives the socket to it; config check asks the same.
func SocketGroup(group string) (int, error) {
	if gid, err := strconv.Atoi(group); err == nil {
		return gid, nil
	}
	g, err := user.LookupGroup(group)
	var unknown user.UnknownGroupError
	if errors.As(err, &unknown) {
		return 0, fmt.Errorf("server.socket_group: there is no group %q on this host: create it (groupadd --system %s) or name another", group, group)
	}
	if err != nil {
		return 0, fmt.Errorf("server.socket_group %q: %w", group, err)
	}
	return strconv.Atoi(g.Gid)
}

// LocalMCPServer is the MCP server of a client on the host (airlock mcp
// over stdio), as the local socket's caller; client names it in the
// audit log.
func (d *Daemon) LocalMCPServer(client string) *mcp.Server { return d.mcp.LocalMCPServer(client) }
