package config

import (
	"net/url"
	"strings"

	"go.yaml.in/yaml/v3"
)

var tracingKeys = []string{"endpoint", "headers", "service_name"}

// Tracing configures the daemon's OpenTelemetry traces: off unless
// Endpoint is set.
type Tracing struct {
	// Endpoint is the URL spans are POSTed to over OTLP/HTTP (JSON): a
	// collector's http://HOST:4318/v1/traces. Written without a path,
	// /v1/traces is added (as OTEL_EXPORTER_OTLP_ENDPOINT does).
	Endpoint string
	// Headers are sent with each request (a collector's credential).
	Headers map[string]string
	// ServiceName is the spans' service.name; "airlockd" if unset.
	ServiceName string
}

func (p *parser) tracing(n *yaml.Node, c *Config) error {
	const at = "tracing"
	fs, err := p.fields(n, at, "a mapping of tracing settings", tracingKeys)
	if err != nil {
		return err
	}
	for _, f := range fs {
		sub := join(at, f.name)
		switch f.name {
		case "endpoint":
			c.Tracing.Endpoint, err = p.otlpEndpoint(f.val, sub)
		case "service_name":
			if c.Tracing.ServiceName, err = p.str(f.val, sub); err == nil && (c.Tracing.ServiceName == "" || len(c.Tracing.ServiceName) > 128) {
				err = p.errAt(f.val, sub, "want a name of 1 to 128 bytes")
			}
		case "headers":
			c.Tracing.Headers, err = p.headerMap(f.val, sub)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// otlpEndpoint is an http or https URL with a host, no query, user or
// fragment; no path gets OTLP's /v1/traces.
func (p *parser) otlpEndpoint(n *yaml.Node, at string) (string, error) {
	s, err := p.str(n, at)
	if err != nil {
		return "", err
	}
	u, err := url.Parse(s)
	const want = `want an OTLP/HTTP URL such as "http://127.0.0.1:4318"`
	switch {
	case err != nil:
		return "", p.errAt(n, at, "%s: %s", quote(s), want)
	case u.Scheme != "http" && u.Scheme != "https":
		return "", p.errAt(n, at, "%s: the scheme must be http or https (%s; airlock sends JSON over HTTP, not gRPC)", quote(s), want)
	case u.Host == "" || u.Hostname() == "":
		return "", p.errAt(n, at, "%s: no host (%s)", quote(s), want)
	case u.User != nil:
		return "", p.errAt(n, at, "%s: a user in the URL is not sent; put a credential in tracing.headers", quote(s))
	case u.RawQuery != "" || u.Fragment != "" || u.Opaque != "":
		return "", p.errAt(n, at, "%s: no query or fragment (%s)", quote(s), want)
	}
	if u.Path == "" || u.Path == "/" {
		u.Path = "/v1/traces"
	}
	return u.String(), nil
}

// headerMap is a mapping of HTTP header names to values.
func (p *parser) headerMap(n *yaml.Node, at string) (map[string]string, error) {
	fs, err := p.fields(n, at, "a mapping of HTTP header names to values", nil)
	if err != nil {
		return nil, err
	}
	out := make(map[string]string, len(fs))
	for _, f := range fs {
		sub := join(at, f.name)
		if !headerName(f.name) {
			return nil, p.errAt(f.key, sub, "%s is not an HTTP header name", quote(f.name))
		}
		switch strings.ToLower(f.name) {
		case "content-type", "content-length", "host", "transfer-encoding", "connection":
			return nil, p.errAt(f.key, sub, "%s is set by airlock", quote(f.name))
		}
		v, err := p.str(f.val, sub)
		if err != nil {
			return nil, err
		}
		if !headerValue(v) {
			return nil, p.errAt(f.val, sub, "the value is not a valid HTTP header value (a control character or line break)")
		}
		out[f.name] = v
	}
	return out, nil
}

// headerName reports whether s is an HTTP field name (RFC 9110's token).
func headerName(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9':
		case strings.ContainsRune("!#$%&'*+-.^_`|~", r):
		default:
			return false
		}
	}
	return true
}

// headerValue reports whether s is an HTTP field value: visible ASCII,
// spaces and tabs, and other bytes of UTF-8, but no control character.
func headerValue(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < ' ' && c != '\t') || c == 0x7f {
			return false
		}
	}
	return true
}
