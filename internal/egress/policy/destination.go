package policy

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/airlockhq/airlock/internal/egress/ipclass"
	"github.com/airlockhq/airlock/internal/errdefs"
)

// DefaultPort is the port a destination allows when config names none.
const DefaultPort = 443

// maxHostLen bounds Spec.Host. The longest sensible entry is a 253-byte name
// with a port list; anything far beyond that is a mistake or an attack on
// the parser.
const maxHostLen = 1024

// ErrInvalid is wrapped by every error Compile returns: the entry is not an
// acceptable egress destination. Callers map it to a config error without
// looking at the message.
var ErrInvalid = errdefs.New(errdefs.ErrInvalid, "invalid egress destination")

// SpecError is the error Compile returns. It unwraps to ErrInvalid.
type SpecError struct {
	// Host is Spec.Host as written in config.
	Host string
	// Problem names the offending value, says what is wrong with it and
	// what is expected.
	Problem string
}

// Error returns the entry and the problem with it.
func (e *SpecError) Error() string {
	return "egress destination " + quote(e.Host) + ": " + e.Problem
}

// Unwrap returns ErrInvalid.
func (e *SpecError) Unwrap() error { return ErrInvalid }

// Spec is one egress entry as written in config.
type Spec struct {
	// Host is "host[:ports]", "*.example.com[:ports]", "IP[:ports]",
	// "[IPv6][:ports]", "CIDR[:ports]" (such as "203.0.113.0/24:443") or
	// "[IPv6 CIDR][:ports]" (such as "[2001:db8::/32]:443"). ports is one
	// port or a comma-separated list ("443,8443"). A bare IPv6 address or
	// CIDR without brackets is accepted but cannot carry ports.
	Host string
	// Ports is the optional `ports:` option, an alternative to giving
	// ports in Host.
	Ports []int
	// Addresses is the optional `addresses:` option: pin a host name to
	// these IP addresses instead of resolving it (like curl --resolve).
	// Only for host names, not wildcards or IP destinations.
	Addresses []string
	// Private is the `private: true` option: the destination may be or
	// resolve to loopback, private, CGNAT, reserved or IPv4-embedding
	// addresses. Cloud metadata and link-local addresses stay refused.
	Private bool
	// Opaque is the `opaque: true` option: the connection may carry any
	// protocol, unchecked (SSH, a database, a server that speaks first).
	// Without it the gateway reads what the client sends first and
	// refuses a TLS server name that is not the destination's.
	Opaque bool
}

// Destination is a compiled egress entry. Build one with Compile; a
// Destination is a plain value and is not modified after that.
type Destination struct {
	// Name is the host name, lower case, without a trailing dot; for a
	// wildcard, the suffix after "*.". It is "" for IP destinations.
	Name string
	// Wildcard makes the destination match strict subdomains of Name,
	// never Name itself: *.example.com covers a.example.com and
	// a.b.example.com, not example.com.
	Wildcard bool
	// Prefix is the range of an IP destination (a single address is a /32
	// or /128). It is the zero Prefix for names.
	Prefix netip.Prefix
	// Ports are the allowed ports, sorted and unique.
	Ports []uint16
	// Addresses, when not nil, are the addresses to dial for Name instead
	// of resolving it.
	Addresses []netip.Addr
	// Private is Spec.Private.
	Private bool
	// Opaque is Spec.Opaque.
	Opaque bool
}

// ParseDestination compiles a destination written as Spec.Host alone, with
// no options: Compile(Spec{Host: s}).
func ParseDestination(s string) (Destination, error) {
	return Compile(Spec{Host: s})
}

// target is Spec.Host taken apart.
type target struct {
	host     string       // a host name or IP literal, when !isIP
	prefix   netip.Prefix // the range, when isIP
	isIP     bool         // the host was bracketed, a CIDR or bare IPv6
	ports    string       // text after the port separator
	hasPorts bool
}

// Compile validates s and returns the destination it describes. Errors are
// *SpecError values naming the offending part of s.
//
// Compile refuses, whatever s.Private says, any destination that could
// reach a cloud metadata service or is not a real destination: metadata
// names (see isMetadataName), and IP destinations that contain a metadata,
// link-local, unspecified, multicast or broadcast address in any form,
// including IPv6 forms embedding one (see ipclass.CheckPrefix). An IP
// destination or pinned address in another non-public range needs
// s.Private. A host that looks numeric is read as the address a C dialer
// would make of it ("2852039166:443" is 169.254.169.254, and refused), or
// refused when it is not a valid address.
func Compile(s Spec) (Destination, error) {
	d, problem := compile(s)
	if problem != "" {
		return Destination{}, &SpecError{Host: s.Host, Problem: problem}
	}
	return d, nil
}

func compile(s Spec) (Destination, string) {
	if len(s.Host) > maxHostLen {
		return Destination{}, fmt.Sprintf("is %d bytes long; at most %d are allowed", len(s.Host), maxHostLen)
	}
	t, problem := split(s.Host)
	if problem != "" {
		return Destination{}, problem
	}
	var d Destination
	d.Private = s.Private
	d.Opaque = s.Opaque
	if d.Ports, problem = compilePorts(t, s.Ports); problem != "" {
		return Destination{}, problem
	}
	switch {
	case t.isIP:
		d.Prefix = t.prefix
	case strings.Contains(t.host, "*"):
		if problem = d.setWildcard(t.host); problem != "" {
			return Destination{}, problem
		}
	default:
		a, ok, err := ipclass.ParseHost(t.host)
		if err != nil {
			return Destination{}, err.Error() + "; expected a host name or an IP address"
		}
		if ok {
			d.Prefix = netip.PrefixFrom(a, a.BitLen())
		} else if problem = d.setName(t.host); problem != "" {
			return Destination{}, problem
		}
	}
	if d.Prefix.IsValid() {
		if problem = d.checkPrefix(len(s.Addresses) > 0); problem != "" {
			return Destination{}, problem
		}
		return d, ""
	}
	if len(s.Addresses) > 0 {
		if d.Wildcard {
			// One pinned address set for names nobody listed would be a
			// surprise; pinning is for a name the operator knows.
			return Destination{}, "addresses cannot be pinned for a wildcard; list each host name as its own destination"
		}
		if d.Addresses, problem = compileAddresses(s.Addresses, s.Private); problem != "" {
			return Destination{}, problem
		}
	}
	return d, ""
}

// split takes Spec.Host apart into host and ports. IP ranges and bracketed
// or bare IPv6 addresses are parsed here, since their colons are not port
// separators.
func split(s string) (target, string) {
	var t target
	if s == "" {
		return t, "host is empty; expected a host name, *.domain, an IP address or a CIDR, optionally with :port"
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c <= ' ' || c == 0x7f {
			return t, "contains white space or control characters"
		}
	}
	switch {
	case s[0] == '[':
		end := strings.IndexByte(s, ']')
		if end < 0 {
			return t, "has '[' without ']'; expected an IPv6 address in brackets, as in [2001:db8::1]:443"
		}
		inner, rest := s[1:end], s[end+1:]
		if rest != "" {
			if rest[0] != ':' {
				return t, fmt.Sprintf("has %s after ']'; expected :port", quote(rest))
			}
			t.ports, t.hasPorts = rest[1:], true
		}
		if strings.IndexByte(inner, '/') >= 0 {
			p, err := netip.ParsePrefix(inner)
			if err != nil || !p.Addr().Is6() {
				return t, fmt.Sprintf("%s is not a valid IPv6 CIDR; expected one such as [2001:db8::/32]:443", quote(inner))
			}
			t.prefix = p
		} else {
			a, _, err := ipclass.ParseHost("[" + inner + "]")
			if err != nil {
				return t, err.Error() + "; brackets hold an IPv6 address, as in [2001:db8::1]:443"
			}
			t.prefix = netip.PrefixFrom(a, 128)
		}
		t.isIP = true
	case strings.IndexByte(s, '/') >= 0:
		// A CIDR: any colon after the slash starts the ports, since the
		// prefix length cannot hold one.
		slash := strings.IndexByte(s, '/')
		text := s
		if c := strings.IndexByte(s[slash:], ':'); c >= 0 {
			text, t.ports, t.hasPorts = s[:slash+c], s[slash+c+1:], true
		}
		p, err := netip.ParsePrefix(text)
		if err != nil {
			return t, fmt.Sprintf("%s is not a valid CIDR; expected one such as 203.0.113.0/24:443 or [2001:db8::/32]:443", quote(text))
		}
		t.prefix, t.isIP = p, true
	case strings.Count(s, ":") >= 2:
		// A bare IPv6 address: its colons are not a port separator.
		a, _, err := ipclass.ParseHost(s)
		if err != nil {
			return t, err.Error() + "; write an IPv6 address with a port as [2001:db8::1]:443"
		}
		t.prefix, t.isIP = netip.PrefixFrom(a, 128), true
	default:
		t.host = s
		if i := strings.LastIndexByte(s, ':'); i >= 0 {
			t.host, t.ports, t.hasPorts = s[:i], s[i+1:], true
		}
		if t.host == "" {
			return t, "host is empty before the port; expected host:port"
		}
	}
	return t, ""
}

// compilePorts returns the sorted, unique ports of a destination.
func compilePorts(t target, ports []int) ([]uint16, string) {
	var out []uint16
	switch {
	case t.hasPorts && len(ports) > 0:
		return nil, "give the port in host or in ports, not both"
	case t.hasPorts:
		if t.ports == "" {
			return nil, "has ':' but no port; expected a port from 1 to 65535 after it"
		}
		for text := range strings.SplitSeq(t.ports, ",") {
			p, problem := parsePort(text)
			if problem != "" {
				return nil, problem
			}
			out = append(out, p)
		}
	case len(ports) > 0:
		for _, p := range ports {
			if p < 1 || p > 65535 {
				return nil, fmt.Sprintf("port %d is out of range; expected 1 to 65535", p)
			}
			out = append(out, uint16(p))
		}
	default:
		return []uint16{DefaultPort}, ""
	}
	slices.Sort(out)
	return slices.Compact(out), ""
}

// parsePort parses one port written in Spec.Host: a decimal number from 1
// to 65535 without a sign or leading zeros (so "0443" is not silently read
// as 443, or as octal 291).
func parsePort(s string) (uint16, string) {
	bad := fmt.Sprintf("port %s is not valid; expected a decimal number from 1 to 65535", quote(s))
	if s == "" || len(s) > 5 || s[0] == '0' {
		return 0, bad
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, bad
		}
	}
	n, err := strconv.Atoi(s)
	if err != nil || n > 65535 {
		return 0, bad
	}
	return uint16(n), ""
}

// setWildcard fills d from a host containing '*'.
func (d *Destination) setWildcard(host string) string {
	suffix, ok := strings.CutPrefix(host, "*.")
	if !ok || strings.Contains(suffix, "*") {
		return fmt.Sprintf("wildcard %s is not valid; '*' is only allowed as a whole first label, as in *.example.com", quote(host))
	}
	name, problem := normalizeName(suffix)
	if problem != "" {
		return problem
	}
	if _, isIP, err := ipclass.ParseHost(name); isIP || err != nil {
		return fmt.Sprintf("wildcard %s is over an IP address; wildcards are for host names, as in *.example.com", quote(host))
	}
	if !strings.Contains(name, ".") {
		// *.com would open a whole top-level domain.
		return fmt.Sprintf("wildcard %s covers a whole top-level domain; expected at least two labels after '*.', as in *.example.com", quote(host))
	}
	d.Name, d.Wildcard = name, true
	return ""
}

// setName fills d from a host name.
func (d *Destination) setName(host string) string {
	name, problem := normalizeName(host)
	if problem != "" {
		return problem
	}
	if isMetadataName(name) {
		return fmt.Sprintf("%s is a cloud metadata name (never allowed)", quote(name))
	}
	d.Name = name
	return ""
}

// checkPrefix validates an IP destination.
func (d *Destination) checkPrefix(hasAddresses bool) string {
	p := d.Prefix
	if hasAddresses {
		return fmt.Sprintf("addresses only apply to host names; %s is an IP destination, dialed as written", p)
	}
	if m := p.Masked(); m != p {
		// Silently masking 10.1.2.3/8 to 10.0.0.0/8 might open far more
		// than the author meant; make them say it.
		return fmt.Sprintf("CIDR %s has bits set after the prefix length; expected %s", p, m)
	}
	return rangeProblem(func(private bool) ipclass.Decision { return ipclass.CheckPrefix(p, private) }, d.Private)
}

// compileAddresses parses the pinned addresses of a host name destination.
func compileAddresses(raw []string, private bool) ([]netip.Addr, string) {
	var out []netip.Addr
	for _, s := range raw {
		a, ok, err := ipclass.ParseHost(s)
		if err != nil {
			return nil, "addresses: " + err.Error()
		}
		if !ok {
			return nil, fmt.Sprintf("addresses: %s is not an IP address; expected addresses such as 203.0.113.7 or 2001:db8::7", quote(s))
		}
		if problem := rangeProblem(func(private bool) ipclass.Decision { return ipclass.Check(a, private) }, private); problem != "" {
			return nil, "addresses: " + problem
		}
		if !slices.Contains(out, a) {
			out = append(out, a)
		}
	}
	return out, ""
}

// rangeProblem turns an ipclass decision into a Compile problem, telling
// the author to set private: true when that would help, and only then.
func rangeProblem(check func(private bool) ipclass.Decision, private bool) string {
	d := check(private)
	if d.Allow {
		return ""
	}
	if !private && check(true).Allow {
		return d.Reason + PrivateHint
	}
	return d.Reason
}

// PrivateHint ends the reason of a refusal that private: true would have
// allowed (never one of metadata or link-local, which nothing allows), in
// the config's errors and in the decisions made at run time alike.
const PrivateHint = "; set private: true to allow it (--allow-private on the command line)"

// String returns the destination in the canonical form of Spec.Host, such
// as "api.example.com:443", "*.example.com:443,8443", "203.0.113.0/24:443"
// or "[2001:db8::1]:443". Addresses and Private are not shown:
// Compile(Spec{Host: d.String(), Addresses: ..., Private: d.Private})
// rebuilds d.
func (d Destination) String() string {
	var b strings.Builder
	switch p := d.Prefix; {
	case p.IsValid() && p.Addr().Is6():
		b.WriteByte('[')
		if p.IsSingleIP() {
			b.WriteString(p.Addr().String())
		} else {
			b.WriteString(p.String())
		}
		b.WriteByte(']')
	case p.IsValid() && p.IsSingleIP():
		b.WriteString(p.Addr().String())
	case p.IsValid():
		b.WriteString(p.String())
	case d.Wildcard:
		b.WriteString("*." + d.Name)
	default:
		b.WriteString(d.Name)
	}
	if len(d.Ports) > 0 {
		b.WriteByte(':')
		b.WriteString(portList(d.Ports))
	}
	return b.String()
}

// portList formats ports as "443,8443".
func portList(ports []uint16) string {
	var b strings.Builder
	for i, p := range ports {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(int(p)))
	}
	return b.String()
}

// AllowsPort reports whether the destination allows port p.
func (d Destination) AllowsPort(p uint16) bool {
	return slices.Contains(d.Ports, p)
}

// Equal reports whether d and o are the same destination.
func (d Destination) Equal(o Destination) bool {
	return d.Name == o.Name && d.Wildcard == o.Wildcard && d.Prefix == o.Prefix &&
		d.Private == o.Private && slices.Equal(d.Ports, o.Ports) && slices.Equal(d.Addresses, o.Addresses)
}

// coversName reports whether the name destination d covers name, which
// must be normalized. A wildcard covers strict subdomains only, and the
// label boundary is checked so *.example.com does not cover
// evilexample.com.
func (d *Destination) coversName(name string) bool {
	if d.Name == "" || d.Prefix.IsValid() {
		return false
	}
	if !d.Wildcard {
		return name == d.Name
	}
	n := len(name) - len(d.Name)
	return n > 1 && name[n-1] == '.' && name[n:] == d.Name
}

// clone returns d with its own copies of the slices.
func (d Destination) clone() Destination {
	d.Ports = slices.Clone(d.Ports)
	d.Addresses = slices.Clone(d.Addresses)
	return d
}
