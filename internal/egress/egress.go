// Package egress gives a sandbox the network it is allowed and nothing else.
//
// A sandbox's network namespace holds only `lo`, so no packet can leave it.
// A Gateway opens listeners inside that namespace, on loopback, and serves
// them from the host: an HTTP proxy (CONNECT and absolute-form), a DNS
// resolver that answers only allowed names, and one transparent listener per
// allowed name and port for clients that ignore proxy settings. Every
// outbound connection is dialed by the host after the destination is matched
// against the policy and every address it resolves to is classified; the
// address checked is the address dialed, so DNS rebinding cannot slip a
// private address through. Every decision becomes an event.
package egress

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/airlockhq/airlock/internal/egress/dns"
	"github.com/airlockhq/airlock/internal/egress/policy"
	"github.com/airlockhq/airlock/internal/egress/sockets"
	"github.com/airlockhq/airlock/internal/httpx"
	"github.com/airlockhq/airlock/internal/netlimit"
	"github.com/airlockhq/airlock/result"
	"golang.org/x/sys/unix"
)

// Fixed addresses inside every sandbox (see package sockets).
const (
	// ProxyAddr is the HTTP proxy that HTTP_PROXY and HTTPS_PROXY name.
	ProxyAddr = sockets.ProxyAddr
	// ResolverAddr is the DNS resolver; the sandbox's /etc/resolv.conf
	// names its address.
	ResolverAddr = sockets.ResolverAddr
)

// transparentBase is the first transparent address; names get
// 127.1.0.1, 127.1.0.2, ... in the order they are first looked up.
var transparentBase = netip.MustParseAddr("127.1.0.0")

// Limits cap what one sandbox may do on the network.
type Limits struct {
	// Connections caps concurrent outbound connections.
	Connections int
	// Bytes caps bytes carried both ways over the sandbox's life.
	Bytes int64
	// DNSRate caps DNS queries per second.
	DNSRate int
	// Names caps how many names get a transparent address.
	Names int
	// WildcardNames caps how many distinct names under wildcard
	// destinations the host resolves for the sandbox: each such lookup
	// reaches the zone's own name servers, which see the name, so a
	// sandbox could spell data into names. The part of a name under the
	// wildcard is also at most maxUnderWildcard bytes.
	WildcardNames int
	// NoHostLookups: the host resolves no name for the sandbox; only
	// pinned addresses and address destinations are dialed.
	NoHostLookups bool
}

// DefaultLimits are used for any zero field of Config.Limits.
func DefaultLimits() Limits {
	return Limits{Connections: 256, Bytes: 4 << 30, DNSRate: 100, Names: 256, WildcardNames: 64}
}

// Resolver looks up host names on the host. *net.Resolver satisfies it.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// Config describes one sandbox's egress.
type Config struct {
	// Tool and SandboxID label every event.
	Tool, SandboxID string
	// Policy holds the allowed destinations; nil allows nothing.
	Policy *policy.Policy
	Limits Limits
	// OnEvent receives every decision. It is called from many goroutines
	// and must not block for long. Nil discards events.
	OnEvent func(result.EgressEvent)
	// Resolver resolves names that are not pinned; nil is the host's.
	Resolver Resolver
	// DialTimeout bounds one outbound dial; 0 means 10s.
	DialTimeout time.Duration
	// HelloWait bounds the wait for what a client sends first on a
	// connection to a destination that is not opaque, and for the rest of
	// a TLS ClientHello; 0 means 10s. A client silent that long is
	// refused.
	HelloWait time.Duration
	// Logger receives airlock's own diagnostics; nil discards them.
	Logger *slog.Logger
	// Intercept, when set, names the destinations whose TLS airlock
	// terminates (transparent brokering, docs/decisions/0035), reached
	// through the proxy (CONNECT) or by their names' transparent
	// addresses, whether or not the policy allows them otherwise.
	Intercept *Interception
	// Sockets, when set, are the proxy's and resolver's listeners, open
	// in the namespace already (sockets.Open, by a process that held
	// them until something arrived: see internal/lazygw). Attach serves
	// copies of them; the caller closes its own. Nil: Attach opens them
	// itself.
	Sockets *sockets.Set
}

// Gateway serves one sandbox's egress. Close it when the sandbox is done.
type Gateway struct {
	cfg     Config
	dialer  *Dialer
	ns      *os.File
	ctx     context.Context // ends at Close
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	proxy   *http.Server
	forward *httputil.ReverseProxy
	dns     *dns.Server

	active  atomic.Int64  // outbound connections open now
	bytes   atomic.Int64  // bytes carried both ways so far
	inbound chan struct{} // one token per sandbox-side connection open now
	// heard counts what ever reached the gateway from the sandbox:
	// connections accepted and resolver packets read (see Quiet).
	heard atomic.Int64

	// mu guards closed, closers, names, nextAddr and wild. A handler is
	// added to wg under it, once closed is checked (see tracked). It is
	// held while a name's listeners open, so each name gets one address.
	mu       sync.Mutex
	closed   bool
	closers  map[io.Closer]struct{} // listeners and live connections
	names    map[string]netip.Addr  // transparent address of each name
	nextAddr netip.Addr
	// wild are the names under wildcard destinations resolved so far.
	wild map[string]struct{}
}

// Attach opens the proxy's and the resolver's sockets inside the network
// namespace ns (and, as names are looked up, the transparent listeners),
// and serves them until Close: from the first connection or packet on,
// for the proxy and the resolver themselves are made on first use (see
// arm). The caller keeps ns open until Close returns.
func Attach(ctx context.Context, ns *os.File, cfg Config) (_ *Gateway, err error) {
	def := DefaultLimits()
	if cfg.Limits.Connections <= 0 {
		cfg.Limits.Connections = def.Connections
	}
	if cfg.Limits.Bytes <= 0 {
		cfg.Limits.Bytes = def.Bytes
	}
	if cfg.Limits.DNSRate <= 0 {
		cfg.Limits.DNSRate = def.DNSRate
	}
	if cfg.Limits.Names <= 0 {
		cfg.Limits.Names = def.Names
	}
	if cfg.Limits.WildcardNames <= 0 {
		cfg.Limits.WildcardNames = def.WildcardNames
	}
	if cfg.Policy == nil {
		cfg.Policy = policy.New(nil)
	}
	if cfg.HelloWait <= 0 {
		cfg.HelloWait = helloWait
	}
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = 10 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	g := &Gateway{
		cfg:      cfg,
		dialer:   &Dialer{Resolver: cfg.Resolver, Timeout: cfg.DialTimeout},
		ns:       ns,
		closers:  make(map[io.Closer]struct{}),
		names:    make(map[string]netip.Addr),
		wild:     make(map[string]struct{}),
		nextAddr: transparentBase,
		// Connections the sandbox opens to the gateway cost host
		// goroutines and descriptors, so they are bounded too; those
		// over the bound wait in the listen backlog.
		inbound: make(chan struct{}, cfg.Limits.Connections+inboundSlack),
	}
	g.ctx, g.cancel = context.WithCancel(context.WithoutCancel(ctx))
	defer func() {
		if err != nil {
			err = errors.Join(err, g.Close(context.WithoutCancel(ctx)))
		}
	}()

	if cfg.Sockets != nil {
		// Something arrived already (the caller held the sockets until
		// it did): serve at once.
		if err := g.start(cfg.Sockets, false); err != nil {
			return nil, err
		}
		return g, nil
	}
	set, err := sockets.Open(ns)
	if err != nil {
		return nil, err
	}
	if !g.track(set) {
		return nil, ErrClosed
	}
	if err := g.arm(set); err != nil {
		return nil, err
	}
	return g, nil
}

// ErrClosed is returned by Attach when its gateway closed while it was
// being attached.
var ErrClosed = errors.New("egress: gateway closed")

// arm waits, in a goroutine of its own, for the first connection or
// packet to arrive on set, and then starts serving it. Most commands
// never use the network: until one does, the gateway holds the three
// sockets (so the addresses are the sandbox's from its start, and what
// arrives waits in their queues) and one goroutine parked in the Go
// poller on an epoll descriptor that watches them; the HTTP proxy, the
// resolver and their three goroutines are made on first use, not for
// every sandbox. A few dozen system calls and allocations a sandbox
// less, and an idle session holds one goroutine instead of three.
func (g *Gateway) arm(set *sockets.Set) error {
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return fmt.Errorf("egress: watch the listeners: %w", err)
	}
	for _, f := range []*os.File{set.Proxy, set.DNSUDP, set.DNSTCP} {
		fd := int(f.Fd()) // a blocking socket: Fd leaves it as it is
		if err := unix.EpollCtl(epfd, unix.EPOLL_CTL_ADD, fd, &unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(fd)}); err != nil {
			unix.Close(epfd)
			return fmt.Errorf("egress: watch the listeners: %w", err)
		}
	}
	if err := unix.SetNonblock(epfd, true); err != nil {
		unix.Close(epfd)
		return fmt.Errorf("egress: watch the listeners: %w", err)
	}
	// Non-blocking, so the poller watches it: an epoll descriptor is
	// readable when any descriptor it watches is.
	w := os.NewFile(uintptr(epfd), "egress-watch")
	rc, err := w.SyscallConn()
	if err != nil {
		w.Close()
		return fmt.Errorf("egress: watch the listeners: %w", err)
	}
	if !g.track(w) {
		return ErrClosed
	}
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		var evs [1]unix.EpollEvent
		err := rc.Read(func(fd uintptr) bool {
			n, err := unix.EpollWait(int(fd), evs[:], 0)
			return n > 0 || (err != nil && err != unix.EINTR)
		})
		// The watch is done with either way; Close closes it too when
		// it wakes this goroutine, and a second close only errs.
		g.untrack(w)
		w.Close()
		if err != nil {
			return // closed before anything arrived
		}
		// Something arrived: the gateway is no longer quiet, whatever
		// it decides (see Quiet).
		g.heard.Add(1)
		if err := g.start(set, true); err != nil && !errors.Is(err, ErrClosed) {
			g.cfg.Logger.Error("egress: start the gateway", "sandbox", g.cfg.SandboxID, "err", err)
		}
	}()
	return nil
}

// start serves set: the proxy on its TCP listener, the resolver on its
// UDP socket and TCP listener, each a copy of set's (Go's poller serves
// them). With own, set is the gateway's, closed once copied: it is
// taken from what Close closes first, so that Close never closes its
// files while they are copied (a descriptor closed and reused meanwhile
// would be served in its place).
func (g *Gateway) start(set *sockets.Set, own bool) error {
	if own && !g.claim(set) {
		return ErrClosed // Close has closed it
	}
	proxyLn, udp, tcp, err := serveSockets(set)
	if own {
		err = errors.Join(err, set.Close())
	}
	if err != nil {
		return err
	}
	if !g.track(proxyLn) || !g.track(udp) || !g.track(tcp) {
		proxyLn.Close()
		udp.Close()
		tcp.Close()
		return ErrClosed
	}
	proxyLn = &heardListener{netlimit.Listener(proxyLn, g.inbound, g.ctx.Done()), &g.heard}
	udp = &heardPacketConn{udp, &g.heard}
	tcp = &heardListener{tcp, &g.heard}

	forward := g.newForwarder()
	proxy := httpx.New(g.tracked(g.serveProxy), httpx.Options{Logger: g.cfg.Logger})
	proxy.BaseContext = func(net.Listener) context.Context { return g.ctx }
	srv := &dns.Server{
		Resolve: g.resolveName,
		Log:     g.logQuery,
		Rate:    float64(g.cfg.Limits.DNSRate),
		Burst:   2 * g.cfg.Limits.DNSRate,
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		// Close has closed the listeners tracked above, and waits for
		// this goroutine; nothing is served.
		return ErrClosed
	}
	g.forward, g.proxy, g.dns = forward, proxy, srv
	g.goServe(func() error { return proxy.Serve(proxyLn) })
	g.goServe(func() error { return srv.ServeUDP(g.ctx, udp) })
	g.goServe(func() error { return srv.ServeTCP(g.ctx, tcp) })
	return nil
}

// listenConfig opens the gateway's TCP listeners. They live on the
// sandbox's loopback, where TCP keep-alive probes are pointless and cost
// system calls per connection, and so is Multipath TCP, which Go's
// listeners otherwise ask for (since Go 1.24): an MPTCP listener is a
// socket and a subflow socket to make and tear down on every sandbox,
// and more of the kernel's code within the sandbox's reach.
var listenConfig = func() net.ListenConfig {
	lc := net.ListenConfig{KeepAlive: -1}
	lc.SetMultipathTCP(false)
	return lc
}()

func listen(network, addr string) (net.Listener, error) {
	return listenConfig.Listen(context.Background(), network, addr)
}

// serveSockets makes copies of set's files that Go's poller serves.
// Accepted connections live on the sandbox's loopback, where TCP
// keep-alive probes are pointless: keepAliveOff turns them off.
func serveSockets(set *sockets.Set) (proxy net.Listener, udp net.PacketConn, tcp net.Listener, err error) {
	if proxy, err = net.FileListener(set.Proxy); err != nil {
		return nil, nil, nil, fmt.Errorf("egress: proxy listener: %w", err)
	}
	if udp, err = net.FilePacketConn(set.DNSUDP); err != nil {
		proxy.Close()
		return nil, nil, nil, fmt.Errorf("egress: resolver socket: %w", err)
	}
	if tcp, err = net.FileListener(set.DNSTCP); err != nil {
		proxy.Close()
		udp.Close()
		return nil, nil, nil, fmt.Errorf("egress: resolver listener: %w", err)
	}
	return keepAliveOff{proxy.(*net.TCPListener)}, udp, keepAliveOff{tcp.(*net.TCPListener)}, nil
}

// keepAliveOff accepts TCP connections with keep-alive probes off, as a
// net.ListenConfig with KeepAlive -1 would.
type keepAliveOff struct{ *net.TCPListener }

func (l keepAliveOff) Accept() (net.Conn, error) {
	c, err := l.AcceptTCP()
	if err != nil {
		return nil, err
	}
	_ = c.SetKeepAlive(false)
	return c, nil
}

// inboundSlack is how many sandbox-side connections beyond the outbound
// cap may be open, for requests that are refused or still being read.
const inboundSlack = 64

// tracked makes Close wait for handler h, so that the events of tunnels it
// cuts are emitted before Close returns.
func (g *Gateway) tracked(h http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		g.mu.Lock()
		if g.closed {
			g.mu.Unlock()
			refuse(w, http.StatusServiceUnavailable, "airlock: the sandbox's network is closing")
			return
		}
		g.wg.Add(1) // under mu, so never after Close began to wait
		g.mu.Unlock()
		defer g.wg.Done()
		h(w, r)
	})
}

func (g *Gateway) goServe(serve func() error) {
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		if err := serve(); err != nil && g.ctx.Err() == nil && !errors.Is(err, http.ErrServerClosed) && !errors.Is(err, net.ErrClosed) {
			g.cfg.Logger.Warn("egress listener stopped", "sandbox", g.cfg.SandboxID, "err", err)
		}
	}()
}

// Env is what a command's environment needs to use the proxy. Both
// spellings are set because tools disagree on which they read.
func Env() []string { return sockets.Env() }

// track registers c to be closed by Close. It reports false (and closes c)
// when the gateway is already closed.
func (g *Gateway) track(c io.Closer) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		c.Close()
		return false
	}
	g.closers[c] = struct{}{}
	return true
}

func (g *Gateway) untrack(c io.Closer) {
	g.mu.Lock()
	delete(g.closers, c)
	g.mu.Unlock()
}

// claim takes c from what Close closes, for its caller to close. It
// reports false when Close has taken it (or closed it) already.
func (g *Gateway) claim(c io.Closer) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if _, ok := g.closers[c]; !ok || g.closed {
		return false
	}
	delete(g.closers, c)
	return true
}

// Quiet reports whether nothing has reached the gateway from the sandbox
// yet: no connection accepted, no resolver packet read. A quiet gateway
// has made no decision and has none under way, so closing it later adds
// nothing to a run's events; a caller may then close it after the run's
// answer. (A connection still in a listen backlog would be reset by the
// close without a decision either way; left open, it would be decided.)
func (g *Gateway) Quiet() bool { return g.heard.Load() == 0 }

// heardListener and heardPacketConn count what the sandbox sends the
// gateway (Gateway.Quiet).
type heardListener struct {
	net.Listener
	heard *atomic.Int64
}

func (l *heardListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.heard.Add(1)
	}
	return c, err
}

type heardPacketConn struct {
	net.PacketConn
	heard *atomic.Int64
}

func (c *heardPacketConn) ReadFrom(b []byte) (int, net.Addr, error) {
	n, addr, err := c.PacketConn.ReadFrom(b)
	if err == nil {
		c.heard.Add(1)
	}
	return n, addr, err
}

// Close stops every listener, cuts every connection, and waits for the
// gateway's goroutines (their last events included) until ctx ends.
func (g *Gateway) Close(ctx context.Context) error {
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return nil
	}
	g.closed = true
	cs := make([]io.Closer, 0, len(g.closers))
	for c := range g.closers {
		cs = append(cs, c)
	}
	g.closers = nil
	proxy := g.proxy
	g.mu.Unlock()

	g.cancel()
	if proxy != nil {
		proxy.Close()
	}
	for _, c := range cs {
		c.Close()
	}
	done := make(chan struct{})
	go func() {
		g.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("egress: close: %w", ctx.Err())
	}
}

// emit sends ev to the event sink, filling in the labels.
func (g *Gateway) emit(ev result.EgressEvent) {
	if g.cfg.OnEvent == nil {
		return
	}
	ev.Tool = g.cfg.Tool
	ev.Sandbox = g.cfg.SandboxID
	// The destination is what the sandbox sent (a CONNECT authority may
	// be up to a header's size); the log keeps a bounded piece of it.
	if len(ev.Destination) > maxLogged {
		ev.Destination = ev.Destination[:maxLogged] + "..."
	}
	g.cfg.OnEvent(ev)
}

// maxLogged bounds a sandbox-chosen string in an event.
const maxLogged = 256

func (g *Gateway) logQuery(q dns.Query) {
	ev := result.EgressEvent{
		Time:        time.Now().Add(-q.Duration),
		Kind:        result.EgressDNS,
		Destination: q.Name,
		Method:      q.Type,
		Allow:       q.Allow,
		Code:        q.Code,
		Reason:      q.Reason,
		DurationMs:  q.Duration.Milliseconds(),
	}
	if q.Answer.IsValid() {
		ev.Address = q.Answer.String()
	}
	g.emit(ev)
}
