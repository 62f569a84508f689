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
    - {name: ci, secret: ci_tok, tools: [fetch], concurrency: 4}
    - {name: admin, secret: admin_tok, tools: ["*"]}
  capacity: {sandboxes: 40, memory: 16GiB, pids: 20000}
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
	if s.Tokens[0].Concurrency != 4 || s.Tokens[1].Concurrency != 0 {
		t.Fatalf("concurrency %+v", s.Tokens)
	}
	if s.Capacity != (Capacity{Sandboxes: 40, Memory: 16 << 30, Pids: 20000}) {
		t.Fatalf("capacity %+v", s.Capacity)
	}
	if c, err := Parse("a.yaml", []byte("server: {capacity: {memory: 75%}}")); err != nil || c.Server.Capacity != (Capacity{MemoryShare: 75}) {
		t.Fatalf("capacity as a share: %+v %v", c, err)
	}
	if !s.Tokens[0].AllowsTool("fetch") || s.Tokens[0].AllowsTool("other") || !s.Tokens[1].AllowsTool("other") {
		t.Fatalf("scopes %+v", s.Tokens)
	}
	bad := []struct{ yaml, want string }{
		{"server: {tcp: 127.0.0.1:7400}", "no tokens"},
		{"server: {tcp: localhost}", "not IP:PORT"},
		{"server: {e2b: 127.0.0.1:7401}", "the E2B API's keys are the tokens"},
		{"server: {e2b: localhost:7401}", "not IP:PORT"},
		{"server: {e2b: 127.0.0.1:0}", "not IP:PORT"},
		{"server: {tcp: 127.0.0.1:7400, e2b: 127.0.0.1:7400, tokens: [{name: a, secret: s, tools: [x]}]}", "same address"},
		{"server: {tokens: [{name: a, secret: nope, tools: [t]}]}\ntools: {t: {}}", `undefined secret "nope"`},
		{"server: {tokens: [{name: a, secret: s, tools: [nope]}]}\nsecrets: {s: {env: X}}", `undefined tool or MCP server "nope"`},
		{"server: {tokens: [{name: a, secret: s}]}\nsecrets: {s: {env: X}}", "needs tools"},
		{"server: {tokens: [{name: a, secret: s, tools: ['*']}, {name: a, secret: s, tools: ['*']}]}\nsecrets: {s: {env: X}}", "used twice"},
		{"server: {socket: rel.sock}", "absolute"},
		{"server: {port: 1}", `unknown field "port"`},
		{"server: {capacity: {memory: 0%}}", "share of the host's memory from 1% to 100%"},
		{"server: {capacity: {memory: 101%}}", "from 1% to 100%"},
		{"server: {capacity: {memory: 07%}}", "from 1% to 100%"},
		{"server: {capacity: {memory: 0}}", "above zero"},
		{"server: {capacity: {memory: lots}}", "capacity.memory"},
		{"server: {capacity: {sandboxes: 0}}", "capacity.sandboxes"},
		{"server: {capacity: {pids: -1}}", "capacity.pids"},
		{"server: {capacity: {cpu: 1}}", `unknown field "cpu"`},
		{"server: {tokens: [{name: a, secret: s, tools: ['*'], concurrency: 0}]}\nsecrets: {s: {env: X}}", "concurrency"},
	}
	for _, tt := range bad {
		_, err := Parse("a.yaml", []byte(tt.yaml))
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: got %v, want %q", tt.yaml, err, tt.want)
		}
	}
}
