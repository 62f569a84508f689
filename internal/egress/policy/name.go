package policy

import (
	"fmt"
	"strconv"
	"strings"
)

// maxQuote bounds how much of a value is echoed in errors and reasons, so a
// sandbox sending a huge host cannot flood the audit log through them.
const maxQuote = 128

// quote returns s quoted for a message, shortened when long.
func quote(s string) string {
	if len(s) > maxQuote {
		return strconv.Quote(s[:maxQuote]) + "..."
	}
	return strconv.Quote(s)
}

// metadataNames are host names of cloud instance metadata services. They
// are refused at compile time and at request time, even when a wildcard
// such as *.internal would otherwise cover them, so that a destination list
// cannot hand an agent the host's cloud credentials by name. (Their
// addresses are refused by ipclass too; this is a second, independent
// check that also covers providers whose resolvers answer with addresses
// ipclass does not know.)
var metadataNames = map[string]bool{
	"metadata":                   true, // GCP short name, via the google.internal search domain
	"metadata.google.internal":   true, // GCP
	"metadata.goog":              true, // GCP
	"instance-data":              true, // AWS short name, via the VPC search domain
	"instance-data.ec2.internal": true, // AWS us-east-1
	"metadata.tencentyun.com":    true, // Tencent Cloud
}

// isMetadataName reports whether name (normalized) is a cloud metadata
// name: one listed in metadataNames, or any "metadata.….internal" or
// "instance-data.….internal" name, the pattern providers use in their
// private zones (AWS answers instance-data.<region>.compute.internal).
func isMetadataName(name string) bool {
	if metadataNames[name] {
		return true
	}
	first, _, _ := strings.Cut(name, ".")
	return (first == "metadata" || first == "instance-data") && strings.HasSuffix(name, ".internal")
}

// normalizeName checks host as a host name and returns it in canonical form:
// lower case, without one trailing dot. problem is empty when host is
// valid, and otherwise says what is wrong.
//
// Only ASCII is accepted, and only ASCII is lower-cased: Unicode case
// folding would turn "\u212a" (KELVIN SIGN) into "k", letting a name that
// DNS treats as different match a destination. Labels are 1 to 63 letters,
// digits, '-' or '_' (for service names such as _dmarc), not starting or
// ending with '-'; the whole name is at most 253 bytes. Single-label names
// such as "localhost" are valid.
func normalizeName(host string) (name, problem string) {
	name = strings.TrimSuffix(host, ".")
	if name == "" {
		return "", "host name is empty"
	}
	for i := 0; i < len(name); i++ {
		if name[i] >= 0x80 {
			return "", fmt.Sprintf("host name %s is not ASCII; use its punycode (xn--) form", quote(host))
		}
	}
	if len(name) > 253 {
		return "", fmt.Sprintf("host name %s is %d bytes long; at most 253 are allowed", quote(host), len(name))
	}
	name = strings.ToLower(name)
	for label := range strings.SplitSeq(name, ".") {
		if p := labelProblem(label); p != "" {
			return "", fmt.Sprintf("host name %s %s", quote(host), p)
		}
	}
	return name, ""
}

// labelProblem says what is wrong with one lower-cased label, or "".
func labelProblem(l string) string {
	switch {
	case l == "":
		return "has an empty label; expected labels separated by single dots"
	case len(l) > 63:
		return fmt.Sprintf("has a label of %d bytes; at most 63 are allowed", len(l))
	case l[0] == '-' || l[len(l)-1] == '-':
		return fmt.Sprintf("has label %s starting or ending with '-'", quote(l))
	}
	for i := 0; i < len(l); i++ {
		c := l[i]
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
			return fmt.Sprintf("has %q; labels may hold only letters, digits, '-' and '_'", c)
		}
	}
	return ""
}
