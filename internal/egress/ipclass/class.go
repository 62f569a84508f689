package ipclass

import (
	"net/netip"
	"strconv"

	"github.com/airlockhq/airlock/result"
)

// Class is the kind of network an IP address belongs to, as far as egress
// policy is concerned.
type Class int

// The classes. Where ranges overlap, the more specific class wins: the
// metadata addresses are checked before the link-local, CGNAT, private and
// reserved ranges that contain them, and broadcast before 240.0.0.0/4.
const (
	// Public is every address outside the ranges below: the internet.
	Public Class = iota
	// Loopback is 127.0.0.0/8 and ::1.
	Loopback
	// Private is RFC 1918 space (10.0.0.0/8, 172.16.0.0/12, 192.168.0.0/16),
	// IPv6 unique local addresses (fc00::/7) and the deprecated site-local
	// range fec0::/10.
	Private
	// CGNAT is the shared address space 100.64.0.0/10 (RFC 6598), used
	// inside carrier and cloud networks.
	CGNAT
	// LinkLocal is 169.254.0.0/16 and fe80::/10.
	LinkLocal
	// Metadata is a cloud instance metadata endpoint; see metadataAddrs.
	Metadata
	// Multicast is 224.0.0.0/4 and ff00::/8.
	Multicast
	// Broadcast is 255.255.255.255.
	Broadcast
	// Unspecified is 0.0.0.0/8 ("this network"; dialing 0.0.0.0 reaches the
	// local host on Linux) and ::.
	Unspecified
	// Reserved is address space that no legitimate destination uses:
	// 240.0.0.0/4, the IETF protocol assignments 192.0.0.0/24, the
	// documentation ranges (192.0.2.0/24, 198.51.100.0/24, 203.0.113.0/24,
	// 2001:db8::/32, 3fff::/20), the benchmarking range 198.18.0.0/15, the
	// IPv6 discard prefix 100::/64, and all IPv6 space outside the global
	// unicast block 2000::/3 that no other class covers.
	Reserved
	// Embedded is an IPv6 form that carries an IPv4 address: IPv4-mapped
	// (::ffff:0:0/96), IPv4-translated (::ffff:0:0:0/96), IPv4-compatible
	// (::/96 other than :: and ::1), NAT64 (64:ff9b::/96 and the local-use
	// 64:ff9b:1::/48), 6to4 (2002::/16) and Teredo (2001::/32). Depending on
	// the host's routes and translators, dialing one may reach the IPv4
	// address inside; see EmbeddedIPv4.
	Embedded
)

// classNames are the lower-case words Class.String returns.
var classNames = [...]string{
	Public:      "public",
	Loopback:    "loopback",
	Private:     "private",
	CGNAT:       "cgnat",
	LinkLocal:   "link-local",
	Metadata:    "metadata",
	Multicast:   "multicast",
	Broadcast:   "broadcast",
	Unspecified: "unspecified",
	Reserved:    "reserved",
	Embedded:    "embedded",
}

// String returns the class as one lower-case word, such as "link-local".
func (c Class) String() string {
	if c >= 0 && int(c) < len(classNames) {
		return classNames[c]
	}
	return "class(" + strconv.Itoa(int(c)) + ")"
}

// phrase describes the class for a reason string: "address X is <phrase>".
func (c Class) phrase() string {
	switch c {
	case Metadata:
		return "a cloud metadata endpoint"
	case CGNAT:
		return "carrier-grade NAT (CGNAT) space"
	case Embedded:
		return "an IPv6 form embedding an IPv4 address"
	}
	return c.String()
}

// code is the egress event code of a refusal for class c: one of the
// never-allowed classes, or private for the others (which need the
// destination's private: true).
func (c Class) code() string {
	switch c {
	case Metadata:
		return result.EgressMetadata
	case LinkLocal:
		return result.EgressLinkLocal
	case Unspecified, Multicast, Broadcast:
		return result.EgressNotUnicast
	}
	return result.EgressPrivate
}

// never reports whether addresses of class c are refused whatever the
// destination's options say. They are either not real destinations
// (unspecified, multicast, broadcast; 0.0.0.0 reaches the host itself) or
// lead to the cloud provider's instance credentials (metadata, and the whole
// link-local range, where providers keep adding new endpoints).
func (c Class) never() bool {
	switch c {
	case Metadata, LinkLocal, Unspecified, Multicast, Broadcast:
		return true
	}
	return false
}

// classRange is one row of a classification table.
type classRange struct {
	p netip.Prefix
	c Class
}

func row(prefix string, c Class) classRange {
	return classRange{netip.MustParsePrefix(prefix), c}
}

// metadataAddrs are the cloud instance metadata endpoints. Reaching one from
// a sandbox would hand the agent the host's cloud credentials, so they are
// never allowed, even for destinations marked private.
var metadataAddrs = []classRange{
	row("169.254.169.254/32", Metadata), // AWS, GCP, Azure, OpenStack, DigitalOcean, Oracle, ...
	row("169.254.170.2/32", Metadata),   // AWS ECS task credentials
	row("169.254.170.23/32", Metadata),  // AWS EKS Pod Identity agent
	row("100.100.100.200/32", Metadata), // Alibaba Cloud
	row("192.0.0.192/32", Metadata),     // Oracle Cloud legacy metadata
	row("168.63.129.16/32", Metadata),   // Azure WireServer (host agent; public-looking address)
	row("fd00:ec2::254/128", Metadata),  // AWS IMDS over IPv6
	row("fd00:ec2::23/128", Metadata),   // AWS EKS Pod Identity agent over IPv6
}

// v4Ranges classifies IPv4 addresses. Order matters: the first row that
// contains an address decides its class.
var v4Ranges = append(v4Metadata(),
	row("0.0.0.0/8", Unspecified),
	row("255.255.255.255/32", Broadcast),
	row("127.0.0.0/8", Loopback),
	row("169.254.0.0/16", LinkLocal),
	row("10.0.0.0/8", Private),
	row("172.16.0.0/12", Private),
	row("192.168.0.0/16", Private),
	row("100.64.0.0/10", CGNAT),
	row("224.0.0.0/4", Multicast),
	row("240.0.0.0/4", Reserved),
	row("192.0.0.0/24", Reserved),
	row("192.0.2.0/24", Reserved),
	row("198.18.0.0/15", Reserved),
	row("198.51.100.0/24", Reserved),
	row("203.0.113.0/24", Reserved),
)

// v6Ranges classifies IPv6 addresses, first match wins. The last three rows
// make everything outside 2000::/3 reserved: IANA has assigned no global
// unicast space there, so nothing legitimate lives at such an address.
var v6Ranges = append(v6Metadata(),
	row("::/128", Unspecified),
	row("::1/128", Loopback),
	row("::ffff:0:0/96", Embedded),
	row("::ffff:0:0:0/96", Embedded),
	row("::/96", Embedded),
	row("64:ff9b::/96", Embedded),
	row("64:ff9b:1::/48", Embedded),
	row("2002::/16", Embedded),
	row("2001::/32", Embedded),
	row("fe80::/10", LinkLocal),
	row("fc00::/7", Private),
	row("fec0::/10", Private),
	row("ff00::/8", Multicast),
	row("100::/64", Reserved),
	row("2001:db8::/32", Reserved),
	row("3fff::/20", Reserved),
	row("::/3", Reserved),
	row("4000::/2", Reserved),
	row("8000::/1", Reserved),
)

func v4Metadata() []classRange { return filterFamily(metadataAddrs, true) }
func v6Metadata() []classRange { return filterFamily(metadataAddrs, false) }

func filterFamily(rows []classRange, v4 bool) []classRange {
	var out []classRange
	for _, r := range rows {
		if r.p.Addr().Is4() == v4 {
			out = append(out, r)
		}
	}
	return out
}

// table returns the classification table for a's family.
func table(a netip.Addr) []classRange {
	if a.Is4() {
		return v4Ranges
	}
	return v6Ranges
}

// Classify returns the class of a. An IPv4-mapped address such as
// ::ffff:10.0.0.1 is Embedded, not Private: the address is classified as
// written, and EmbeddedIPv4 says what it carries. A zone is ignored here
// (Check refuses zoned addresses). The zero Addr is Unspecified.
func Classify(a netip.Addr) Class {
	if !a.IsValid() {
		return Unspecified
	}
	a = a.WithZone("")
	for _, r := range table(a) {
		if r.p.Contains(a) {
			return r.c
		}
	}
	return Public
}
