package egress

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"syscall"
	"time"

	"github.com/airlockhq/airlock/internal/egress/ipclass"
	"github.com/airlockhq/airlock/internal/egress/policy"
	"github.com/airlockhq/airlock/result"
)

// Decision is the outcome of one check, with the code (result.Egress*) and
// the reason that go to the log (and the reason, for denials, to the
// client).
type Decision = ipclass.Decision

// denial is a refusal with its code and reason.
func denial(code, format string, args ...any) Decision {
	return Decision{Code: code, Reason: fmt.Sprintf(format, args...)}
}

// connectFailed is the decision of an allowed request whose destination
// could not be reached.
func connectFailed(err error) Decision {
	return Decision{Allow: true, Code: result.EgressUpstreamFailed, Reason: "connect failed: " + dialReason(err)}
}

// cut is the note of an allowed connection the byte cap cut.
func (g *Gateway) cut() Decision {
	return Decision{Allow: true, Code: result.EgressCapped, Reason: fmt.Sprintf("cut: byte limit of %d reached", g.cfg.Limits.Bytes)}
}

// outbound is a connection airlock dialed for the sandbox.
type outbound struct {
	conn net.Conn
	addr netip.AddrPort // what was dialed
	// opaque says the destination opted out of the check of what the
	// client sends first (Destination.Opaque).
	opaque bool
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
	if d.Name != "" && len(d.Addresses) == 0 {
		if g.cfg.Limits.NoHostLookups {
			return out, denial(result.EgressNotPinned, "%q is not pinned, and this sandbox's names are not looked up on the host", shortName(host)), nil
		}
		if d.Wildcard {
			if dec := g.wildcardLookup(host, d.Name); !dec.Allow {
				return out, dec, nil
			}
		}
	}
	addrs, dec := g.dialer.Addresses(ctx, d, host)
	if !dec.Allow {
		return out, dec, nil
	}
	// Caps are checked after the policy so that a denied request never
	// counts against them.
	if n := g.active.Add(1); n > int64(g.cfg.Limits.Connections) {
		g.active.Add(-1)
		return out, denial(result.EgressCapped, "connection limit of %d reached", g.cfg.Limits.Connections), errCapped
	}
	if g.bytes.Load() >= g.cfg.Limits.Bytes {
		g.active.Add(-1)
		return out, denial(result.EgressCapped, "byte limit of %d reached", g.cfg.Limits.Bytes), errCapped
	}
	c, ap, err := g.dialer.DialAddrs(ctx, addrs, port)
	if err != nil {
		g.active.Add(-1)
		return out, connectFailed(err), errUnreachable
	}
	return outbound{conn: c, addr: ap, opaque: d.Opaque}, Decision{Allow: true}, nil
}

// maxUnderWildcard bounds the part of a name under a wildcard destination
// ("abc.def" of "abc.def.example.com" under "*.example.com"): one DNS
// label's worth.
const maxUnderWildcard = 63

// wildcardLookup decides whether the host may resolve host, a name under
// the wildcard destination *.suffix: the host's lookup reaches the zone's
// name servers, which see the name, so the names a sandbox may have
// looked up are few (Limits.WildcardNames, distinct) and short. A name
// counts from its first lookup, found or not.
func (g *Gateway) wildcardLookup(host, suffix string) Decision {
	name := strings.TrimSuffix(strings.ToLower(host), ".")
	if under := strings.TrimSuffix(name, "."+suffix); len(under) > maxUnderWildcard {
		return denial(result.EgressCapped, "the part of %q under *.%s is %d bytes; names under a wildcard are resolved up to %d", shortName(name), suffix, len(under), maxUnderWildcard)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if _, ok := g.wild[name]; ok {
		return Decision{Allow: true}
	}
	if len(g.wild) >= g.cfg.Limits.WildcardNames {
		return denial(result.EgressCapped, "%d distinct names under wildcard destinations were resolved already, the most a sandbox may have resolved", len(g.wild))
	}
	g.wild[name] = struct{}{}
	return Decision{Allow: true}
}

// shortName bounds a name for a message.
func shortName(s string) string {
	if len(s) > 80 {
		return s[:80] + "..."
	}
	return s
}

// release returns a connection slot taken by a successful dial.
func (g *Gateway) release() { g.active.Add(-1) }

// Dialer makes airlock's outbound connections: it resolves a destination
// on the host, keeps only the addresses the destination may reach, and
// dials exactly those. The egress gateway and the credential broker share
// it, so both apply the same address checks.
type Dialer struct {
	// Resolver resolves names that are not pinned; nil is the host's.
	Resolver Resolver
	// Timeout bounds one lookup and one dial; 0 means 10s.
	Timeout time.Duration
}

func (d *Dialer) timeout() time.Duration {
	if d.Timeout <= 0 {
		return 10 * time.Second
	}
	return d.Timeout
}

// Dial checks host:port against destination dest (which the caller has
// already matched) and connects to the first address that passes and
// answers. It returns the address dialed, or a denial, or (with an
// allowing decision) the dial error.
func (d *Dialer) Dial(ctx context.Context, dest *policy.Destination, host string, port uint16) (net.Conn, netip.AddrPort, Decision, error) {
	addrs, dec := d.Addresses(ctx, dest, host)
	if !dec.Allow {
		return nil, netip.AddrPort{}, dec, nil
	}
	c, ap, err := d.DialAddrs(ctx, addrs, port)
	if err != nil {
		return nil, netip.AddrPort{}, connectFailed(err), err
	}
	return c, ap, Decision{Allow: true}, nil
}

// DialAddrs dials addrs in order on port and returns the first connection.
func (d *Dialer) DialAddrs(ctx context.Context, addrs []netip.Addr, port uint16) (net.Conn, netip.AddrPort, error) {
	dctx, cancel := context.WithTimeout(ctx, d.timeout())
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
			return c, ap, nil
		}
		last = err
	}
	if last == nil {
		last = errors.New("no address")
	}
	return nil, netip.AddrPort{}, last
}

// Addresses returns the addresses of destination dest that may be dialed
// for host, or a denial naming the first refused one.
func (d *Dialer) Addresses(ctx context.Context, dest *policy.Destination, host string) ([]netip.Addr, Decision) {
	var cands []netip.Addr
	switch {
	case dest.Prefix.IsValid():
		a, ok, err := ipclass.ParseHost(host)
		if err != nil || !ok {
			return nil, denial(result.EgressInvalidHost, "%q is not a valid address", host)
		}
		cands = []netip.Addr{a}
	case len(dest.Addresses) > 0:
		cands = dest.Addresses
	default:
		name := strings.TrimSuffix(strings.ToLower(host), ".")
		rctx, cancel := context.WithTimeout(ctx, d.timeout())
		defer cancel()
		res := d.Resolver
		if res == nil {
			res = net.DefaultResolver
		}
		found, err := res.LookupNetIP(rctx, "ip", name)
		if err != nil || len(found) == 0 {
			return nil, denial(result.EgressLookupFailed, "could not resolve %q", name)
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
		dec := ipclass.Check(a, dest.Private)
		if dec.Allow {
			ok = append(ok, a)
		} else if first.Reason == "" {
			first = dec
			if !dest.Private && ipclass.Check(a, true).Allow {
				// As the config's error says it: the author of a
				// destination in a private range learns what to set.
				first.Reason += policy.PrivateHint
			}
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
