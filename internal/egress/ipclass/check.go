package ipclass

import (
	"fmt"
	"net/netip"

	"github.com/airlockhq/airlock/result"
)

// Decision is the outcome of a policy check. Code is a refusal's stable
// code for machines and tests (one of the result.Egress* codes; empty
// when allowed); Reason is a short sentence for the audit log, written
// for an operator, such as "address 10.0.0.5 is private".
type Decision struct {
	Allow  bool
	Code   string
	Reason string
}

func allow(format string, args ...any) Decision {
	return Decision{Allow: true, Reason: fmt.Sprintf(format, args...)}
}

func deny(code, format string, args ...any) Decision {
	return Decision{Allow: false, Code: code, Reason: fmt.Sprintf(format, args...)}
}

// Check decides whether airlock may dial a. allowPrivate is the
// destination's `private: true` option.
//
// Public addresses are allowed. Loopback, private, CGNAT, reserved and
// embedded addresses are allowed only when allowPrivate is set. Cloud
// metadata, link-local, unspecified, multicast and broadcast addresses are
// never allowed, and neither is an IPv6 form embedding such an IPv4 address
// (::ffff:169.254.169.254, 64:ff9b::a9fe:a9fe, ...), so no spelling of a
// metadata endpoint gets through. In the local-use NAT64 prefix
// 64:ff9b:1::/48, where the IPv4 address may sit in any of four places,
// an address is refused when any of those places holds a metadata or
// link-local address. Addresses with a zone (fe80::1%eth0) and the zero
// Addr are refused.
func Check(a netip.Addr, allowPrivate bool) Decision {
	if !a.IsValid() {
		return deny(result.EgressInvalidHost, "invalid address")
	}
	if a.Zone() != "" {
		// A zone picks a host interface; nothing a sandbox should reach
		// needs one, and zones only exist for scoped (link-local style)
		// addresses.
		return deny(result.EgressInvalidHost, "address %s has a zone (scoped addresses are never allowed)", a)
	}
	c := Classify(a)
	switch {
	case c == Public:
		return allow("address %s is public", a)
	case c.never():
		return deny(c.code(), "address %s is %s (never allowed)", a, c.phrase())
	case c == Embedded:
		return checkEmbedded(a, allowPrivate)
	case !allowPrivate:
		return deny(c.code(), "address %s is %s", a, c.phrase())
	}
	return allow("address %s is %s (allowed: private destination)", a, c.phrase())
}

// checkEmbedded decides an Embedded address. The IPv4 address inside is
// judged too, because a NAT64 gateway, 6to4 relay or the kernel's own
// handling of mapped addresses may deliver the connection to it: without
// this, ::ffff:169.254.169.254 would be a way to the metadata service for
// any destination marked private.
func checkEmbedded(a netip.Addr, allowPrivate bool) Decision {
	var d Decision
	found := false
	embeddings(a, func(e netip.Addr, l *layout) bool {
		if c := Classify(e); l.neverVia(c) {
			d = deny(c.code(), "address %s is the %s form of %s, which is %s (never allowed)", a, l.form, e, c.phrase())
			found = true
			return false
		}
		return true
	})
	if found {
		return d
	}
	desc := "a local-use NAT64 address embedding an IPv4 address"
	if e, ok := EmbeddedIPv4(a); ok {
		desc = "an IPv6 form of " + e.String()
	}
	if !allowPrivate {
		return deny(result.EgressPrivate, "address %s is %s", a, desc)
	}
	return allow("address %s is %s (allowed: private destination)", a, desc)
}

// CheckPrefix decides whether airlock may dial every address in p, for an
// IP range destination: it is Check applied to the whole range. A prefix is
// never allowed when it contains any address Check never allows, including
// embedded IPv6 forms of one (so 128.0.0.0/1, ::ffff:0:0/96 and 2002::/16
// are all refused); otherwise it needs allowPrivate when it overlaps any
// non-public range. A single-address prefix is judged exactly as Check
// judges its address.
func CheckPrefix(p netip.Prefix, allowPrivate bool) Decision {
	if !p.IsValid() {
		return deny(result.EgressInvalidHost, "invalid prefix")
	}
	p = p.Masked()
	if p.IsSingleIP() {
		return Check(p.Addr(), allowPrivate)
	}
	rows := table(p.Addr())
	// Whole ranges first, so that 128.0.0.0/1 is reported as overlapping
	// link-local rather than as containing one metadata address.
	for _, r := range rows {
		if r.c.never() && !r.p.IsSingleIP() && p.Overlaps(r.p) {
			return deny(r.c.code(), "prefix %s overlaps %s range %s (never allowed)", p, r.c, r.p)
		}
	}
	for _, r := range rows {
		if r.c.never() && r.p.IsSingleIP() && p.Overlaps(r.p) {
			return deny(r.c.code(), "prefix %s contains %s %s (never allowed)", p, r.c.phrase(), r.p.Addr())
		}
	}
	if p.Addr().Is6() {
		for i := range layouts {
			l := &layouts[i]
			if !p.Overlaps(l.within) {
				continue
			}
			q := l.v4Prefix(p)
			for _, r := range v4Ranges {
				if l.neverVia(r.c) && q.Overlaps(r.p) {
					return deny(r.c.code(), "prefix %s contains %s forms of %s, which is %s (never allowed)", p, l.form, narrower(q, r.p), r.c.phrase())
				}
			}
		}
	}
	for _, r := range rows {
		if !p.Overlaps(r.p) {
			continue
		}
		if !allowPrivate {
			return deny(r.c.code(), "prefix %s overlaps %s range %s", p, r.c, r.p)
		}
		return allow("prefix %s overlaps %s range %s (allowed: private destination)", p, r.c, r.p)
	}
	return allow("prefix %s is public", p)
}

// narrower returns the smaller of two overlapping prefixes, as an address
// when it holds just one.
func narrower(a, b netip.Prefix) string {
	if b.Bits() > a.Bits() {
		a = b
	}
	if a.IsSingleIP() {
		return a.Addr().String()
	}
	return a.String()
}
