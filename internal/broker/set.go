package broker

import (
	"fmt"
	"net/http"
	"slices"

	"github.com/airlockhq/airlock/internal/broker/brokerspec"
)

// MaxSet bounds the headers set on one service's calls, and MaxSetValue
// each one's value.
const (
	MaxSet      = 16
	MaxSetValue = 1 << 10
)

// CheckSet says why header name with value may not be set on every call
// to service s (brokerspec.Service.Set), or nil. What may be set is what
// the sandbox could send itself: a header some operation of s forwards,
// never a credential or session (the operator's credential is the only
// one that leaves), nor one that describes the connection, the body or
// the client.
func CheckSet(s *brokerspec.Service, name, value string) error {
	k := http.CanonicalHeaderKey(name)
	switch {
	case !token(name):
		return fmt.Errorf("%q is not a header name", shorten(name))
	case !fieldValue(value) || len(value) > MaxSetValue:
		return fmt.Errorf("header %s: the value is not a header value of at most %d bytes", k, MaxSetValue)
	case credentialLike(k) || k == s.Credential.Header:
		return fmt.Errorf("header %s carries a credential or session: airlock attaches the operator's credential for service %q on the host, and no other credential goes with its calls", k, s.Name)
	case isHop(k) || forwardedHeader(k) || k == "Content-Type" || k == "Content-Length" || k == "Content-Encoding":
		return fmt.Errorf("header %s describes the connection, the client or the body, which airlock sets itself", k)
	}
	for _, op := range s.Operations {
		if slices.Contains(baseHeaders, k) || slices.Contains(op.Headers, k) {
			return nil
		}
	}
	return fmt.Errorf("header %s: no operation of service %q forwards it; only a header the operator's operations let through (their headers:) may be set", k, s.Name)
}

// token reports whether s is an HTTP token (RFC 9110 5.6.2), as a header
// name must be.
func token(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range []byte(s) {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case c < 0x80 && c > ' ' && !isSeparator(c):
		default:
			return false
		}
	}
	return true
}

func isSeparator(c byte) bool {
	for _, s := range []byte(`"(),/:;<=>?@[\]{}`) {
		if c == s {
			return true
		}
	}
	return false
}

// fieldValue reports whether s may be a header's value: no control
// character but tab.
func fieldValue(s string) bool {
	for _, c := range []byte(s) {
		if c < ' ' && c != '\t' || c == 0x7f {
			return false
		}
	}
	return true
}
