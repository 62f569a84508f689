package egress

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/airlockhq/airlock/internal/egress/dns"
	"github.com/airlockhq/airlock/internal/egress/sni"
	"github.com/airlockhq/airlock/internal/linux/netns"
	"github.com/airlockhq/airlock/internal/netlimit"
	"github.com/airlockhq/airlock/result"
)

const (
	// helloWait is Config.HelloWait's default: it bounds the wait for
	// the client's first bytes and for the rest of a TLS ClientHello. A client that sends nothing in that time
	// is refused: only an opaque destination carries a protocol whose
	// server speaks first (SSH, SMTP). There used to be a shorter wait
	// after which silence was taken for such a protocol and let through
	// unchecked, which a client could use to send, late, a ClientHello
	// for any name.
	helloWait = 10 * time.Second
	// tlsHandshake starts every TLS connection (a handshake record).
	tlsHandshake = 0x16
	// listenTries is how many addresses are tried when one cannot be
	// bound (the sandbox may already hold a high port on the next one).
	listenTries = 8
)

// resolveName is the resolver's policy: an allowed name gets its
// transparent address (listeners are opened on first lookup).
func (g *Gateway) resolveName(name string) dns.Verdict {
	ports := g.portsFor(name)
	// A name the broker serves transparently is reached at its
	// address too, by clients that ignore HTTPS_PROXY; its port is
	// the gateway's own (serveTransparent terminates it).
	brokered := false
	if i := g.cfg.Intercept; i != nil {
		if p, ok := i.Ports[name]; ok {
			brokered = true
			ports = append(ports, p)
			slices.Sort(ports)
			ports = slices.Compact(ports)
		}
	}
	if len(ports) == 0 {
		return dns.Verdict{Code: result.EgressNotAllowed, Reason: fmt.Sprintf("%q is not an allowed destination", name)}
	}
	// Match applies the name rules (metadata names are never allowed,
	// even under a wildcard).
	if _, dec := g.cfg.Policy.Match(name, ports[0]); !dec.Allow && !brokered {
		return dns.Verdict{Code: dec.Code, Reason: dec.Reason}
	}
	addr, dec := g.transparentAddr(name, ports)
	if !dec.Allow {
		return dns.Verdict{Code: dec.Code, Reason: dec.Reason}
	}
	return dns.Verdict{Allow: true, Addr: addr}
}

// portsFor returns every port any name destination allows for name.
func (g *Gateway) portsFor(name string) []uint16 {
	var ports []uint16
	for _, d := range g.cfg.Policy.Destinations() {
		if d.Prefix.IsValid() {
			continue
		}
		covered := name == d.Name
		if d.Wildcard {
			covered = strings.HasSuffix(name, "."+d.Name)
		}
		if covered {
			ports = append(ports, d.Ports...)
		}
	}
	slices.Sort(ports)
	return slices.Compact(ports)
}

// transparentAddr returns name's transparent address, opening its
// listeners the first time, or the refusal when it cannot.
func (g *Gateway) transparentAddr(name string, ports []uint16) (netip.Addr, Decision) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if a, ok := g.names[name]; ok {
		return a, Decision{Allow: true}
	}
	if g.closed {
		return netip.Addr{}, denial(result.EgressInternal, "sandbox network is closing")
	}
	if len(g.names) >= g.cfg.Limits.Names {
		return netip.Addr{}, denial(result.EgressCapped, "more than %d names looked up", g.cfg.Limits.Names)
	}
	for range listenTries {
		g.nextAddr = g.nextAddr.Next()
		addr := g.nextAddr
		lns, err := g.listenAll(addr, ports)
		if err != nil {
			g.cfg.Logger.Debug("transparent address not usable", "sandbox", g.cfg.SandboxID, "addr", addr, "err", err)
			continue
		}
		g.names[name] = addr
		for i, ln := range lns {
			g.closers[ln] = struct{}{}
			lim := &heardListener{netlimit.Listener(ln, g.inbound, g.ctx.Done()), &g.heard}
			g.goServe(func() error { return g.acceptTransparent(lim, name, ports[i]) })
		}
		return addr, Decision{Allow: true}
	}
	return netip.Addr{}, denial(result.EgressInternal, "no transparent address could be bound")
}

// listenAll opens a listener on addr for every port inside the sandbox's
// namespace, or none.
func (g *Gateway) listenAll(addr netip.Addr, ports []uint16) ([]net.Listener, error) {
	var lns []net.Listener
	err := netns.Do(g.ns, func() error {
		for _, p := range ports {
			ln, err := listen("tcp4", netip.AddrPortFrom(addr, p).String())
			if err != nil {
				return err
			}
			lns = append(lns, ln)
		}
		return nil
	})
	if err != nil {
		for _, ln := range lns {
			ln.Close()
		}
		return nil, err
	}
	return lns, nil
}

func (g *Gateway) acceptTransparent(ln net.Listener, name string, port uint16) error {
	for {
		c, err := ln.Accept()
		if err != nil {
			return err
		}
		if !g.track(c) {
			return net.ErrClosed
		}
		g.wg.Add(1)
		go func() {
			defer g.wg.Done()
			defer g.untrack(c)
			defer c.Close()
			g.serveTransparent(c, name, port)
		}()
	}
}

// serveTransparent splices one connection to name:port, after checking a
// TLS client's server name.
func (g *Gateway) serveTransparent(c net.Conn, name string, port uint16) {
	ev := result.EgressEvent{
		Time:        time.Now(),
		Kind:        result.EgressTransparent,
		Destination: net.JoinHostPort(name, strconv.Itoa(int(port))),
		Method:      "plain",
	}
	done := func(why Decision) {
		ev.Code, ev.Reason = why.Code, why.Reason
		ev.DurationMs = time.Since(ev.Time).Milliseconds()
		g.emit(ev)
	}
	if h := g.intercepted(name, port); h != nil {
		g.serveInterceptedConn(c, ev, name, h)
		return
	}
	d, _ := g.cfg.Policy.Match(name, port)
	opaque := d != nil && d.Opaque
	pre, why := g.checkHello(c, nil, name, opaque, &ev)
	if why.Code != "" {
		done(why) // closing the connection is the client's answer
		return
	}
	if !opaque && ev.Method == "plain" {
		// Not TLS: HTTP/1, each request checked and logged on its own.
		if why := g.serveTransparentHTTP(c, pre, name, port, result.EgressTransparent); why.Code != "" {
			done(why)
		}
		return
	}
	out, dec, err := g.dial(g.ctx, name, port)
	ev.Allow = dec.Allow
	if !dec.Allow || err != nil {
		done(dec)
		return
	}
	var cut Decision
	defer func() { done(cut) }() // after the slot is released
	defer g.release()
	up := out.conn
	ev.Address = out.addr.String()
	if !g.track(up) {
		up.Close()
		return
	}
	defer func() {
		g.untrack(up)
		up.Close()
	}()
	ev.BytesOut, ev.BytesIn, cut = g.pipe(c, up, pre)
}

// closedEarly is checkHello's note for a client that closed before it
// sent anything: nothing went anywhere, and nothing was refused.
var closedEarly = Decision{Code: result.EgressClosed, Reason: "client closed before sending"}

// checkHello reads what the client sends first on a connection to the
// destination name ("" for an address destination), pre being what was
// read of it already. A TLS ClientHello must name the destination: a
// client could otherwise connect for an allowed name and speak TLS for
// another host served at the same address (a CDN serves thousands). It
// returns the bytes to replay upstream, or why not (a decision with a
// code: a refusal, or closedEarly). An opaque destination is not checked.
func (g *Gateway) checkHello(c net.Conn, pre []byte, name string, opaque bool, ev *result.EgressEvent) ([]byte, Decision) {
	if opaque {
		ev.Method = "tcp"
		return pre, Decision{}
	}
	c.SetReadDeadline(time.Now().Add(g.cfg.HelloWait))
	defer c.SetReadDeadline(time.Time{})
	if len(pre) == 0 {
		var first [1]byte
		n, err := c.Read(first[:])
		if n == 0 {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				return nil, denial(result.EgressSilent, "the client sent nothing for %v (a destination whose server speaks first, such as SSH, needs opaque: true)", g.cfg.HelloWait)
			}
			return nil, closedEarly
		}
		pre = first[:]
	}
	if pre[0] != tlsHandshake {
		return pre, Decision{} // not TLS: nothing to check
	}
	raw, server, err := sni.Read(io.MultiReader(bytes.NewReader(pre), c))
	switch {
	case errors.Is(err, sni.ErrNotTLS):
		return raw, Decision{}
	case errors.Is(err, sni.ErrEncrypted):
		ev.Method = "tls"
		return nil, denial(result.EgressECH, "TLS ClientHello with Encrypted Client Hello (ECH): the name it is for cannot be checked")
	case err != nil:
		ev.Method = "tls"
		return nil, denial(result.EgressMalformed, "malformed TLS ClientHello")
	}
	ev.Method = "tls"
	switch {
	case name == "":
		return raw, Decision{} // an address destination: the address is what was allowed
	case server == "":
		return nil, denial(result.EgressNoSNI, "TLS ClientHello without a server name")
	case !strings.EqualFold(strings.TrimSuffix(server, "."), name):
		return nil, denial(result.EgressSNIMismatch, "TLS server name %q does not match %q", server, name)
	}
	return raw, Decision{}
}
