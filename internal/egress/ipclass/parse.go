package ipclass

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// maxQuote bounds how much of an input is echoed back in an error, so that a
// sandbox sending a huge host cannot flood the logs through our errors.
const maxQuote = 128

// quote returns s quoted for an error message, shortened when long.
func quote(s string) string {
	if len(s) > maxQuote {
		return strconv.Quote(s[:maxQuote]) + "..."
	}
	return strconv.Quote(s)
}

// ParseHost parses s as an IP literal in every spelling a C dialer
// (inet_aton(3), getaddrinfo(3)) accepts. It returns ok=false and no error
// when s is not an IP literal, that is when s is to be treated as a host
// name; ParseHost does not check host name syntax, callers must.
//
// The point is to close the gap between what airlock thinks a host is and
// what a resolver or dialer would make of it: "2852039166", "0xA9FEA9FE" and
// "0251.0376.0251.0376" all reach 169.254.169.254, and must be judged as that
// address, never as names to look up or to match against name rules.
//
// Accepted forms:
//
//   - IPv6, bracketed ("[::1]") or not ("::1"), as netip.ParseAddr reads it.
//     Brackets are for IPv6 only. A zone ("fe80::1%eth0", "[fe80::1%25eth0]")
//     is an error: scoped addresses are never valid destinations.
//   - IPv4 in inet_aton form, with at most one trailing dot (stripped): one
//     to four dot-separated parts, each decimal, hexadecimal ("0x" or "0X"
//     prefix) or octal (leading "0"). All parts but the last are one byte;
//     the last fills the remaining bytes, so "a" is 32 bits, "a.b" is 8+24,
//     "a.b.c" is 8+8+16 and "a.b.c.d" is 8+8+8+8. "127.1" is 127.0.0.1, "0"
//     is 0.0.0.0, and "017700000001" is 127.0.0.1.
//
// The numeric-looking rule: after stripping one trailing dot, s is taken
// for an IPv4 attempt when every dot-separated label is either empty, or
// starts with a digit and consists only of decimal digits, or is "0x"/"0X"
// followed by zero or more hex digits. Such a string must then parse as
// above, or ParseHost returns an error: "1.2.3.4.5", "256.1.1.1", "0x",
// "08.1.1.1" (8 is not an octal digit), "4294967296" and "1..2" are errors,
// not host names, because some resolver somewhere might still read them as
// numbers, and a name that is not a valid address is useless anyway. Labels
// with any other letter keep a string a name: "example.com", "0day.example",
// "deadbeef" (no 0x prefix) and "1e100.net" are names. A string containing
// ':' or starting with '[' is always an IPv6 attempt. An empty string, and
// one with white space or control characters (inet_aton stops reading at
// white space, so "127.0.0.1 x" would be 127.0.0.1 to it), is an error.
func ParseHost(s string) (a netip.Addr, ok bool, err error) {
	if s == "" {
		return netip.Addr{}, false, fmt.Errorf("empty host")
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c <= ' ' || c == 0x7f {
			return netip.Addr{}, false, fmt.Errorf("host %s contains white space or control characters", quote(s))
		}
	}
	if s[0] == '[' {
		if s[len(s)-1] != ']' {
			return netip.Addr{}, false, fmt.Errorf("host %s: '[' without a closing ']' at the end", quote(s))
		}
		return parseIPv6(s[1:len(s)-1], s)
	}
	if strings.IndexByte(s, ':') >= 0 {
		return parseIPv6(s, s)
	}
	t := strings.TrimSuffix(s, ".")
	if t == "" {
		return netip.Addr{}, false, fmt.Errorf("host %s is empty", quote(s))
	}
	if !numericLooking(t) {
		return netip.Addr{}, false, nil
	}
	a, err = parseIPv4(t)
	if err != nil {
		return netip.Addr{}, false, fmt.Errorf("host %s looks like an IPv4 address but is not a valid one: %v", quote(s), err)
	}
	return a, true, nil
}

// parseIPv6 parses the IPv6 literal in, taken from host.
func parseIPv6(in, host string) (netip.Addr, bool, error) {
	if strings.IndexByte(in, '%') >= 0 {
		return netip.Addr{}, false, fmt.Errorf("host %s has an IPv6 zone; scoped addresses are not allowed", quote(host))
	}
	a, err := netip.ParseAddr(in)
	if err != nil || !a.Is6() {
		return netip.Addr{}, false, fmt.Errorf("host %s is not a valid IPv6 address", quote(host))
	}
	return a, true, nil
}

// numericLooking implements the rule in ParseHost's comment.
func numericLooking(t string) bool {
	for label := range strings.SplitSeq(t, ".") {
		if label != "" && !numericLabel(label) {
			return false
		}
	}
	return true
}

func numericLabel(l string) bool {
	if !isDigit(l[0]) {
		return false
	}
	if len(l) >= 2 && l[0] == '0' && (l[1] == 'x' || l[1] == 'X') {
		for i := 2; i < len(l); i++ {
			if !isHex(l[i]) {
				return false
			}
		}
		return true
	}
	for i := 1; i < len(l); i++ {
		if !isDigit(l[i]) {
			return false
		}
	}
	return true
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

func isHex(c byte) bool {
	return isDigit(c) || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// parseIPv4 parses t in inet_aton form (see ParseHost).
func parseIPv4(t string) (netip.Addr, error) {
	if n := strings.Count(t, ".") + 1; n > 4 {
		return netip.Addr{}, fmt.Errorf("%d parts, at most 4 allowed", n)
	}
	parts := strings.Split(t, ".")
	var v uint32
	for i, p := range parts {
		n, err := parsePart(p)
		if err != nil {
			return netip.Addr{}, err
		}
		last := i == len(parts)-1
		bits := 8
		if last {
			bits = 32 - 8*i
		}
		if limit := uint64(1)<<bits - 1; n > limit {
			return netip.Addr{}, fmt.Errorf("part %s is more than %d", quote(p), limit)
		}
		if last {
			v |= uint32(n)
		} else {
			v |= uint32(n) << (24 - 8*i)
		}
	}
	return v4(v), nil
}

// parsePart parses one inet_aton part: decimal, 0x-prefixed hexadecimal, or
// octal with a leading zero. Values above 32 bits are errors.
func parsePart(p string) (uint64, error) {
	if p == "" {
		return 0, fmt.Errorf("empty part")
	}
	base, digits := uint64(10), p
	switch {
	case len(p) >= 2 && p[0] == '0' && (p[1] == 'x' || p[1] == 'X'):
		base, digits = 16, p[2:]
		if digits == "" {
			return 0, fmt.Errorf("part %s has no hex digits after 0x", quote(p))
		}
	case len(p) >= 2 && p[0] == '0':
		base, digits = 8, p[1:]
	}
	var n uint64
	for i := 0; i < len(digits); i++ {
		d, ok := digitValue(digits[i])
		if !ok || d >= base {
			return 0, fmt.Errorf("part %s has %q, not a base-%d digit", quote(p), digits[i], base)
		}
		n = n*base + d
		if n > 0xffffffff {
			return 0, fmt.Errorf("part %s is too large", quote(p))
		}
	}
	return n, nil
}

func digitValue(c byte) (uint64, bool) {
	switch {
	case '0' <= c && c <= '9':
		return uint64(c - '0'), true
	case 'a' <= c && c <= 'f':
		return uint64(c-'a') + 10, true
	case 'A' <= c && c <= 'F':
		return uint64(c-'A') + 10, true
	}
	return 0, false
}
