package config

import (
	"errors"
	"net/url"
	"path"
	"slices"
	"strings"
	"testing"

	"github.com/airlockhq/airlock/internal/broker/brokerspec"
	"github.com/airlockhq/airlock/internal/sbspec"
)

// FuzzParse checks that Parse never panics, that every error is an *Error
// with a sane position, and that every accepted config keeps the promises
// of the types, cross-references included.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"",
		"tools:\n  t:\n",
		"tools:\n  fetch:\n    description: x\n    image: host\n    workdir: /w\n    env: {A: b, N: 5}\n" +
			"    limits: {memory: 256MiB, pids: 64, disk: 64MiB, fds: 256, output: 1MiB, time: 30s, cpu: 0.5, cpu_time: 0}\n" +
			"    egress:\n      - api.github.com\n      - \"*.example.com:443\"\n      - 140.82.112.0/20:443\n" +
			"      - {host: m.internal, ports: [443], addresses: [10.0.0.5], private: true}\n" +
			"    network: {connections: 1, bytes: 1GiB, dns_rate: 100}\n",
		"a: &x [1]\nb: *x\n",
		"tools: !!map {t: !foo x}\n",
		"- [[[[[[[[]]]]]]]]\n",
		"tools:\n  t: {\n",
		"---\n...\n---\n",
		"tools:\n  <<: {a: 1}\n",
		"tools:\n  t: {limits: {pids: 010, memory: 1e9}}\n",
		"\xef\xbb\xbftools: {}\n",
		"tools:\n  ? [a]\n  : b\n",
		"tools:\n  gh: {services: [github]}\nservices:\n  github:\n    upstream: https://api.github.com/\n" +
			"    credential: {secret: gh, header: authorization, template: \"Bearer {secret}\"}\n" +
			"    env: {GITHUB_API_URL: \"{url}\", GITHUB_TOKEN: airlock-brokered}\n" +
			"    rate: 60\n    max_request: 1MiB\n    max_response: 10MiB\n" +
			"    operations:\n      - GET /repos/{owner}/{repo}/issues\n" +
			"      - {method: POST, path: \"/repos/{owner}/{repo}/issues\", params: {owner: \"[a-z0-9-]+\"}, query: [state], content_types: [application/json], rate: 30}\n" +
			"secrets:\n  gh: {env: GITHUB_TOKEN}\n  other: {file: /etc/airlock/secrets/other}\n",
		"services:\n  l:\n    upstream: http://localhost:8080/api\n    private: true\n    addresses: [127.0.0.1]\n" +
			"    ca: /etc/ca.pem\n    credential: {secret: s, header: X-Api-Key}\n    operations: [PUT /x]\nsecrets: {s: {file: /s}}\n",
		"services:\n  s: {upstream: \"https://u@h/%2e?#\", credential: {secret: x}, operations: [get /a/]}\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse("f.yaml", data)
		if err != nil {
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("error %v (%T) is not an *Error", err, err)
			}
			if e.Line < 0 || e.Column < 0 || e.File != "f.yaml" || !errors.Is(err, ErrInvalid) {
				t.Fatalf("bad error %#v", e)
			}
			if c != nil {
				t.Fatalf("Parse returned a config with error %v", err)
			}
			return
		}
		if len(c.Order) != len(c.Tools) {
			t.Fatalf("%d names in Order, %d tools", len(c.Order), len(c.Tools))
		}
		for _, name := range c.Order {
			tl := c.Tools[name]
			switch {
			case tl == nil || tl.Name != name:
				t.Fatalf("Order names %q, Tools has %+v", name, tl)
			case !validToolName(name):
				t.Fatalf("invalid tool name %q accepted", name)
			case !path.IsAbs(tl.Workdir) || path.Clean(tl.Workdir) != tl.Workdir:
				t.Fatalf("workdir %q accepted", tl.Workdir)
			case tl.Image != ImageHost:
				t.Fatalf("image %q accepted", tl.Image)
			case tl.Network.Connections < 1 || tl.Network.Connections > maxConnections ||
				tl.Network.DNSRate < 1 || tl.Network.DNSRate > maxDNSRate || tl.Network.Bytes < 1:
				t.Fatalf("network %+v accepted", tl.Network)
			case tl.Line < 1:
				t.Fatalf("tool %q on line %d", name, tl.Line)
			}
			if err := tl.Limits.Apply(sbspec.DefaultLimits()).Validate(); err != nil {
				t.Fatalf("limits of %q accepted but invalid: %v", name, err)
			}
			for i, sn := range tl.Services {
				if c.Services[sn] == nil || slices.Index(tl.Services, sn) != i {
					t.Fatalf("tool %q: services %q accepted", name, tl.Services)
				}
			}
		}
		for name, sec := range c.Secrets {
			switch {
			case sec == nil || sec.Name != name || !validToolName(name) || sec.Line < 1:
				t.Fatalf("secret %q accepted as %+v", name, sec)
			case (sec.Env == "") == (sec.File == ""):
				t.Fatalf("secret %q: env %q and file %q accepted", name, sec.Env, sec.File)
			case sec.Env != "" && !validEnvName(sec.Env):
				t.Fatalf("secret %q: env %q accepted", name, sec.Env)
			case sec.File != "" && (!path.IsAbs(sec.File) || path.Clean(sec.File) != sec.File):
				t.Fatalf("secret %q: file %q accepted", name, sec.File)
			}
		}
		if len(c.ServiceOrder) != len(c.Services) {
			t.Fatalf("%d names in ServiceOrder, %d services", len(c.ServiceOrder), len(c.Services))
		}
		for _, name := range c.ServiceOrder {
			checkService(t, c, name)
		}
	})
}

// checkService checks the promises of the Service type for an accepted
// service.
func checkService(t *testing.T, c *Config, name string) {
	s := c.Services[name]
	if s == nil || s.Name != name || !validServiceName(name) || s.Line < 1 {
		t.Fatalf("ServiceOrder names %q, Services has %+v", name, s)
	}
	u, d, cr := s.Upstream, s.Destination, s.Credential
	switch {
	case u == nil || u.Scheme != "http" && u.Scheme != "https" || u.Host == "" || u.Opaque != "":
		t.Fatalf("service %q: upstream %v accepted", name, u)
	case u.User != nil || u.RawQuery != "" || u.ForceQuery || u.Fragment != "" || u.RawPath != "":
		t.Fatalf("service %q: upstream %v accepted with user, query, fragment or escapes", name, u)
	case u.Path != "" && (u.Path == "/" || path.Clean(u.Path) != u.Path):
		t.Fatalf("service %q: upstream path %q accepted", name, u.Path)
	case len(d.Ports) != 1 || d.Wildcard || d.Name == "" && !d.Prefix.IsSingleIP():
		t.Fatalf("service %q: destination %v accepted", name, d)
	case s.CA != "" && (!path.IsAbs(s.CA) || path.Clean(s.CA) != s.CA):
		t.Fatalf("service %q: ca %q accepted", name, s.CA)
	case c.Secrets[cr.Secret] == nil:
		t.Fatalf("service %q: undefined secret %q accepted", name, cr.Secret)
	case strings.Count(cr.Template, brokerspec.SecretPlaceholder) != 1 || strings.IndexFunc(cr.Template, isHeaderControl) >= 0:
		t.Fatalf("service %q: template %q accepted", name, cr.Template)
	case cr.Header == "" || canonicalHeader(cr.Header) != cr.Header || framingHeaders[strings.ToLower(cr.Header)] ||
		strings.HasPrefix(cr.Header, "Proxy-") || strings.IndexFunc(cr.Header, func(r rune) bool { return !isTokenChar(r) }) >= 0:
		t.Fatalf("service %q: header %q accepted", name, cr.Header)
	case len(s.Operations) == 0:
		t.Fatalf("service %q accepted without operations", name)
	}
	// What the broker rebuilds from the URL is what was checked.
	if again, err := url.Parse(u.String()); err != nil || *again != *u {
		t.Fatalf("service %q: upstream %#v does not survive a round trip: %#v, %v", name, u, again, err)
	}
	for _, e := range s.Env {
		if !validEnvName(e.Name) || strings.Contains(e.Value, brokerspec.SecretPlaceholder) {
			t.Fatalf("service %q: env %+v accepted", name, e)
		}
	}
	seen := map[string]bool{}
	for _, op := range s.Operations {
		switch {
		case op.Template == nil || seen[op.Template.String()]:
			t.Fatalf("service %q: operation %+v accepted", name, op)
		case op.Rate < 1 || op.Rate > MaxRate || op.MaxRequest < 1 || op.MaxResponse < 1 || op.Line < 1:
			t.Fatalf("service %q: operation %s accepted with %+v", name, op.Template, op)
		case op.ContentTypes == nil && hasBody(op.Template.Method):
			t.Fatalf("service %q: operation %s accepts any content type", name, op.Template)
		}
		seen[op.Template.String()] = true
		for _, q := range op.Query {
			if queryNameProblem(q) != "" {
				t.Fatalf("service %q: query parameter %q accepted", name, q)
			}
		}
		for _, ct := range op.ContentTypes {
			if mediaTypeProblem(ct) != "" {
				t.Fatalf("service %q: content type %q accepted", name, ct)
			}
		}
	}
}
