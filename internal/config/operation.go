package config

import (
	"net/http"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/airlockhq/airlock/internal/broker/brokerspec"
	"github.com/airlockhq/airlock/internal/broker/route"
)

// DefaultContentType is the one media type a request body may have when
// an operation whose method has a body lists none.
const DefaultContentType = "application/json"

// maxQueryName bounds a query parameter name.
const maxQueryName = 128

// operations parses a service's operations: a list, not empty, of
// "METHOD /path" strings and mappings. Rates and body caps an operation
// does not set are left zero for the service to fill in.
func (p *parser) operations(n *yaml.Node, at string) ([]brokerspec.Operation, error) {
	items, err := p.list(n, at)
	if err != nil {
		return nil, err
	}
	if len(items) == 0 {
		// No operations would make a service nothing can call; more
		// likely the list was lost in editing.
		return nil, p.errAt(n, at, "must list at least one operation, such as GET /user")
	}
	var out []brokerspec.Operation
	seen := make(map[string]int, len(items))
	for i, item := range items {
		sub := index(at, i)
		var op brokerspec.Operation
		if item.Kind == yaml.MappingNode {
			op, err = p.operationMapping(item, sub)
		} else {
			var line string
			if line, err = p.str(item, sub); err == nil {
				if op.Template, err = route.ParseOperation(line); err != nil {
					err = p.wrapAt(item, sub, err)
				}
			}
		}
		if err != nil {
			return nil, err
		}
		// The broker uses the first operation that matches; a second one
		// with the same method and path, and perhaps other caps, would
		// never apply.
		key := op.Template.String()
		if j, dup := seen[key]; dup {
			return nil, p.errAt(item, sub, "duplicate operation %s (first at index %d)", quote(key), j)
		}
		seen[key] = i
		if op.ContentTypes == nil && hasBody(op.Template.Method) {
			op.ContentTypes = []string{DefaultContentType}
		}
		op.Line = item.Line
		out = append(out, op)
	}
	return out, nil
}

// hasBody reports whether requests of method usually carry a body, so
// that an operation without content_types accepts only JSON.
func hasBody(method string) bool {
	switch method {
	case "GET", "HEAD", "DELETE", "OPTIONS":
		return false
	}
	return true
}

// routeNodes remembers where each part of a template came from, to place
// a route.ParseTemplate error.
type routeNodes struct {
	item, method, path *yaml.Node
	params             []field // in file order
}

// operationMapping parses one operation written as a mapping.
func (p *parser) operationMapping(item *yaml.Node, at string) (brokerspec.Operation, error) {
	var (
		op           brokerspec.Operation
		method, path string
		params       map[string]string
		where        = routeNodes{item: item}
	)
	fs, err := p.fields(item, at, "a mapping", operationKeys)
	if err != nil {
		return op, err
	}
	for _, f := range fs {
		sub := join(at, f.name)
		switch f.name {
		case "method":
			method, err = p.str(f.val, sub)
			where.method = f.val
		case "path":
			path, err = p.str(f.val, sub)
			where.path = f.val
		case "params":
			params, where.params, err = p.params(f.val, sub)
		case "query":
			op.Query, err = p.distinct(f.val, sub, queryNameProblem)
		case "content_types":
			if _, err = p.nonEmptyList(f.val, sub); err == nil {
				op.ContentTypes, err = p.distinct(f.val, sub, mediaTypeProblem)
			}
		case "max_request":
			op.MaxRequest, err = p.positiveSize(f.val, sub)
		case "max_response":
			op.MaxResponse, err = p.positiveSize(f.val, sub)
		case "rate":
			op.Rate, err = p.rate(f.val, sub)
		case "headers":
			if op.Headers, err = p.distinct(f.val, sub, headerNameProblem); err == nil {
				for i, h := range op.Headers {
					op.Headers[i] = http.CanonicalHeaderKey(h)
				}
			}
		}
		if err != nil {
			return op, err
		}
	}
	for _, req := range []struct {
		key string
		n   *yaml.Node
	}{{"method", where.method}, {"path", where.path}} {
		if req.n == nil {
			return op, p.errAt(item, at, "missing required field %s", quote(req.key))
		}
	}
	if op.Template, err = route.ParseTemplate(method, path, params); err != nil {
		n, sub := blameRoute(method, path, params, where, at)
		return op, p.wrapAt(n, sub, err)
	}
	return op, nil
}

// params parses an operation's params: parameter names to patterns.
func (p *parser) params(n *yaml.Node, at string) (map[string]string, []field, error) {
	fs, err := p.fields(n, at, "a mapping of parameter names to regular expressions", nil)
	if err != nil {
		return nil, nil, err
	}
	out := make(map[string]string, len(fs))
	for _, f := range fs {
		if out[f.name], err = p.str(f.val, join(at, f.name)); err != nil {
			return nil, nil, err
		}
	}
	return out, fs, nil
}

// blameRoute finds the part of an operation that route.ParseTemplate
// refused: the method, if a known good path with it fails; the path, if it
// fails without params; else the first param that fails alone (its key if
// the path has no such parameter, its pattern if it has). If each part is
// fine alone, the whole item is blamed.
func blameRoute(method, path string, params map[string]string, where routeNodes, at string) (*yaml.Node, string) {
	if _, err := route.ParseTemplate(method, "/", nil); err != nil {
		return where.method, join(at, "method")
	}
	if _, err := route.ParseTemplate(method, path, nil); err != nil {
		return where.path, join(at, "path")
	}
	for _, f := range where.params {
		if _, err := route.ParseTemplate(method, path, map[string]string{f.name: params[f.name]}); err != nil {
			sub := join(join(at, "params"), f.name)
			if _, err := route.ParseTemplate(method, path, map[string]string{f.name: "x"}); err != nil {
				return f.key, sub
			}
			return f.val, sub
		}
	}
	return where.item, at
}

// distinct reads a list of strings without duplicates. problem, if not
// nil, returns what is wrong with one string, or "".
func (p *parser) distinct(n *yaml.Node, at string, problem func(string) string) ([]string, error) {
	items, err := p.list(n, at)
	if err != nil {
		return nil, err
	}
	var out []string
	for i, item := range items {
		sub := index(at, i)
		s, err := p.str(item, sub)
		if err != nil {
			return nil, err
		}
		if problem != nil {
			if msg := problem(s); msg != "" {
				return nil, p.errAt(item, sub, "%s", msg)
			}
		}
		if j := slices.Index(out, s); j >= 0 {
			return nil, p.errAt(item, sub, "%s is listed twice (first at index %d)", quote(s), j)
		}
		out = append(out, s)
	}
	return out, nil
}

// queryNameProblem vets a query parameter name: 1-128 printable ASCII
// characters other than those that delimit or encode a query (& = + # %
// and space). The broker compares names after decoding the query, so a
// name written with such a character could never match.
func queryNameProblem(s string) string {
	bad := s == "" || len(s) > maxQueryName || strings.IndexFunc(s, func(r rune) bool {
		return r <= ' ' || r >= 0x7f || strings.ContainsRune("&=+#%", r)
	}) >= 0
	if bad {
		return "invalid query parameter name " + quote(s) + ": use 1-128 printable ASCII characters other than space and &=+#%"
	}
	return ""
}

// mediaTypeProblem vets a media type: type/subtype, each an RFC 9110
// token, in lower case, without parameters or wildcards. The broker
// compares it with the request's media type, lower-cased and without
// parameters, so anything else could never match.
func mediaTypeProblem(s string) string {
	typ, sub, ok := strings.Cut(s, "/")
	token := func(t string) bool {
		return t != "" && strings.IndexFunc(t, func(r rune) bool {
			return !isTokenChar(r) || r == '*' || r >= 'A' && r <= 'Z'
		}) < 0
	}
	if !ok || !token(typ) || !token(sub) || len(s) > 255 {
		return "invalid media type " + quote(s) + ": want type/subtype in lower case, without parameters or wildcards, such as application/json"
	}
	return ""
}

// headerNameProblem says why h cannot be a header an operation forwards:
// not a header name, or one the broker decides itself (the credential's,
// hop-by-hop and connection headers, encodings).
func headerNameProblem(h string) string {
	if h == "" || len(h) > 64 {
		return "want a header name of 1-64 characters"
	}
	for _, c := range h {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-') {
			return "want a header name (letters, digits and '-')"
		}
	}
	switch strings.ToLower(h) {
	case "authorization", "proxy-authorization", "cookie", "host", "connection", "keep-alive", "te", "trailer",
		"transfer-encoding", "upgrade", "content-length", "content-encoding", "accept-encoding", "expect", "forwarded":
		return "the broker sets this header itself, or never sends it"
	}
	return ""
}
