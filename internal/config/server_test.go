package config

import (
	"strings"
	"testing"
)

func TestServer(t *testing.T) {
	c, err := Parse("a.yaml", []byte(`
server:
  socket: /run/x/a.sock
  socket_group: airlock
  tcp: 127.0.0.1:7400
  tokens:
    - {name: ci, secret: ci_tok, tools: [fetch]}
    - {name: admin, secret: admin_tok, tools: ["*"]}
secrets:
  ci_tok: {env: CI_TOKEN}
  admin_tok: {file: /etc/airlock/admin}
tools:
  fetch: {}
  other: {}
`))
	if err != nil {
		t.Fatal(err)
	}
	s := c.Server
	if s.Socket != "/run/x/a.sock" || s.SocketGroup != "airlock" || s.TCP.String() != "127.0.0.1:7400" || len(s.Tokens) != 2 {
		t.Fatalf("server %+v", s)
	}
	if !s.Tokens[0].AllowsTool("fetch") || s.Tokens[0].AllowsTool("other") || !s.Tokens[1].AllowsTool("other") {
		t.Fatalf("scopes %+v", s.Tokens)
	}
	bad := []struct{ yaml, want string }{
		{"server: {tcp: 127.0.0.1:7400}", "no tokens"},
		{"server: {tcp: localhost}", "not IP:PORT"},
		{"server: {tokens: [{name: a, secret: nope, tools: [t]}]}\ntools: {t: {}}", `undefined secret "nope"`},
		{"server: {tokens: [{name: a, secret: s, tools: [nope]}]}\nsecrets: {s: {env: X}}", `undefined tool or MCP server "nope"`},
		{"server: {tokens: [{name: a, secret: s}]}\nsecrets: {s: {env: X}}", "needs tools"},
		{"server: {tokens: [{name: a, secret: s, tools: ['*']}, {name: a, secret: s, tools: ['*']}]}\nsecrets: {s: {env: X}}", "used twice"},
		{"server: {socket: rel.sock}", "absolute"},
		{"server: {port: 1}", `unknown field "port"`},
	}
	for _, tt := range bad {
		_, err := Parse("a.yaml", []byte(tt.yaml))
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: got %v, want %q", tt.yaml, err, tt.want)
		}
	}
}
