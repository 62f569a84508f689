package netlimit

import (
	"context"
	"crypto/tls"
	"net"
	"net/netip"
	"sync"
	"time"
)

// Network is Conns for a listener open to the network, with one more
// bound: while three quarters of its n connections are taken, a remote
// address that holds a quarter of them has its next ones closed as soon
// as they are accepted. A caller that opens connections without end
// (each held for as long as a header or a body may take) then fills its
// share and no more, and the rest of the bound serves everyone else;
// under no pressure, one address may use the whole bound. An address
// that has just shown a credential on one of its connections (Vouch: a
// cluster's front, a load balancer, a NAT of real callers) is held to no
// share for VouchFor: the share is against callers who show nothing,
// and a token's own use is bounded by its concurrency. An IPv6 address
// counts by its /64, the block one host is given.
func Network(ln net.Listener, n int) net.Listener {
	return &shared{listener: listener{Listener: ln, tokens: make(chan struct{}, n)},
		pressure: n - n/4, share: max(n/4, 1), held: map[netip.Prefix]int{}, vouched: map[netip.Prefix]time.Time{}}
}

// VouchFor is how long an address that showed a credential is held to no
// share.
const VouchFor = 5 * time.Minute

// maxVouched bounds the addresses remembered as vouched for: only
// callers with a credential add to it, and past it the oldest give way.
const maxVouched = 4096

type connKey struct{}

// WithConn returns ctx carrying c, the connection a request came on, for
// Vouch (an http.Server's ConnContext).
func WithConn(ctx context.Context, c net.Conn) context.Context {
	// A TLS listener's connection wraps the one the listener counted.
	if tc, ok := c.(*tls.Conn); ok {
		c = tc.NetConn()
	}
	return context.WithValue(ctx, connKey{}, c)
}

// Vouch says that a request of ctx (see WithConn) showed a valid
// credential: its connection's remote address is held to no share of
// its listener (a Network one) for VouchFor. Otherwise it does nothing.
func Vouch(ctx context.Context) {
	c, ok := ctx.Value(connKey{}).(*sharedConn)
	if !ok {
		return
	}
	l := c.l
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.vouched[c.key]; !ok && len(l.vouched) >= maxVouched {
		var oldest netip.Prefix
		var at time.Time
		for k, t := range l.vouched {
			if at.IsZero() || t.Before(at) {
				oldest, at = k, t
			}
		}
		delete(l.vouched, oldest)
	}
	l.vouched[c.key] = now
}

type shared struct {
	listener
	pressure int // connections open from which shares apply
	share    int // connections one address may hold under pressure

	mu   sync.Mutex
	held map[netip.Prefix]int // open connections by remote address
	// vouched is when each address last showed a credential (Vouch).
	vouched map[netip.Prefix]time.Time
	// refused counts the connections closed for their address's share.
	refused int64
}

// addrKey is who a connection counts against: its remote address, an
// IPv6 one's /64.
func addrKey(a net.Addr) netip.Prefix {
	ap, err := netip.ParseAddrPort(a.String())
	if err != nil {
		return netip.Prefix{}
	}
	ip := ap.Addr().Unmap()
	if ip.Is4() {
		return netip.PrefixFrom(ip, 32)
	}
	p, _ := ip.Prefix(64)
	return p
}

func (l *shared) Accept() (net.Conn, error) {
	for {
		c, err := l.listener.Accept()
		if err != nil {
			return nil, err
		}
		key := addrKey(c.RemoteAddr())
		l.mu.Lock()
		// len(tokens) counts this connection too.
		if len(l.tokens) > l.pressure && l.held[key] >= l.share && !l.vouchedFor(key) {
			l.refused++
			l.mu.Unlock()
			c.Close()
			continue
		}
		l.held[key]++
		l.mu.Unlock()
		return &sharedConn{Conn: c, l: l, key: key}, nil
	}
}

// vouchedFor says whether key showed a credential within VouchFor; l.mu
// is held.
func (l *shared) vouchedFor(key netip.Prefix) bool {
	t, ok := l.vouched[key]
	if ok && time.Since(t) > VouchFor {
		delete(l.vouched, key)
		return false
	}
	return ok
}

// Refused tells how many connections ln (a Network listener) closed at
// once for their address's share.
func Refused(ln net.Listener) int64 {
	l, ok := ln.(*shared)
	if !ok {
		return 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.refused
}

type sharedConn struct {
	net.Conn
	l    *shared
	key  netip.Prefix
	once sync.Once
}

func (c *sharedConn) Close() error {
	c.once.Do(func() {
		c.l.mu.Lock()
		if c.l.held[c.key]--; c.l.held[c.key] <= 0 {
			delete(c.l.held, c.key)
		}
		c.l.mu.Unlock()
	})
	// The inner connection gives its token back.
	return c.Conn.Close()
}
