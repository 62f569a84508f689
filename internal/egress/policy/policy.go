package policy

import (
	"fmt"
	"net/netip"
	"slices"

	"github.com/airlockhq/airlock/internal/egress/ipclass"
	"github.com/airlockhq/airlock/result"
)

// Decision is the outcome of Match: whether to connect, and why: a code
// (result.Egress*) for machines and a reason for the audit log.
type Decision = ipclass.Decision

// Policy is an ordered list of destinations. It is immutable, so safe for
// concurrent use; a nil *Policy denies everything.
type Policy struct {
	dests []Destination
}

// New returns a policy allowing dests, which should come from Compile.
// Order matters: when several destinations match a request, the first one
// that allows the port wins. New copies dests.
func New(dests []Destination) *Policy {
	p := &Policy{dests: make([]Destination, len(dests))}
	for i, d := range dests {
		p.dests[i] = d.clone()
	}
	return p
}

// Destinations returns a copy of the policy's destinations, in order.
func (p *Policy) Destinations() []Destination {
	if p == nil {
		return nil
	}
	out := make([]Destination, len(p.dests))
	for i, d := range p.dests {
		out[i] = d.clone()
	}
	return out
}

func allow(format string, args ...any) Decision {
	return Decision{Allow: true, Reason: fmt.Sprintf(format, args...)}
}

func deny(code, format string, args ...any) Decision {
	return Decision{Allow: false, Code: code, Reason: fmt.Sprintf(format, args...)}
}

// Match decides a request from a sandbox to connect to host:port. host is
// what the client asked for: a host name in any case, with or without a
// trailing dot, or an IP literal in any spelling ipclass.ParseHost accepts.
// It returns the destination that allows the request, or nil and the reason
// it is denied. The returned destination is shared: do not modify it.
//
// An IP literal matches only IP destinations, by prefix containment, and a
// name only name destinations: "127.1" can never match a name entry, and a
// name made of digits can never sneak past an IP range. A host that looks
// numeric but is not a valid address is denied rather than resolved (a
// resolver might still read it as a number). Cloud metadata names are denied
// even when a wildcard covers them, and an address is still subject to
// ipclass.Check with the matching destination's Private option.
func (p *Policy) Match(host string, port uint16) (*Destination, Decision) {
	a, isIP, err := ipclass.ParseHost(host)
	if err != nil {
		return nil, deny(result.EgressInvalidHost, "%s; refused rather than resolved", err)
	}
	if isIP {
		return p.matchAddr(host, a, port)
	}
	name, problem := normalizeName(host)
	if problem != "" {
		return nil, deny(result.EgressInvalidHost, "%s", problem)
	}
	if isMetadataName(name) {
		return nil, deny(result.EgressMetadata, "%s is a cloud metadata name (never allowed)", quote(name))
	}
	var ports []uint16
	if p != nil {
		for i := range p.dests {
			d := &p.dests[i]
			if !d.coversName(name) {
				continue
			}
			if d.AllowsPort(port) {
				return d, allow("%s matches %s", quote(name), d)
			}
			ports = append(ports, d.Ports...)
		}
	}
	if ports != nil {
		return nil, portDenied(port, quote(name), ports)
	}
	return nil, deny(result.EgressNotAllowed, "%s is not an allowed destination", quote(name))
}

// matchAddr is Match for an IP literal host that parsed to a.
func (p *Policy) matchAddr(host string, a netip.Addr, port uint16) (*Destination, Decision) {
	what, spelled := a.String(), ""
	if host != what {
		// Show the spelling too: "0x7f.1" in the audit log says more
		// about the request than 127.0.0.1 alone.
		what = fmt.Sprintf("%s (%s)", quote(host), a)
		spelled = "host " + quote(host) + ": "
	}
	if d := ipclass.Check(a, true); !d.Allow {
		return nil, deny(d.Code, "%s%s", spelled, d.Reason)
	}
	var ports []uint16
	var refused *Decision
	if p != nil {
		for i := range p.dests {
			d := &p.dests[i]
			if !d.Prefix.IsValid() || !d.Prefix.Contains(a) {
				continue
			}
			if !d.AllowsPort(port) {
				ports = append(ports, d.Ports...)
				continue
			}
			// Compile refuses ranges that need Private without it; this
			// keeps hand-built destinations honest too.
			if c := ipclass.Check(a, d.Private); !c.Allow {
				if refused == nil {
					refused = &c
				}
				continue
			}
			return d, allow("%s matches %s", what, d)
		}
	}
	switch {
	case refused != nil:
		return nil, deny(refused.Code, "%s%s", spelled, refused.Reason)
	case ports != nil:
		return nil, portDenied(port, what, ports)
	}
	return nil, deny(result.EgressNotAllowed, "%s is not an allowed destination", what)
}

// portDenied says that port is not among the ports allowed for what.
func portDenied(port uint16, what string, ports []uint16) Decision {
	slices.Sort(ports)
	return deny(result.EgressNotAllowed, "port %d is not allowed for %s (allowed: %s)", port, what, portList(slices.Compact(ports)))
}

// Lookup returns the first name destination that covers name at any port,
// or nil. It is for airlock's DNS resolver, which answers only for names a
// sandbox may connect to. IP literals, invalid names and cloud metadata
// names get nil. The returned destination is shared: do not modify it.
func (p *Policy) Lookup(name string) *Destination {
	if p == nil {
		return nil
	}
	if _, isIP, err := ipclass.ParseHost(name); isIP || err != nil {
		return nil
	}
	n, problem := normalizeName(name)
	if problem != "" || isMetadataName(n) {
		return nil
	}
	for i := range p.dests {
		if d := &p.dests[i]; d.coversName(n) {
			return d
		}
	}
	return nil
}
