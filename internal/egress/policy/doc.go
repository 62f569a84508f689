// Package policy holds airlock's egress destinations, compiled from config,
// and decides whether a sandbox may connect to a requested host and port.
//
// A sandbox has default-deny egress: it may only reach the destinations its
// config names. A destination is a host name ("api.example.com"), a wildcard
// over the subdomains of one ("*.example.com"), an IP address or a CIDR
// range, each with a list of ports (443 by default). [Compile] validates a
// config entry and refuses anything that could never be safe, whatever its
// options say: cloud metadata endpoints and names, link-local ranges, and
// ranges containing them. [Policy.Match] judges a request, treating an IP
// literal in any spelling a C dialer accepts ("2852039166", "0x7f.1") as the
// address it is, and [Policy.Lookup] tells airlock's DNS resolver which
// names it may resolve.
//
// Matching a name is only half of the check: airlock also checks every
// address it is about to dial with ipclass.Check, using the destination's
// Private option, so a permitted name that resolves to 169.254.169.254 is
// still refused.
package policy
