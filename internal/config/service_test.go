package config

import (
	"errors"
	"fmt"
	"net/url"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/airlockhq/airlock/internal/broker/brokerspec"
	"github.com/airlockhq/airlock/internal/broker/route"
	"github.com/airlockhq/airlock/internal/egress/policy"
)

// tmpl parses a template the test knows is valid.
func tmpl(t *testing.T, method, path string, params map[string]string) *route.Template {
	t.Helper()
	tp, err := route.ParseTemplate(method, path, params)
	if err != nil {
		t.Fatalf("route.ParseTemplate(%q, %q): %v", method, path, err)
	}
	return tp
}

// upstreamURL parses a URL the test knows is valid.
func upstreamURL(t *testing.T, s string) *url.URL {
	t.Helper()
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// defOp is an operation with the service defaults and no settings.
func defOp(tp *route.Template, line int) brokerspec.Operation {
	op := brokerspec.Operation{Template: tp, MaxRequest: DefaultMaxRequest, MaxResponse: DefaultMaxResponse, Rate: DefaultRate, Line: line}
	if hasBody(tp.Method) {
		op.ContentTypes = []string{DefaultContentType}
	}
	return op
}

func TestParseServices(t *testing.T) {
	in := lines(
		"tools:", // 1
		"  gh:",
		"    env: {GITHUB_TOKEN: mine}",
		"    services: [github, local]",
		"  plain: {}", // 5
		"services:",
		"  github:",
		"    upstream: https://api.github.com/",
		"    credential:",
		"      secret: github_token", // 10
		"      header: authorization",
		`      template: "Bearer {secret}"`,
		"    env:",
		`      GITHUB_API_URL: "{url}"`,
		"      GITHUB_TOKEN: airlock-brokered", // 15
		"    rate: 30",
		"    max_request: 2MiB",
		"    max_response: 20MiB",
		"    operations:",
		"      - GET /repos/{owner}/{repo}/issues", // 20
		"      - method: POST",
		"        path: /repos/{owner}/{repo}/issues",
		`        params: {owner: "[a-z0-9-]+", repo: "[a-z]+"}`,
		"        query: [state, per_page]",
		"        content_types: [application/json, text/plain]", // 25
		"        max_request: 64KiB",
		"        max_response: 1MiB",
		"        rate: 10",
		"      - {method: GET, path: /user, query: []}",
		"  local:", // 30
		"    upstream: HTTP://Localhost:8080/api/v1",
		"    private: true",
		"    addresses: [127.0.0.1, 127.0.0.1]",
		"    ca: /etc/airlock/ca/internal.pem",
		"    credential: {secret: other, header: x-api-key}", // 35
		"    env: {GITHUB_TOKEN: airlock-brokered}",
		"    operations: [PUT /x, DELETE /x, PATCH /x]",
		"secrets:",
		"  github_token:",
		"    env: GITHUB_TOKEN", // 40
		"  other:",
		"    file: /etc/airlock/secrets/other",
	)
	gh := &brokerspec.Service{
		Name:        "github",
		Upstream:    upstreamURL(t, "https://api.github.com"),
		Destination: dest(t, policy.Spec{Host: "api.github.com:443"}),
		Credential:  brokerspec.Credential{Secret: "github_token", Header: "Authorization", Template: "Bearer {secret}"},
		Env:         []brokerspec.EnvVar{{Name: "GITHUB_API_URL", Value: "{url}"}, {Name: "GITHUB_TOKEN", Value: "airlock-brokered"}},
		Operations: []brokerspec.Operation{
			{Template: tmpl(t, "GET", "/repos/{owner}/{repo}/issues", nil), MaxRequest: 2 << 20, MaxResponse: 20 << 20, Rate: 30, Line: 20},
			{
				Template:     tmpl(t, "POST", "/repos/{owner}/{repo}/issues", map[string]string{"owner": "[a-z0-9-]+", "repo": "[a-z]+"}),
				Query:        []string{"state", "per_page"},
				ContentTypes: []string{"application/json", "text/plain"},
				MaxRequest:   64 << 10, MaxResponse: 1 << 20, Rate: 10, Line: 21,
			},
			{Template: tmpl(t, "GET", "/user", nil), MaxRequest: 2 << 20, MaxResponse: 20 << 20, Rate: 30, Line: 29},
		},
		Line: 7,
	}
	local := &brokerspec.Service{
		Name:        "local",
		Upstream:    upstreamURL(t, "http://Localhost:8080/api/v1"),
		Destination: dest(t, policy.Spec{Host: "localhost:8080", Addresses: []string{"127.0.0.1"}, Private: true}),
		CA:          "/etc/airlock/ca/internal.pem",
		Credential:  brokerspec.Credential{Secret: "other", Header: "X-Api-Key", Template: "{secret}"},
		Env:         []brokerspec.EnvVar{{Name: "GITHUB_TOKEN", Value: "airlock-brokered"}},
		Operations: []brokerspec.Operation{
			defOp(tmpl(t, "PUT", "/x", nil), 37),
			defOp(tmpl(t, "DELETE", "/x", nil), 37),
			defOp(tmpl(t, "PATCH", "/x", nil), 37),
		},
		Line: 30,
	}
	ghTool := defTool("gh", 2)
	ghTool.Env = []string{"GITHUB_TOKEN=mine"}
	ghTool.Services = []string{"github", "local"}
	want := cfg(ghTool, defTool("plain", 5))
	want.Services = map[string]*brokerspec.Service{"github": gh, "local": local}
	want.ServiceOrder = []string{"github", "local"}
	want.Secrets = map[string]*Secret{
		"github_token": {Name: "github_token", Env: "GITHUB_TOKEN", Line: 39},
		"other":        {Name: "other", File: "/etc/airlock/secrets/other", Line: 41},
	}

	got, err := Parse("a.yaml", []byte(in))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Parse:\ngot  %s\nwant %s", dump(got), dump(want))
	}
	if s, err := got.Service("local"); err != nil || s != got.Services["local"] {
		t.Errorf("Service(local) = %v, %v; want the local service", s, err)
	}
}

func TestParseServiceDefaults(t *testing.T) {
	in := lines(
		"services:",
		"  s:",
		"    upstream: http://140.82.112.3",
		"    credential: {secret: k}",
		"    operations:",
		"      - HEAD /",
		"      - OPTIONS /a",
		"      - POST /a",
		"      - {method: PUT, path: /a, content_types: [application/octet-stream]}",
		"      - {method: GET, path: /b, content_types: [text/csv]}",
		"secrets:",
		"  k: {file: /k}",
	)
	c, err := Parse("a.yaml", []byte(in))
	if err != nil {
		t.Fatal(err)
	}
	s := c.Services["s"]
	if s.Credential.Header != "Authorization" || s.Credential.Template != "{secret}" || s.CA != "" || s.Env != nil {
		t.Errorf("service = %+v; want the default credential, no CA and no env", s)
	}
	if got, want := s.Destination.String(), "140.82.112.3:80"; got != want {
		t.Errorf("Destination = %s, want %s", got, want)
	}
	wantTypes := [][]string{nil, nil, {"application/json"}, {"application/octet-stream"}, {"text/csv"}}
	for i, op := range s.Operations {
		if op.Rate != 60 || op.MaxRequest != 1<<20 || op.MaxResponse != 10<<20 || op.Query != nil {
			t.Errorf("operation %d = %+v; want the defaults", i, op)
		}
		if !reflect.DeepEqual(op.ContentTypes, wantTypes[i]) {
			t.Errorf("operation %s: ContentTypes = %q, want %q", op.Template, op.ContentTypes, wantTypes[i])
		}
		if op.Line != 6+i {
			t.Errorf("operation %s: Line = %d, want %d", op.Template, op.Line, 6+i)
		}
	}
}

// TestParseUpstream checks how upstream URLs are read and normalised.
func TestParseUpstream(t *testing.T) {
	tests := []struct {
		in, url, dest string
		extra         string // more service settings
	}{
		{"https://api.github.com", "https://api.github.com", "api.github.com:443", ""},
		{"https://api.github.com/", "https://api.github.com", "api.github.com:443", ""},
		{"https://API.GitHub.com:8443/", "https://API.GitHub.com:8443", "api.github.com:8443", ""},
		{"http://a.example", "http://a.example", "a.example:80", ""},
		{"https://h.example/api/v3/", "https://h.example/api/v3", "h.example:443", ""},
		{"https://h.example/a;b=c/@x:y/~z", "https://h.example/a;b=c/@x:y/~z", "h.example:443", ""},
		{"https://140.82.112.3", "https://140.82.112.3", "140.82.112.3:443", ""},
		{"https://[2606:4700::1111]:8443/x", "https://[2606:4700::1111]:8443/x", "[2606:4700::1111]:8443", ""},
		{"http://127.0.0.1:9000", "http://127.0.0.1:9000", "127.0.0.1:9000", "private: true"},
		{"http://[::1]", "http://[::1]", "[::1]:80", "private: true"},
	}
	for _, tt := range tests {
		in := lines("services:", "  s:", "    upstream: "+tt.in, "    credential: {secret: k}", "    operations: [GET /]", "    "+tt.extra, "secrets: {k: {env: K}}")
		c, err := Parse("a.yaml", []byte(in))
		if err != nil {
			t.Errorf("%s: Parse: %v", tt.in, err)
			continue
		}
		s := c.Services["s"]
		if got := s.Upstream.String(); got != tt.url {
			t.Errorf("%s: Upstream = %s, want %s", tt.in, got, tt.url)
		}
		if got := s.Destination.String(); got != tt.dest {
			t.Errorf("%s: Destination = %s, want %s", tt.in, got, tt.dest)
		}
	}
}

// TestParseServiceRefs checks references made before the names are
// defined, and the rules for variables several services set.
func TestParseServiceRefs(t *testing.T) {
	svc := func(name string, env ...string) []string {
		ls := []string{"  " + name + ":", "    upstream: https://" + name + ".example", "    credential: {secret: k}", "    operations: [GET /]"}
		if len(env) > 0 {
			ls = append(ls, "    env: {"+strings.Join(env, ", ")+"}")
		}
		return ls
	}
	file := func(tool string, services ...[]string) string {
		ls := []string{"tools:", "  t:", tool, "services:"}
		for _, s := range services {
			ls = append(ls, s...)
		}
		return lines(append(ls, "secrets:", "  k: {env: K}")...)
	}
	tests := []struct {
		name, in string
	}{
		{"tool before service before secret", file("    services: [a, b]", svc("a"), svc("b"))},
		{"same literal value", file("    services: [a, b]", svc("a", "X: same"), svc("b", "X: same"))},
		{"tool env wins", file("    {services: [a, b], env: {X: mine}}", svc("a", `X: "{url}"`), svc("b", `X: "{url}"`))},
		{"different names", file("    services: [a, b]", svc("a", "X: 1"), svc("b", "Y: 1"))},
		{"unused service conflicts", file("    services: [a]", svc("a", "X: 1"), svc("b", "X: 2"))},
		{"no services", file("    services: []", svc("a"))},
		{"null services", file("    services:", svc("a"))},
	}
	for _, tt := range tests {
		if _, err := Parse("a.yaml", []byte(tt.in)); err != nil {
			t.Errorf("%s: Parse: %v", tt.name, err)
		}
	}
}

func TestService(t *testing.T) {
	c, err := Parse("a.yaml", []byte(lines(
		"services:",
		"  zeta: {upstream: https://z.example, credential: {secret: k}, operations: [GET /]}",
		"  alpha: {upstream: https://a.example, credential: {secret: k}, operations: [GET /]}",
		"secrets: {k: {env: K}}",
	)))
	if err != nil {
		t.Fatal(err)
	}
	if got, err := c.Service("alpha"); err != nil || got.Name != "alpha" || got.Line != 3 {
		t.Errorf("Service(alpha) = %+v, %v; want the service on line 3", got, err)
	}
	tests := []struct {
		c    *Config
		name string
		want string
	}{
		{c, "nope", `service "nope" not found (known services: alpha, zeta)`},
		{Empty(), "x", `service "x" not found (no services are configured)`},
		{nil, "x", `service "x" not found (no services are configured)`},
	}
	for _, tt := range tests {
		got, err := tt.c.Service(tt.name)
		if err == nil || err.Error() != tt.want || !errors.Is(err, ErrNotFound) {
			t.Errorf("Service(%q) = %v, %v; want error %q matching ErrNotFound", tt.name, got, err, tt.want)
		}
	}
}

func TestCredentialValue(t *testing.T) {
	tests := []struct{ template, secret, want string }{
		{"{secret}", "abc", "abc"},
		{"Bearer {secret}", "abc", "Bearer abc"},
		{"token={secret};", "{secret}", "token={secret};"},
	}
	for _, tt := range tests {
		if got := (brokerspec.Credential{Template: tt.template}).Value(tt.secret); got != tt.want {
			t.Errorf("Value(%q) with %q = %q, want %q", tt.secret, tt.template, got, tt.want)
		}
	}
}

func TestCanonicalHeader(t *testing.T) {
	for in, want := range map[string]string{
		"authorization": "Authorization",
		"X-API-KEY":     "X-Api-Key",
		"x-api-key":     "X-Api-Key",
		"private-token": "Private-Token",
		"a.b_c":         "A.b_c",
	} {
		if got := canonicalHeader(in); got != want {
			t.Errorf("canonicalHeader(%q) = %q, want %q", in, got, want)
		}
	}
}

// sprintService formats a service for failure messages.
func sprintService(s *brokerspec.Service) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s upstream=%v dest=%v/%v/%v ca=%q cred=%+v env=%v line=%d", s.Name, s.Upstream, s.Destination,
		s.Destination.Addresses, s.Destination.Private, s.CA, s.Credential, s.Env, s.Line)
	for _, o := range s.Operations {
		fmt.Fprintf(&b, "\n    %v query=%q types=%q req=%d resp=%d rate=%d line=%d", o.Template, o.Query, o.ContentTypes, o.MaxRequest, o.MaxResponse, o.Rate, o.Line)
	}
	return b.String()
}

// TestServiceErrorText pins the full text of typical service errors, as
// users see them.
func TestServiceErrorText(t *testing.T) {
	base := []string{"services:", "  github:", "    upstream: https://api.github.com", "    credential: {secret: gh}", "    operations:", "      - GET /user"}
	tests := []struct {
		in   []string
		want string
	}{
		{
			append(slices.Clone(base), "      - method: GET", "        path: /repos/", "secrets: {gh: {env: GH}}"),
			`airlock.yaml:8:15: services.github.operations[1].path: invalid operation template "GET /repos/": trailing slash`,
		},
		{
			append(slices.Clone(base), "secrets: {gh: {env: GH}}", "tools:", "  t: {services: [gihtub]}"),
			`airlock.yaml:9:18: tools.t.services[0]: undefined service "gihtub" (defined services: github)`,
		},
		{
			append(slices.Clone(base), "secrets: {github: {env: GH}}"),
			`airlock.yaml:4:26: services.github.credential.secret: undefined secret "gh" (defined secrets: github)`,
		},
	}
	for _, tt := range tests {
		_, err := Parse("airlock.yaml", []byte(lines(tt.in...)))
		if err == nil || err.Error() != tt.want {
			t.Errorf("Parse error = %v; want %q", err, tt.want)
		}
	}
}

func TestOperationHeaders(t *testing.T) {
	base := "secrets: {s: {env: X}}\nservices:\n  gh:\n    upstream: https://api.github.com\n    credential: {secret: s}\n    operations:\n      - {method: GET, path: /user, headers: %s}\n"
	c, err := Parse("a.yaml", []byte(fmt.Sprintf(base, "[x-github-api-version, If-None-Match]")))
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Services["gh"].Operations[0].Headers; !slices.Equal(got, []string{"X-Github-Api-Version", "If-None-Match"}) {
		t.Fatalf("headers %q", got)
	}
	for _, bad := range []struct{ list, want string }{
		{"[Authorization]", "sets this header itself"},
		{"[Transfer-Encoding]", "sets this header itself"},
		{"[Accept-Encoding]", "sets this header itself"},
		{`["X Y"]`, "header name"},
		{"[a, a]", "twice"},
	} {
		if _, err := Parse("a.yaml", []byte(fmt.Sprintf(base, bad.list))); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("headers %s: %v, want %q", bad.list, err, bad.want)
		}
	}
}
