package route

import (
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// ErrInvalidTemplate is the class of every error from ParseTemplate and
// ParseOperation: the policy, not the request, is wrong.
var ErrInvalidTemplate = errors.New("invalid operation template")

// methods are the methods an operation may name. CONNECT and TRACE are left
// out: one tunnels, the other reflects the request (credential included)
// back to the caller.
var methods = map[string]bool{
	"GET": true, "POST": true, "PUT": true, "PATCH": true,
	"DELETE": true, "HEAD": true, "OPTIONS": true,
}

// defaultParam is the pattern of a parameter the policy gives none for:
// RFC 3986 unreserved characters only. Dot segments never reach it, and
// Match refuses them again.
var defaultParam = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`\A[A-Za-z0-9_.~-]+\z`) })

// Template is one operation the broker may forward: an HTTP method and a
// path whose segments are literals or named parameters. Build it with
// ParseTemplate or ParseOperation; the zero Template matches only method ""
// on "/".
type Template struct {
	// Method is the upper-case HTTP method the operation allows. Match
	// compares it exactly: HEAD does not imply GET.
	Method string
	// Path is the path template as written in the policy, such as
	// "/repos/{owner}/{repo}/issues".
	Path string

	segs []tseg
}

// tseg is one segment of a template: a literal when name is "", else a
// parameter.
type tseg struct {
	lit  string         // decoded literal, compared with the decoded request segment
	name string         // parameter name
	re   *regexp.Regexp // anchored pattern a parameter value must match whole
}

// String returns the operation in the form ParseOperation reads.
func (t *Template) String() string { return t.Method + " " + t.Path }

// ParseTemplate parses an operation: an upper-case method (GET, POST, PUT,
// PATCH, DELETE, HEAD or OPTIONS) and a path template such as
// "/repos/{owner}/{repo}/issues" or "/user". "/" alone is the root, with
// zero segments.
//
// Each "{name}" must be a whole segment; names match [a-z_][a-z0-9_]* and
// are unique. Literal segments are written as they would be on the wire
// (percent-encoded) and must pass the same checks Normalize applies to a
// request: no empty segment, no trailing "/", no dot segment, and so on.
// They may not contain "{" or "}", raw or encoded.
//
// params optionally gives a parameter a pattern in Go regexp syntax. The
// pattern must match the whole segment: "[a-z]+" does not match "abc1". A
// parameter without one matches `[A-Za-z0-9_.~-]+`. A pattern for a name
// that is not in the path is an error, so a typo cannot silently leave a
// parameter unconstrained.
func ParseTemplate(method, path string, params map[string]string) (*Template, error) {
	fail := func(format string, args ...any) error {
		return fmt.Errorf("%w %s: %s", ErrInvalidTemplate,
			strconv.Quote(method+" "+path), fmt.Sprintf(format, args...))
	}
	if !methods[method] {
		return nil, fail("method must be one of GET, POST, PUT, PATCH, DELETE, HEAD, OPTIONS (upper-case)")
	}
	if path == "" || path[0] != '/' {
		return nil, fail("path must start with /")
	}
	if len(path) > MaxPathLen {
		return nil, fail("path longer than %d bytes", MaxPathLen)
	}
	t := &Template{Method: method, Path: path}
	seen := make(map[string]bool)
	if path != "/" {
		if strings.HasSuffix(path, "/") {
			return nil, fail("trailing slash")
		}
		parts := strings.Split(path[1:], "/")
		if len(parts) > MaxSegments {
			return nil, fail("more than %d segments", MaxSegments)
		}
		t.segs = make([]tseg, 0, len(parts))
		for i, p := range parts {
			if len(p) >= 2 && p[0] == '{' && p[len(p)-1] == '}' {
				name := p[1 : len(p)-1]
				if !validName(name) {
					return nil, fail("parameter name %q must match [a-z_][a-z0-9_]*", name)
				}
				if seen[name] {
					return nil, fail("parameter %q appears twice", name)
				}
				seen[name] = true
				s := tseg{name: name, re: defaultParam()}
				if pat, ok := params[name]; ok {
					re, err := compileParam(pat)
					if err != nil {
						return nil, fail("parameter %q: bad pattern: %v", name, err)
					}
					s.re = re
				}
				t.segs = append(t.segs, s)
				continue
			}
			if p == "" {
				return nil, fail("empty segment (//)")
			}
			lit, problem := decodeSegment(p)
			if problem != "" {
				return nil, fail("segment %d: %s", i+1, problem)
			}
			if strings.ContainsAny(lit, "{}") {
				return nil, fail("segment %d: braces must enclose a whole segment, as in {name}", i+1)
			}
			t.segs = append(t.segs, tseg{lit: lit})
		}
	}
	for _, name := range slices.Sorted(maps.Keys(params)) {
		if !seen[name] {
			return nil, fail("pattern given for %q, which is not a parameter of the path", name)
		}
	}
	return t, nil
}

// ParseOperation parses the one-line form of an operation with no
// parameter patterns: a method, one space, and a path template, as in
// "GET /repos/{owner}/{repo}/issues".
func ParseOperation(line string) (*Template, error) {
	method, path, ok := strings.Cut(line, " ")
	if !ok {
		return nil, fmt.Errorf("%w %s: want METHOD /path, separated by one space",
			ErrInvalidTemplate, strconv.Quote(line))
	}
	return ParseTemplate(method, path, nil)
}

// Match reports whether a request with this method and these segments, as
// returned by Normalize, is this operation; if so it returns the parameter
// values by name (an empty map when there are none). Literal segments
// compare byte for byte, after decoding on both sides, so "%41" in a
// request matches "A" in a template.
func (t *Template) Match(method string, segs []string) (map[string]string, bool) {
	if method != t.Method || len(segs) != len(t.segs) {
		return nil, false
	}
	var vals map[string]string
	for i, s := range t.segs {
		v := segs[i]
		if s.name == "" {
			if v != s.lit {
				return nil, false
			}
			continue
		}
		// Normalize never returns such a value; checking again keeps a
		// caller that skipped it from handing a permissive pattern (".+")
		// a traversal or a slash.
		if !plausibleValue(v) || !s.re.MatchString(v) {
			return nil, false
		}
		if vals == nil {
			vals = make(map[string]string, len(t.segs)-i)
		}
		vals[s.name] = v
	}
	if vals == nil {
		vals = map[string]string{}
	}
	return vals, true
}

// plausibleValue reports whether v could be a segment from Normalize as far
// as a cheap check can tell: not empty, not only dots, no slash, backslash
// or control byte.
func plausibleValue(v string) bool {
	if strings.Trim(v, ".") == "" {
		return false
	}
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < 0x20 || c == 0x7f || c == '/' || c == '\\' {
			return false
		}
	}
	return true
}

func validName(name string) bool {
	if name == "" {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case 'a' <= c && c <= 'z', c == '_':
		case '0' <= c && c <= '9' && i > 0:
		default:
			return false
		}
	}
	return true
}

// compileParam compiles a parameter pattern anchored to the whole segment.
// The pattern is compiled alone first: only a pattern that is well formed
// by itself has balanced parentheses, so wrapping it cannot let an
// alternation such as "a)|(.*" escape the anchors.
func compileParam(pat string) (*regexp.Regexp, error) {
	if pat == "" {
		return nil, errors.New("empty pattern")
	}
	if _, err := regexp.Compile(pat); err != nil {
		return nil, err
	}
	// \A and \z, not ^ and $, so that a (?m) flag in the pattern cannot
	// turn them into line anchors.
	return regexp.Compile(`\A(?:` + pat + `)\z`)
}
