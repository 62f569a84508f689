package e2bserver

import (
	"strings"
	"testing"

	"github.com/airlockhq/airlock/internal/broker/brokerspec"
	"github.com/airlockhq/airlock/internal/config"
	"github.com/airlockhq/airlock/internal/e2b"
)

// TestE2BRules: a create's network.rules set headers on the calls of a
// transparent service at the rule's host, and only what narrows.
func TestE2BRules(t *testing.T) {
	cfg, err := config.Parse("airlock.yaml", []byte(`
secrets:
  tok: {env: TEST_TOK}
services:
  gh:
    upstream: https://api.github.com
    transparent: true
    credential: {secret: tok, template: "Bearer {secret}"}
    operations:
      - {method: GET, path: "/repos/{o}/{r}", headers: [X-GitHub-Api-Version]}
  plain:
    upstream: https://internal.example
    credential: {secret: tok}
    operations: [GET /x]
tools:
  t: {services: [gh, plain]}
`))
	if err != nil {
		t.Fatal(err)
	}
	var svcs []*brokerspec.Service
	for _, n := range []string{"gh", "plain"} {
		s, err := cfg.Service(n)
		if err != nil {
			t.Fatal(err)
		}
		svcs = append(svcs, s)
	}
	rule := func(host string, h map[string]string) map[string][]e2b.NetworkRule {
		return map[string][]e2b.NetworkRule{host: {{Transform: &e2b.NetworkTransform{Headers: h}}}}
	}
	out, err := e2bRules(svcs, rule("API.github.com.", map[string]string{"x-github-api-version": "2022-11-28", "Accept": "application/json"}))
	if err != nil {
		t.Fatal(err)
	}
	if got := out[0].Set; len(got) != 2 || got["X-Github-Api-Version"] != "2022-11-28" || got["Accept"] != "application/json" {
		t.Errorf("set %v", got)
	}
	if svcs[0].Set != nil || out[1] != svcs[1] {
		t.Error("the config's services were changed, or another service was")
	}
	if out, err := e2bRules(svcs, nil); err != nil || &out[0] != &svcs[0] {
		t.Errorf("no rules: %v", err)
	}
	many := map[string]string{}
	for i := range 17 {
		many["Accept"+strings.Repeat("x", i)] = "v"
	}
	for _, tt := range []struct {
		name  string
		rules map[string][]e2b.NetworkRule
		want  string
	}{
		{"a host no service brokers", rule("evil.test", map[string]string{"Accept": "x"}), `"evil.test": airlock sets headers only on calls it brokers`},
		{"a service not transparent", rule("internal.example", map[string]string{"Accept": "x"}), "hosts: api.github.com"},
		{"the credential", rule("api.github.com", map[string]string{"authorization": "Bearer x"}), "Authorization carries a credential"},
		{"a header no operation forwards", rule("api.github.com", map[string]string{"X-Original-Url": "/admin"}), "no operation of service"},
		{"too many headers", rule("api.github.com", many), "at most 16 headers"},
	} {
		if _, err := e2bRules(svcs, tt.rules); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: %v, want %q", tt.name, err, tt.want)
		}
	}
	hosts := map[string][]e2b.NetworkRule{}
	for i := range maxRuleHosts + 1 {
		hosts[strings.Repeat("a", i+1)+".test"] = nil
	}
	if _, err := e2bRules(svcs, hosts); err == nil || !strings.Contains(err.Error(), "at most") {
		t.Errorf("too many hosts: %v", err)
	}
}
