package config

import (
	"errors"
	"net"
	"net/url"
	"path"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/airlockhq/airlock/internal/broker/brokerspec"
	"github.com/airlockhq/airlock/internal/egress/policy"
)

// Defaults and bounds of a service's operations.
const (
	// DefaultRate is an operation's calls per minute unless the service or
	// the operation sets another.
	DefaultRate = 60
	// MaxRate bounds rate: calls per minute, 1..MaxRate.
	MaxRate = 100_000
	// DefaultMaxRequest caps a request body unless max_request says
	// otherwise.
	DefaultMaxRequest = 1 << 20
	// DefaultMaxResponse caps a response body unless max_response says
	// otherwise.
	DefaultMaxResponse = 10 << 20
	// DefaultHeader is the header the credential goes in by default.
	DefaultHeader = "Authorization"
)

// Allowed keys of each mapping, sorted: they are listed in errors.
var (
	serviceKeys    = []string{"addresses", "ca", "credential", "env", "max_request", "max_response", "operations", "private", "rate", "transparent", "upstream"}
	credentialKeys = []string{"header", "secret", "template"}
	operationKeys  = []string{"content_types", "headers", "max_request", "max_response", "method", "params", "path", "query", "rate"}
)

// validServiceName reports whether name is [a-z0-9][a-z0-9_-]{0,62}. The
// name is a segment of the broker's URL path, so it is kept to characters
// that need no escaping and cannot be read as a dot segment, and to one
// case so that it has one spelling.
func validServiceName(name string) bool {
	if name == "" || len(name) > 63 || name[0] == '_' || name[0] == '-' {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// services parses the services mapping into c.
func (p *parser) services(n *yaml.Node, c *Config) error {
	fs, err := p.fields(n, "services", "a mapping of service names to their settings", nil)
	if err != nil {
		return err
	}
	for _, f := range fs {
		s, err := p.service(f)
		if err != nil {
			return err
		}
		c.Services[s.Name] = s
		c.ServiceOrder = append(c.ServiceOrder, s.Name)
	}
	return nil
}

// opDefaults are a service's defaults for its operations.
type opDefaults struct {
	rate                    int
	maxRequest, maxResponse int64
}

// service parses one entry of services.
func (p *parser) service(sf field) (*brokerspec.Service, error) {
	name := sf.name
	at := join("services", name)
	if !validServiceName(name) {
		return nil, p.errAt(sf.key, at, "invalid service name %s: use 1-63 lower-case letters, digits, '_' and '-', starting with a letter or digit (it becomes a URL path segment)", quote(name))
	}
	s := &brokerspec.Service{Name: name, Line: sf.key.Line}
	fs, err := p.fields(sf.val, at, "a mapping of service settings", serviceKeys)
	if err != nil {
		return nil, err
	}
	var (
		spec    policy.Spec
		where   = specNodes{item: sf.key, hostField: "upstream"}
		hasCred bool
		hasOps  bool
		// transparentAt is transparent: true's node, for its errors.
		transparentAt *yaml.Node
		defaults      = opDefaults{rate: DefaultRate, maxRequest: DefaultMaxRequest, maxResponse: DefaultMaxResponse}
	)
	for _, f := range fs {
		sub := join(at, f.name)
		switch f.name {
		case "upstream":
			s.Upstream, spec.Host, err = p.upstream(f.val, sub)
			where.host = f.val
		case "private":
			spec.Private, err = p.boolean(f.val, sub)
		case "addresses":
			spec.Addresses, where.addresses, err = p.addresses(f.val, sub)
		case "ca":
			s.CA, err = p.absPath(f.val, sub)
		case "transparent":
			s.Transparent, err = p.boolean(f.val, sub)
			if err == nil && s.Transparent {
				transparentAt = f.val
			}
		case "credential":
			s.Credential, err = p.credential(f, sub)
			hasCred = true
		case "env":
			s.Env, err = p.envVars(f.val, sub, placeholderProblem)
		case "rate":
			defaults.rate, err = p.rate(f.val, sub)
		case "max_request":
			defaults.maxRequest, err = p.positiveSize(f.val, sub)
		case "max_response":
			defaults.maxResponse, err = p.positiveSize(f.val, sub)
		case "operations":
			s.Operations, err = p.operations(f.val, sub)
			hasOps = true
		}
		if err != nil {
			return nil, err
		}
	}
	for _, req := range []struct {
		key string
		ok  bool
	}{{"upstream", s.Upstream != nil}, {"credential", hasCred}, {"operations", hasOps}} {
		if !req.ok {
			return nil, p.errAt(sf.key, at, "missing required field %s", quote(req.key))
		}
	}
	if s.Destination, err = policy.Compile(spec); err != nil {
		n, sub := blame(spec, where, at)
		return nil, p.wrapAt(n, sub, err)
	}
	if d := s.Destination; d.Wildcard || d.Name == "" && !d.Prefix.IsSingleIP() {
		// The broker must dial exactly one host; the URL's host is what
		// it sends as Host and checks the certificate against.
		return nil, p.errAt(where.host, join(at, "upstream"), "invalid upstream URL %s: the host must be one host name or IP address, not a wildcard", quote(where.host.Value))
	}
	if s.Transparent && (s.Upstream.Scheme != "https" || s.Destination.Name == "") {
		return nil, p.errAt(transparentAt, join(at, "transparent"), "a service reached at its real name needs an https upstream named by a host name (the sandbox's TLS to that name is what airlock terminates)")
	}
	for i := range s.Operations {
		o := &s.Operations[i]
		if o.Rate == 0 {
			o.Rate = defaults.rate
		}
		if o.MaxRequest == 0 {
			o.MaxRequest = defaults.maxRequest
		}
		if o.MaxResponse == 0 {
			o.MaxResponse = defaults.maxResponse
		}
	}
	return s, nil
}

// placeholderProblem vets the value of a service's env variable. The
// variables reach the sandbox, so they can only ever be placeholders;
// "{secret}" there suggests the author expects the secret to be filled
// in, which it never is.
func placeholderProblem(v string) string {
	if strings.Contains(v, brokerspec.SecretPlaceholder) {
		return `a service's env values are given to the sandbox, which never sees the secret, so "{secret}" is not replaced here; use a placeholder such as airlock-brokered, and "{url}" for the service's broker URL`
	}
	return ""
}

// upstream parses a service's upstream URL. It returns the URL, with one
// trailing slash of the path removed, and its host and port in the form of
// policy.Spec.Host.
func (p *parser) upstream(n *yaml.Node, at string) (*url.URL, string, error) {
	s, err := p.str(n, at)
	if err != nil {
		return nil, "", err
	}
	bad := func(problem string) (*url.URL, string, error) {
		return nil, "", p.errAt(n, at, "invalid upstream URL %s: %s", quote(s), problem)
	}
	// '?' and '#' can only start a query or fragment, even an empty one
	// that url.Parse would not report.
	if strings.ContainsAny(s, "?#") {
		return bad("a query or fragment is not allowed; operations say which query parameters calls may send")
	}
	// url.Parse decodes escapes in the host and path, so the URL would not
	// mean what it shows; the broker appends each call's canonical path
	// to the base path, and an escape there could change how the upstream
	// splits the result.
	if strings.Contains(s, "%") {
		return bad("percent-escapes are not allowed; write the URL literally")
	}
	u, err := url.Parse(s)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return bad(err.Error())
	}
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return bad("the scheme must be http or https, as in https://api.example.com")
	case u.Opaque != "" || u.Host == "":
		return bad("a host is required, as in https://api.example.com")
	case u.User != nil:
		// A password in the URL would be a credential outside secrets,
		// sent with every call whatever the operation.
		return bad("user info (user:password@) is not allowed; put credentials in secrets")
	case strings.HasSuffix(u.Host, ":"):
		return bad("':' without a port")
	case strings.HasSuffix(u.Hostname(), "."):
		// TLS and Host header handling of a trailing dot varies; the
		// name without it is the same host.
		return bad("write the host name without a trailing dot")
	case strings.IndexFunc(u.Path, func(r rune) bool { return !isPathChar(r) }) >= 0:
		return bad("the path may only use letters, digits and -._~!$&'()*+,;=:@/")
	}
	u.Path = strings.TrimSuffix(u.Path, "/")
	if u.Path != "" && (u.Path == "/" || path.Clean(u.Path) != u.Path) {
		return bad(`the path must be clean: no ".", ".." or empty elements, and at most one trailing slash`)
	}
	port := u.Port()
	if port == "" {
		port = "443"
		if u.Scheme == "http" {
			port = "80"
		}
	}
	return u, net.JoinHostPort(u.Hostname(), port), nil
}

// isPathChar reports whether r may appear in a path unescaped (RFC 3986
// pchar less pct-encoded, and '/').
func isPathChar(r rune) bool {
	return r < 0x80 && isNameChar(r) || strings.ContainsRune(".~!$&'()*+,;=:@/", r)
}

// credential parses a service's credential.
func (p *parser) credential(cf field, at string) (brokerspec.Credential, error) {
	c := brokerspec.Credential{Header: DefaultHeader, Template: brokerspec.SecretPlaceholder}
	fs, err := p.fields(cf.val, at, "a mapping with secret, header and template", credentialKeys)
	if err != nil {
		return c, err
	}
	hasSecret := false
	for _, f := range fs {
		sub := join(at, f.name)
		switch f.name {
		case "secret":
			c.Secret, err = p.str(f.val, sub)
			hasSecret = true
			p.secretRefs = append(p.secretRefs, secretRef{name: c.Secret, node: f.val, at: sub})
		case "header":
			c.Header, err = p.header(f.val, sub)
		case "template":
			c.Template, err = p.template(f.val, sub)
		}
		if err != nil {
			return c, err
		}
	}
	if !hasSecret {
		return c, p.errAt(cf.key, at, `missing required field "secret"`)
	}
	return c, nil
}

// framingHeaders are headers that cannot carry a credential: HTTP
// libraries and proxies remove, rewrite or compute them (the hop-by-hop
// headers of RFC 9110 section 7.6.1, Host and Content-Length). A
// credential put there would be dropped on the way, or would let the
// template smuggle framing. Proxy-* headers are refused by prefix.
var framingHeaders = map[string]bool{
	"connection":        true,
	"content-length":    true,
	"host":              true,
	"keep-alive":        true,
	"te":                true,
	"trailer":           true,
	"transfer-encoding": true,
	"upgrade":           true,
}

// header parses a credential's header name: an RFC 9110 token that is not
// a framing header. It is returned in canonical form.
func (p *parser) header(n *yaml.Node, at string) (string, error) {
	s, err := p.str(n, at)
	if err != nil {
		return "", err
	}
	lower := strings.ToLower(s)
	switch {
	case s == "" || len(s) > 256 || strings.IndexFunc(s, func(r rune) bool { return !isTokenChar(r) }) >= 0:
		return "", p.errAt(n, at, "invalid header name %s: use letters, digits and !#$%%&'*+-.^_`|~", quote(s))
	case framingHeaders[lower] || strings.HasPrefix(lower, "proxy-"):
		return "", p.errAt(n, at, "%s cannot carry a credential: HTTP libraries and proxies remove or rewrite it; name the header the upstream reads, such as Authorization", quote(s))
	}
	return canonicalHeader(s), nil
}

// canonicalHeader returns the canonical form of a valid header name, as
// Go's net/http writes it: "x-api-key" becomes "X-Api-Key".
func canonicalHeader(s string) string {
	b := []byte(strings.ToLower(s))
	upper := true
	for i, c := range b {
		if upper && c >= 'a' && c <= 'z' {
			b[i] = c - ('a' - 'A')
		}
		upper = c == '-'
	}
	return string(b)
}

// isTokenChar reports whether r may appear in an RFC 9110 token.
func isTokenChar(r rune) bool {
	return r < 0x80 && (r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' ||
		strings.ContainsRune("!#$%&'*+-.^_`|~", r))
}

// template parses a credential's template: brokerspec.SecretPlaceholder
// exactly once, and nothing a header value may not hold.
func (p *parser) template(n *yaml.Node, at string) (string, error) {
	s, err := p.str(n, at)
	if err != nil {
		return "", err
	}
	switch {
	case strings.IndexFunc(s, isHeaderControl) >= 0:
		// CR or LF would end the header and start another one.
		return "", p.errAt(n, at, "%s contains a line break or other control character; it becomes an HTTP header value", quote(s))
	case strings.Count(s, brokerspec.SecretPlaceholder) != 1:
		return "", p.errAt(n, at, `%s must contain "{secret}" exactly once, as in "Bearer {secret}"`, quote(s))
	}
	return s, nil
}

// rate parses calls per minute.
func (p *parser) rate(n *yaml.Node, at string) (int, error) {
	v, err := p.integer(n, at, 1, MaxRate)
	return int(v), err
}

// positiveSize parses a body cap: a size more than zero. Zero is refused
// because it reads as "unlimited" as easily as "no body".
func (p *parser) positiveSize(n *yaml.Node, at string) (int64, error) {
	v, err := p.size(n, at)
	if err != nil {
		return 0, err
	}
	if *v <= 0 {
		return 0, p.errAt(n, at, "%s must be more than zero", quote(n.Value))
	}
	return *v, nil
}
