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
    - {name: admin, secret: admin_tok, tools: ["*"], auditor: true}
  capacity: {sandboxes: 40, memory: 16GiB, pids: 20000, output: 64MiB}
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
	if s.Tokens[0].Auditor || !s.Tokens[1].Auditor {
		t.Fatalf("auditor %+v", s.Tokens)
	}
	if s.Capacity != (Capacity{Sandboxes: 40, Memory: 16 << 30, Pids: 20000, Output: 64 << 20}) {
		t.Fatalf("capacity %+v", s.Capacity)
	}
	if c, err := Parse("a.yaml", []byte("server: {e2b: 0.0.0.0:7401, e2b_tls: {cert: /etc/airlock/e2b.pem, key: /etc/airlock/e2b.key}, tokens: [{name: a, secret: s, tools: ['*']}]}\nsecrets: {s: {env: S}}")); err != nil || *c.Server.E2BTLS != (TLSFiles{Cert: "/etc/airlock/e2b.pem", Key: "/etc/airlock/e2b.key"}) {
		t.Fatalf("e2b_tls: %+v %v", c, err)
	}
	if c, err := Parse("a.yaml", []byte("server: {runsc: /opt/gvisor/runsc}")); err != nil || c.Server.Runsc != "/opt/gvisor/runsc" {
		t.Fatalf("runsc: %+v %v", c, err)
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
		{"server: {e2b_tls: {cert: /c.pem, key: /k.pem}}", "e2b is not"},
		{"server: {e2b_domain: sandbox.test}", "e2b is not"},
		{"server: {e2b: 127.0.0.1:7401, e2b_domain: Sandbox.Test, tokens: [{name: a, secret: s, tools: [x]}]}", "not a domain name"},
		{"server: {e2b: 127.0.0.1:7401, e2b_domain: localhost, tokens: [{name: a, secret: s, tools: [x]}]}", "not a domain name"},
		{"server: {e2b: 127.0.0.1:7401, e2b_domain: '*.sandbox.test', tokens: [{name: a, secret: s, tools: [x]}]}", "not a domain name"},
		{"server: {e2b: 127.0.0.1:7401, e2b_domain: -a.test, tokens: [{name: a, secret: s, tools: [x]}]}", "not a domain name"},
		{"server: {e2b: 127.0.0.1:7401, e2b_tls: {cert: /c.pem}, tokens: [{name: a, secret: s, tools: [x]}]}", "both cert and key"},
		{"server: {e2b: 127.0.0.1:7401, e2b_tls: {cert: c.pem, key: /k.pem}, tokens: [{name: a, secret: s, tools: [x]}]}", "absolute"},
		{"server: {e2b: 127.0.0.1:7401, e2b_tls: {cert: /c.pem, key: /k.pem, ca: /x}, tokens: [{name: a, secret: s, tools: [x]}]}", "ca"},
		{"server: {tokens: [{name: a, secret: nope, tools: [t]}]}\ntools: {t: {}}", `undefined secret "nope"`},
		{"server: {tokens: [{name: a, secret: s, tools: [nope]}]}\nsecrets: {s: {env: X}}", `undefined tool or MCP server "nope"`},
		{"server: {tokens: [{name: a, secret: s}]}\nsecrets: {s: {env: X}}", "needs tools"},
		{"server: {tokens: [{name: a, secret: s, tools: ['*']}, {name: a, secret: s, tools: ['*']}]}\nsecrets: {s: {env: X}}", "used twice"},
		{"server: {socket: rel.sock}", "absolute"},
		{"server: {runsc: runsc}", "server.runsc"},
		{"server: {runsc: /opt/../runsc}", "not a clean path"},
		{"server: {runsc: [a]}", "server.runsc"},
		{"server: {port: 1}", `unknown field "port"`},
		{"server: {capacity: {memory: 0%}}", "share of the host's memory from 1% to 100%"},
		{"server: {capacity: {memory: 101%}}", "from 1% to 100%"},
		{"server: {capacity: {memory: 07%}}", "from 1% to 100%"},
		{"server: {capacity: {memory: 0}}", "above zero"},
		{"server: {capacity: {output: 0}}", "above zero"},
		{"server: {capacity: {output: lots}}", "capacity.output"},
		{"server: {capacity: {memory: lots}}", "capacity.memory"},
		{"server: {capacity: {sandboxes: 0}}", "capacity.sandboxes"},
		{"server: {capacity: {pids: -1}}", "capacity.pids"},
		{"server: {capacity: {cpu: 1}}", `unknown field "cpu"`},
		{"server: {tokens: [{name: a, secret: s, tools: ['*'], concurrency: 0}]}\nsecrets: {s: {env: X}}", "concurrency"},
		{"server: {tokens: [{name: a, secret: s, tools: ['*'], auditor: yes}]}\nsecrets: {s: {env: X}}", "auditor: expected true or false"},
		{"server: {tokens: [{name: a, secret: s, tools: ['*'], auditor: [true]}]}\nsecrets: {s: {env: X}}", "auditor: expected true or false"},
	}
	for _, tt := range bad {
		_, err := Parse("a.yaml", []byte(tt.yaml))
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: got %v, want %q", tt.yaml, err, tt.want)
		}
	}
}

func TestCluster(t *testing.T) {
	const tcp = "server: {tcp: 127.0.0.1:7400, tokens: [{name: a, secret: s, tools: ['*']}]}\nsecrets: {s: {env: X}}\n"
	c, err := Parse("a.yaml", []byte(tcp+"cluster: {node: node-a, advertise: 'http://10.0.0.5:7400', kubernetes: {server: 'https://127.0.0.1:6443', token_file: /t, ca_file: /ca, namespace: airlock}}"))
	if err != nil {
		t.Fatal(err)
	}
	want := Cluster{Enabled: true, Node: "node-a", Advertise: "http://10.0.0.5:7400", Kubernetes: Kubernetes{Server: "https://127.0.0.1:6443", TokenFile: "/t", CAFile: "/ca", Namespace: "airlock"}}
	if c.Cluster != want {
		t.Errorf("Cluster = %+v, want %+v", c.Cluster, want)
	}
	if c, err := Parse("a.yaml", []byte(tcp+"cluster: {}")); err != nil || !c.Cluster.Enabled {
		t.Errorf("an empty cluster section: %+v, %v", c, err)
	}
	for _, tc := range []struct{ yaml, want string }{
		{"cluster: {}", "a node needs server.tcp"},
		{tcp + "cluster: {node: Node_A}", "is not a node name"},
		{tcp + "cluster: {advertise: 'ftp://x:1'}", "want the node's TCP API"},
		{tcp + "cluster: {advertise: 'http://x:1/path'}", "want the node's TCP API"},
		{tcp + "cluster: {kubernetes: {namespace: a}}", "server is required"},
		{tcp + "cluster: {kubernetes: {server: 'https://x:1'}}", "namespace is required"},
		{tcp + "cluster: {kubernetes: {server: 'x'}}", "is not the API server's URL"},
		{tcp + "cluster: {kubernetes: {server: 'https://x:1', namespace: a, token_file: rel}}", "token_file"},
		{tcp + "cluster: {nodes: 3}", "nodes"},
	} {
		if _, err := Parse("a.yaml", []byte(tc.yaml)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want an error with %q", tc.yaml, err, tc.want)
		}
	}
}
