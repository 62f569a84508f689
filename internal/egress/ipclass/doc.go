// Package ipclass classifies IP addresses for airlock's egress policy and
// parses IP literals the way a C dialer would.
//
// A sandbox has default-deny egress: airlock, on the host, resolves and dials
// every outbound connection itself, after checking the address it is about to
// dial. This package answers the two questions that check needs:
//
//   - What kind of address is this? [Classify] sorts an address into a
//     [Class] (public, private, loopback, link-local, cloud metadata, ...)
//     without unmapping or otherwise rewriting it, and [EmbeddedIPv4]
//     reports the IPv4 address hidden inside IPv6 transition forms such as
//     ::ffff:169.254.169.254, 64:ff9b::a9fe:a9fe or 2002:a9fe:a9fe::.
//   - May airlock dial it? [Check] and [CheckPrefix] return a [Decision]
//     whose reason goes to the audit log. Cloud metadata endpoints,
//     link-local, unspecified, multicast and broadcast addresses are never
//     allowed, in any spelling; the other non-public classes need the
//     destination's `private: true` option.
//
// [ParseHost] turns a host string into an address when it is an IP literal in
// any spelling inet_aton(3) or getaddrinfo(3) accept ("2852039166",
// "0xA9FEA9FE", "0251.0376.0251.0376", "127.1", "[::1]"), so that a request
// for such a host is judged as the address it really is instead of being
// taken for a host name. Strings that look numeric but are not valid
// addresses are errors, never host names.
//
// Everything here is pure computation on values; it is safe for concurrent
// use and never panics on any input.
package ipclass
