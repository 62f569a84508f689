package egress

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"syscall"

	"github.com/airlockhq/airlock/internal/egress/ipclass"
	"github.com/airlockhq/airlock/internal/egress/policy"
)

// Decision is the outcome of one check, with the reason that goes to the
// log (and, for denials, to the client).
type Decision = ipclass.Decision

// outbound is a connection airlock dialed for the sandbox.
type outbound struct {
	conn net.Conn
	addr netip.AddrPort // what was dialed
}

// Why a connection may be allowed by policy yet still not made. The client
// hears a different status for each.
var (
	errCapped      = errors.New("capped")
	errUnreachable = errors.New("unreachable")
)

// dial matches host:port against the policy, resolves it (pinned addresses
// first, else the host's resolver), keeps only the addresses the
// destination may reach, and dials them in order. A request the policy
// allows is still denied (err errCapped) when a per-sandbox cap is
// reached; an allowed request whose dial failed has err errUnreachable.
// The caller owns out.conn and must call release once it is closed.
func (g *Gateway) dial(ctx context.Context, host string, port uint16) (out outbound, dec Decision, err error) {
	d, dec := g.cfg.Policy.Match(host, port)
	if !dec.Allow {
		return out, dec, nil
	}
	addrs, dec := g.addresses(ctx, d, host)
	if !dec.Allow {
		return out, dec, nil
	}
	// Caps are checked after the policy so that a denied request never
	// counts against them.
	if n := g.active.Add(1); n > int64(g.cfg.Limits.Connections) {
		g.active.Add(-1)
		return out, Decision{Reason: fmt.Sprintf("connection limit of %d reached", g.cfg.Limits.Connections)}, errCapped
	}
	if g.bytes.Load() >= g.cfg.Limits.Bytes {
		g.active.Add(-1)
		return out, Decision{Reason: fmt.Sprintf("byte limit of %d reached", g.cfg.Limits.Bytes)}, errCapped
	}
	dctx, cancel := context.WithTimeout(ctx, g.cfg.DialTimeout)
	defer cancel()
	d0 := net.Dialer{KeepAlive: -1} // connections end with the sandbox
	var last error
	for _, a := range addrs {
		ap := netip.AddrPortFrom(a, port)
		// The literal address that passed the checks is what is dialed:
		// there is no second lookup a rebinding resolver could answer
		// differently.
		c, err := d0.DialContext(dctx, "tcp", ap.String())
		if err == nil {
			return outbound{conn: c, addr: ap}, Decision{Allow: true}, nil
		}
		last = err
	}
	g.active.Add(-1)
	return out, Decision{Allow: true, Reason: "connect failed: " + dialReason(last)}, errUnreachable
}

// release returns a connection slot taken by a successful dial.
func (g *Gateway) release() { g.active.Add(-1) }

// addresses returns the addresses of destination d that may be dialed for
// host, or a denial naming the first refused one.
func (g *Gateway) addresses(ctx context.Context, d *policy.Destination, host string) ([]netip.Addr, Decision) {
	var cands []netip.Addr
	switch {
	case d.Prefix.IsValid():
		a, ok, err := ipclass.ParseHost(host)
		if err != nil || !ok {
			return nil, Decision{Reason: fmt.Sprintf("%q is not a valid address", host)}
		}
		cands = []netip.Addr{a}
	case len(d.Addresses) > 0:
		cands = d.Addresses
	default:
		name := strings.TrimSuffix(strings.ToLower(host), ".")
		rctx, cancel := context.WithTimeout(ctx, g.cfg.DialTimeout)
		defer cancel()
		found, err := g.cfg.Resolver.LookupNetIP(rctx, "ip", name)
		if err != nil || len(found) == 0 {
			return nil, Decision{Reason: fmt.Sprintf("could not resolve %q", name)}
		}
		// The resolver may hand IPv4 answers back in IPv4-mapped form;
		// the mapped and plain forms dial the same host, so classify the
		// plain one.
		for _, a := range found {
			cands = append(cands, a.Unmap())
		}
	}
	var ok []netip.Addr
	var first Decision
	for _, a := range cands {
		// Every address is classified; a name that resolves to a public
		// and a private address is dialed only at the public one.
		dec := ipclass.Check(a, d.Private)
		if dec.Allow {
			ok = append(ok, a)
		} else if first.Reason == "" {
			first = dec
		}
	}
	if len(ok) == 0 {
		return nil, first
	}
	return ok, Decision{Allow: true}
}

// dialReason is a short, host-detail-free description of a dial failure.
func dialReason(err error) string {
	var ne net.Error
	switch {
	case err == nil:
		return "no address"
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return "timed out"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.Is(err, syscall.ENETUNREACH), errors.Is(err, syscall.EHOSTUNREACH):
		return "unreachable"
	default:
		return "error"
	}
}
