// Package route normalises the paths of requests that confined code sends to
// the credential broker, and matches them against the operations a policy
// declares.
//
// The request path is wholly attacker-controlled, and the broker forwards a
// matching request to an upstream with real authority attached. Any
// disagreement between how this package reads a path and how the upstream (or
// a proxy, CDN or framework in front of it) reads the same bytes is a way to
// reach an operation the policy never allowed: "/repos/a/b/..%2F..%2Fadmin"
// read here as three harmless segments may be "/admin" there. So Normalize is
// deliberately narrow. It refuses every spelling that some server decodes,
// folds or splits differently (dot segments in any encoding, encoded slashes
// and backslashes, double encoding, path parameters, control bytes, invalid
// UTF-8) and returns the decoded segments. The broker matches those with
// Template.Match and sends upstream only Join(segs), the canonical
// re-encoding, never the bytes it received.
package route

import (
	"errors"
	"net/url"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Limits on a request path. They bound the work one request can cause and
// the size of what reaches the audit log and the upstream.
const (
	// MaxPathLen caps the raw path and also its canonical form, Join(segs),
	// so that what the broker forwards is bounded too.
	MaxPathLen = 2048
	// MaxSegments caps the number of segments in a path.
	MaxSegments = 64
	// MaxSegmentLen caps one segment, in bytes, after percent-decoding.
	MaxSegmentLen = 256
)

// maxEcho is how many bytes of a refused path a PathError keeps. An error
// ends up in a response body and in the audit log; the caller controls the
// path, so echoing all of it would let it flood both.
const maxEcho = 128

// ErrSuspicious is the class of every refusal by Normalize. The broker maps
// it to one status at its boundary; callers test it with errors.Is.
var ErrSuspicious = errors.New("suspicious path")

// PathError says what is wrong with a path, for the response body and the
// audit log. It unwraps to ErrSuspicious.
type PathError struct {
	// Path is at most the first 128 bytes of the refused path, never more,
	// so that whoever logs or returns this field cannot be made to echo an
	// attacker's kilobytes.
	Path string
	// Truncated reports that Path was cut short.
	Truncated bool
	// Problem says what is wrong in fixed words written for the caller and
	// the audit log; it never contains input bytes.
	Problem string
}

// Error quotes the path with strconv.Quote, so that control bytes and
// invalid UTF-8 in it cannot forge log lines, and cuts it at 128 bytes even
// if the PathError was built by hand.
func (e *PathError) Error() string {
	p, cut := e.Path, e.Truncated
	if len(p) > maxEcho {
		p, cut = p[:maxEcho], true
	}
	s := "suspicious path " + strconv.Quote(p)
	if cut {
		s += "..."
	}
	return s + ": " + e.Problem
}

// Unwrap returns ErrSuspicious.
func (e *PathError) Unwrap() error { return ErrSuspicious }

func refuse(raw, problem string) error {
	e := &PathError{Path: raw, Problem: problem}
	if len(raw) > maxEcho {
		e.Path, e.Truncated = raw[:maxEcho], true
	}
	return e
}

// Normalize checks a request path exactly as it arrived on the wire and
// returns its percent-decoded segments. "/" alone gives zero segments.
//
// raw must be the request-target from the request line up to (not
// including) the first '?', still percent-encoded: in net/http, the part of
// r.RequestURI before '?'. r.URL.Path is already decoded and
// r.URL.EscapedPath may be re-encoded by net/url, so either would hide
// exactly the spellings this function exists to refuse.
//
// Every refusal is a *PathError wrapping ErrSuspicious. The checks are
// stricter than RFC 3986 on purpose: a path is accepted only if no
// reasonable server could split or decode it differently from the segments
// returned.
func Normalize(raw string) ([]string, error) {
	switch {
	case raw == "":
		return nil, refuse(raw, "empty path")
	case len(raw) > MaxPathLen:
		// Checked before any other work so a huge path costs nothing.
		return nil, refuse(raw, "path longer than 2048 bytes")
	case raw == "*":
		// OPTIONS * addresses the server, not a resource; no operation
		// can be meant by it.
		return nil, refuse(raw, "asterisk-form request target")
	case strings.Contains(raw, "://"):
		// Absolute-form ("http://host/...") names its own host; a proxy
		// or framework may route on that host instead of ours. Also stops
		// "/redirect/http://evil" being rebuilt into a URL upstream.
		return nil, refuse(raw, "absolute-form request target (contains ://)")
	case strings.HasPrefix(raw, "//"):
		// Scheme-relative: many URL parsers read "//evil/x" as host
		// "evil", path "/x".
		return nil, refuse(raw, "scheme-relative request target (starts with //)")
	case raw[0] != '/':
		// Authority-form and anything else that is not origin-form.
		return nil, refuse(raw, "does not start with /")
	case raw == "/":
		return []string{}, nil
	}

	n := strings.Count(raw, "/") // one per segment, since raw starts with '/'
	if n > MaxSegments {
		return nil, refuse(raw, "more than 64 segments")
	}
	segs := make([]string, 0, n)
	canonical := 0
	rest := raw[1:]
	for more := true; more; {
		var seg string
		seg, rest, more = strings.Cut(rest, "/")
		if seg == "" {
			// Servers disagree on "a//b": some merge the slashes, some keep
			// an empty segment, some route on the first one. "/a/" and
			// "/a" are different resources to some and the same to others.
			if !more {
				return nil, refuse(raw, "trailing slash")
			}
			return nil, refuse(raw, "empty segment (//)")
		}
		dec, problem := decodeSegment(seg)
		if problem != "" {
			return nil, refuse(raw, problem)
		}
		segs = append(segs, dec)
		canonical += 1 + len(url.PathEscape(dec))
	}
	// Join may encode bytes that arrived raw ("!" becomes "%21"), so the
	// canonical form can be up to three times longer than raw. Capping it
	// too keeps the forwarded path bounded and keeps Normalize(Join(segs))
	// from failing for a path Normalize accepted.
	if canonical > MaxPathLen {
		return nil, refuse(raw, "canonical form longer than 2048 bytes")
	}
	return segs, nil
}

// decodeSegment checks one raw segment (no '/' in it, not empty) and
// percent-decodes it. It returns a non-empty problem if the segment is
// refused.
func decodeSegment(s string) (dec, problem string) {
	var buf []byte // nil until the first escape: most segments need no copy
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c < 0x20 || c == 0x7f:
			// CR/LF split headers and log lines; NUL truncates strings in
			// C-based servers and in file paths.
			return "", "control byte"
		case c == ' ':
			// A raw space ends the request-target in HTTP/1; one inside it
			// means the request line was mangled or smuggled.
			return "", "raw space"
		case c >= 0x80:
			// A conforming client percent-encodes non-ASCII. Raw high bytes
			// are read as Latin-1 by some servers and UTF-8 by others.
			return "", "raw byte >= 0x80 (must be percent-encoded)"
		case c == '\\':
			// Windows servers, IIS and some frameworks treat '\' as '/',
			// which would turn one segment into several ("..\admin").
			return "", "backslash"
		case c == ';':
			// Path parameters: Tomcat, Spring and others strip ";..." from a
			// segment before routing, so "/admin;x" is "/admin" to them but
			// a different segment to us.
			return "", "semicolon (path parameter)"
		case c == '?':
			// The caller must split the query off first; a '?' here means it
			// did not, and we would be matching part of the query.
			return "", "raw ? (query not split off before Normalize)"
		case c == '#':
			// A fragment is never sent on the wire; one here is a mangled or
			// hostile request line.
			return "", "raw # (fragment in request target)"
		case c == '%':
			if i+2 >= len(s) {
				return "", "malformed percent-encoding (% not followed by two hex digits)"
			}
			hi, ok1 := unhex(s[i+1])
			lo, ok2 := unhex(s[i+2])
			if !ok1 || !ok2 {
				// Lenient decoders pass "%zz" through, strict ones fail,
				// IIS reads "%u002e": all different answers.
				return "", "malformed percent-encoding (% not followed by two hex digits)"
			}
			b := hi<<4 | lo
			switch {
			case b == '/':
				// Decoded by the upstream or a proxy, it splits the segment:
				// "a%2F..%2Fadmin" becomes "a/../admin".
				return "", "encoded slash (%2F)"
			case b == '\\':
				// Same as %2F for servers that treat '\' as '/'.
				return "", "encoded backslash (%5C)"
			case b == '%':
				// "%252F" is "%2F" after one decode and "/" after two;
				// whoever decodes twice sees a different path.
				return "", "encoded percent (%25, double encoding)"
			case b < 0x20 || b == 0x7f:
				// Header and log injection, NUL truncation, once decoded.
				return "", "encoded control byte"
			case b == ';':
				// A server that decodes before stripping path parameters
				// sees a ';' we never saw as special.
				return "", "encoded semicolon (%3B)"
			case b == '?':
				// Re-sent unencoded by a careless hop it starts a query and
				// cuts the path short.
				return "", "encoded ? (%3F)"
			case b == '#':
				// Re-sent unencoded it starts a fragment and cuts the path.
				return "", "encoded # (%23)"
			}
			if buf == nil {
				buf = make([]byte, 0, len(s))
				buf = append(buf, s[:i]...)
			}
			buf = append(buf, b)
			i += 2
			continue
		}
		if buf != nil {
			buf = append(buf, c)
		}
	}
	dec = s
	if buf != nil {
		dec = string(buf)
	}
	if len(dec) > MaxSegmentLen {
		return "", "segment longer than 256 bytes"
	}
	if strings.Trim(dec, ".") == "" {
		// "." and ".." in any spelling ("%2e", ".%2E", ...) climb the
		// path once some hop resolves them: "/repos/a/b/../../admin".
		// Longer runs of dots are refused too, because Windows path
		// handling strips trailing dots and no API needs such a segment.
		return "", "dot segment (., .. or only dots, in any encoding)"
	}
	if !utf8.ValidString(dec) {
		// Overlong forms ("%C0%AE" is '.', "%C0%AF" is '/'), surrogates
		// and stray bytes are decoded to ASCII by some lenient decoders,
		// bringing back the dots and slashes refused above.
		return "", "invalid UTF-8 after percent-decoding"
	}
	for _, r := range dec {
		if unicode.IsControl(r) {
			// C1 controls such as U+0085 (NEL) end lines in some logging
			// and header code, as CR and LF do.
			return "", "control character after percent-decoding"
		}
	}
	return dec, ""
}

func unhex(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// Join re-encodes segments into the canonical path the broker forwards: "/"
// followed by each segment escaped with url.PathEscape, separated by "/".
// Zero segments give "/". For any segs returned by Normalize,
// Normalize(Join(segs)) returns segs again; for other input (an empty
// segment, ".", "..") Join does not check, and its result may not be a path
// Normalize accepts.
func Join(segs []string) string {
	if len(segs) == 0 {
		return "/"
	}
	var b strings.Builder
	for _, s := range segs {
		b.WriteByte('/')
		b.WriteString(url.PathEscape(s))
	}
	return b.String()
}
