package cli

import (
	"bytes"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlockhq/airlock/internal/testutil"
)

// inspector returns the MCP Inspector's command-line entry point, which
// scripts/test installs (npm) and names in AIRLOCK_TEST_INSPECTOR. CI
// must have it; elsewhere the test skips without it.
func inspector(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("the Inspector runs in the full suite, not with -short")
	}
	p := os.Getenv("AIRLOCK_TEST_INSPECTOR")
	if p == "" {
		if os.Getenv("CI") != "" {
			t.Fatal("AIRLOCK_TEST_INSPECTOR is not set; scripts/test installs the MCP Inspector and sets it")
		}
		t.Skip("the MCP Inspector is not installed; run scripts/test, which installs it")
	}
	return p
}

// inspect runs the Inspector in CLI mode and returns what it printed.
func inspect(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(inspector(t), append([]string{"--cli"}, args...)...)
	cmd.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + t.TempDir(), "NO_COLOR=1"}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if err != nil {
		err = fmt.Errorf("%w: %s", err, errb.String())
	}
	return out.String(), err
}

type inspected struct {
	Tools []struct {
		Name string `json:"name"`
	} `json:"tools"`
	IsError bool `json:"isError"`
	Content []struct {
		Text string `json:"text"`
	} `json:"content"`
	Structured struct {
		Outcome string `json:"outcome"`
		Limit   *struct {
			Name string `json:"name"`
		} `json:"limit"`
	} `json:"structuredContent"`
}

func (r inspected) names() string {
	var n []string
	for _, tl := range r.Tools {
		n = append(n, tl.Name)
	}
	return strings.Join(n, " ")
}

func (r inspected) text() string {
	var b strings.Builder
	for _, c := range r.Content {
		b.WriteString(c.Text)
	}
	return b.String()
}

// checkInspected runs tools/list, a call and a breach through the
// Inspector; with turns the method's arguments into the whole command
// line (the server's command goes last, after "--"; a URL goes first,
// since --tool-arg takes every argument after it).
func checkInspected(t *testing.T, wantTools string, with func(...string) []string) {
	t.Helper()
	run := func(args ...string) inspected {
		t.Helper()
		out, err := inspect(t, with(args...)...)
		var ee *exec.ExitError
		// The Inspector exits 5 for a tool result with isError, after
		// printing it.
		if err != nil && !(errors.As(err, &ee) && ee.ExitCode() == 5 && out != "") {
			t.Fatalf("inspector %v: %v", args, err)
		}
		var r inspected
		jsonOut(t, []byte(out), &r)
		return r
	}
	if got := run("--method", "tools/list").names(); got != wantTools {
		t.Fatalf("tools/list: %q, want %q", got, wantTools)
	}
	r := run("--method", "tools/call", "--tool-name", "echo", "--tool-arg", "word=hello; id > /tmp/x")
	if r.IsError || r.text() != "hello; id > /tmp/x\n" || r.Structured.Outcome != "exited" {
		t.Fatalf("tools/call echo: %+v", r)
	}
	r = run("--method", "tools/call", "--tool-name", "hog")
	if !r.IsError || !strings.Contains(r.text(), "limit exceeded: memory") || r.Structured.Limit == nil || r.Structured.Limit.Name != "memory" {
		t.Fatalf("tools/call hog: %+v", r)
	}
}

// TestInspectorStdio: the official MCP Inspector drives `airlock mcp`
// over stdio, embedded (no daemon).
func TestInspectorStdio(t *testing.T) {
	requireRoot(t)
	inspector(t)
	cfg := writeConfig(t, mcpTools)
	server := []string{"--", airlockBin(t), "mcp", "--config", cfg, "--socket", filepath.Join(t.TempDir(), "none.sock"),
		"--audit", filepath.Join(t.TempDir(), "audit.db"), "--state-dir", "/run/airlock-test-cli", "--cgroup-parent", testCgroup}
	checkInspected(t, "echo hog slow", func(args ...string) []string { return append(args, server...) })
}

// TestInspectorListsEveryTool: the official TypeScript SDK (inside the
// Inspector) drops from tools/list any tool whose schema it cannot read;
// airlock_session_close, with "required": null, was one, so an agent
// could open sessions and never close them. Every tool airlock serves,
// built-ins and tools with each kind of input, is listed by the
// Inspector exactly as by the Go SDK.
func TestInspectorListsEveryTool(t *testing.T) {
	requireRoot(t)
	inspector(t)
	cfg := writeConfig(t, mcpTools+`
  typed:
    command: [echo, "{n}", "{flag}", "{word}", "{pw}"]
    inputs:
      n: {type: integer, minimum: 0, maximum: 9, required: true}
      flag: {type: boolean}
      word: {enum: [a, b], default: a}
      pw: {secret: true}
mcp: {builtins: [run, session]}
`)
	server := []string{"--", airlockBin(t), "mcp", "--config", cfg, "--socket", filepath.Join(t.TempDir(), "none.sock"),
		"--audit", filepath.Join(t.TempDir(), "audit.db"), "--state-dir", "/run/airlock-test-cli", "--cgroup-parent", testCgroup}
	out, err := inspect(t, append([]string{"--method", "tools/list"}, server...)...)
	if err != nil {
		t.Fatal(err)
	}
	var r inspected
	jsonOut(t, []byte(out), &r)
	const want = "airlock_run airlock_session_close airlock_session_exec airlock_session_open airlock_session_read airlock_session_write echo hog slow typed"
	if got := r.names(); got != want {
		t.Fatalf("the Inspector lists %q, want %q", got, want)
	}
	// Nor does it find a schema less portable than it could be (a type
	// list such as [array, null] was one, in each output schema).
	cmd := exec.Command(inspector(t), append([]string{"--cli", "--method", "tools/list", "--strict"}, server...)...)
	cmd.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + t.TempDir(), "NO_COLOR=1"}
	var errb bytes.Buffer
	cmd.Stderr = &errb
	if err := cmd.Run(); err != nil || strings.Contains(errb.String(), "portab") {
		t.Errorf("the Inspector's schema check: %v\n%s", err, errb.String())
	}
}

// TestInspectorHTTP: the Inspector over streamable HTTP against the
// daemon's TCP listener, with bearer tokens and their scopes.
func TestInspectorHTTP(t *testing.T) {
	requireRoot(t)
	inspector(t)
	addr := testutil.FreeAddr(t)
	const full, narrow = "inspector-token-0123456789", "narrow-token-0123456789ab"
	t.Setenv("TEST_MCP_FULL", full)
	t.Setenv("TEST_MCP_NARROW", narrow)
	serveForTest(t, mcpTools+`
server:
  tcp: `+addr+`
  tokens:
    - {name: full, secret: full, tools: ["*"]}
    - {name: narrow, secret: narrow, tools: [echo]}
secrets:
  full: {env: TEST_MCP_FULL}
  narrow: {env: TEST_MCP_NARROW}
`)
	url := "http://" + addr + "/mcp"
	as := func(token string) func(...string) []string {
		return func(args ...string) []string {
			return append([]string{url, "--transport", "http", "--header", "Authorization: Bearer " + token}, args...)
		}
	}
	checkInspected(t, "echo hog slow", as(full))
	// A narrow token sees and calls only its tools.
	out, err := inspect(t, as(narrow)("--method", "tools/list")...)
	var r inspected
	if err != nil {
		t.Fatal(err)
	}
	jsonOut(t, []byte(out), &r)
	if r.names() != "echo" {
		t.Fatalf("the narrow token sees %q", r.names())
	}
	if out, err := inspect(t, as(narrow)("--method", "tools/call", "--tool-name", "hog")...); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Fatalf("the narrow token called hog: %s %v", out, err)
	}
	// No token, no answer.
	if out, err := inspect(t, url, "--transport", "http", "--method", "tools/list"); err == nil {
		t.Fatalf("tools/list without a token: %s", out)
	}
}

// TestInspectorGateway: a real third-party stdio MCP server from npm
// (server-everything) runs in a sandbox behind the gateway, its code
// mounted read-only from the host, and the Inspector calls it through
// `airlock mcp`.
func TestInspectorGateway(t *testing.T) {
	requireRoot(t)
	inspector(t)
	modules := os.Getenv("AIRLOCK_TEST_NODE_MODULES")
	if _, err := os.Stat(filepath.Join(modules, "@modelcontextprotocol/server-everything/dist/index.js")); err != nil {
		t.Fatalf("server-everything is not installed beside the Inspector: %v", err)
	}
	t.Setenv("TEST_GW_TOKEN", "must-not-reach-the-server-0123")
	cfg := writeConfig(t, `
secrets:
  tok: {env: TEST_GW_TOKEN}
services:
  api:
    upstream: http://127.0.0.1:1
    private: true
    credential: {secret: tok}
    operations: [GET /x]
mcp_servers:
  everything:
    command: [node, /srv/node_modules/@modelcontextprotocol/server-everything/dist/index.js, stdio]
    mounts: [{source: `+modules+`, target: /srv/node_modules}]
    services: [api]
`)
	server := []string{"--", airlockBin(t), "mcp", "--config", cfg, "--socket", filepath.Join(t.TempDir(), "none.sock"),
		"--audit", filepath.Join(t.TempDir(), "audit.db"), "--state-dir", "/run/airlock-test-cli", "--cgroup-parent", testCgroup}
	run := func(args ...string) inspected {
		t.Helper()
		out, err := inspect(t, append(args, server...)...)
		if err != nil {
			t.Fatalf("inspector %v: %v", args, err)
		}
		var r inspected
		jsonOut(t, []byte(out), &r)
		return r
	}
	if names := run("--method", "tools/list").names(); !strings.Contains(names, "everything.echo") || !strings.Contains(names, "everything.get-sum") {
		t.Fatalf("tools/list: %q", names)
	}
	if r := run("--method", "tools/call", "--tool-name", "everything.echo", "--tool-arg", "message=through the gateway"); r.IsError || !strings.Contains(r.text(), "through the gateway") {
		t.Fatalf("everything.echo: %+v", r)
	}
	if r := run("--method", "tools/call", "--tool-name", "everything.get-sum", "--tool-arg", "a=2", "b=40"); r.IsError || !strings.Contains(r.text(), "42") {
		t.Fatalf("everything.get-sum: %+v", r)
	}
	// The server's environment has the broker's address, not the secret.
	r := run("--method", "tools/call", "--tool-name", "everything.get-env")
	if strings.Contains(r.text(), "must-not-reach-the-server") || !strings.Contains(r.text(), "AIRLOCK_BROKER_URL") {
		t.Fatalf("everything.get-env: %q", r.text())
	}
	if n := cliCgroups(t); n != 0 {
		t.Errorf("%d sandbox cgroups left", n)
	}
}

// TestInspectorWrongToken: a wrong token gets the answer MCP's
// authorization spec expects of a server that takes bearer tokens only:
// 401 with WWW-Authenticate: Bearer error="invalid_token", and no
// resource_metadata (nor a metadata document) that would send a client to
// an OAuth authorization server. The Inspector 2.12.0 treats any 401 of
// streamable HTTP as a cue for OAuth; told to use no interactive OAuth
// (--stored-auth-only, its mode for scripts) it reports the
// authentication error, with the daemon's word that the token is wrong;
// interactive, it finds no authorization server and ends in the same
// error, never in a login.
func TestInspectorWrongToken(t *testing.T) {
	requireRoot(t)
	inspector(t)
	addr := testutil.FreeAddr(t)
	t.Setenv("TEST_MCP_FULL", "inspector-token-0123456789")
	serveForTest(t, mcpTools+`
server:
  tcp: `+addr+`
  tokens:
    - {name: full, secret: full, tools: ["*"]}
secrets:
  full: {env: TEST_MCP_FULL}
`)
	url := "http://" + addr + "/mcp"
	const wrong = "Authorization: Bearer not-the-token-0123456789"
	for _, tt := range []struct {
		name, header, challenge, msg string
	}{
		{"wrong token", wrong, `Bearer realm="airlock", error="invalid_token", error_description="the bearer token is not valid"`, "the bearer token is not valid"},
		{"no token", "", `Bearer realm="airlock"`, "a valid bearer token is required"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			req, _ := http.NewRequest("POST", url, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}`))
			if k, v, ok := strings.Cut(tt.header, ": "); ok {
				req.Header.Set(k, v)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if got := resp.Header.Get("WWW-Authenticate"); resp.StatusCode != 401 || got != tt.challenge {
				t.Errorf("%d %q, want 401 %q", resp.StatusCode, got, tt.challenge)
			}
			args := []string{url, "--transport", "http"}
			if tt.header != "" {
				args = append(args, "--header", tt.header)
			}
			args = append(args, "--stored-auth-only", "--method", "tools/list")
			out, err := inspect(t, args...)
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != 3 || !strings.Contains(err.Error(), `"code":"auth_required"`) || !strings.Contains(err.Error(), tt.msg) {
				t.Errorf("the Inspector: %q %v, want exit 3 (auth_required) saying %q", out, err, tt.msg)
			}
		})
	}
	// No protected resource metadata: nothing names an authorization
	// server.
	for _, p := range []string{"/.well-known/oauth-protected-resource", "/.well-known/oauth-protected-resource/mcp", "/.well-known/oauth-authorization-server"} {
		resp, err := http.Get("http://" + addr + p)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode == 200 {
			t.Errorf("%s: 200", p)
		}
	}
	// Interactive, the Inspector looks for an authorization server, finds
	// none, and ends in the authentication error, not in a login.
	cmd := exec.Command(inspector(t), "--cli", url, "--transport", "http", "--header", wrong, "--method", "tools/list")
	cmd.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + t.TempDir(), "NO_COLOR=1", "MCP_AUTO_OPEN_ENABLED=true", "MCP_INSPECTOR_SECRET_STORE=memory"}
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), `"code":"auth_required"`) || !strings.Contains(string(out), "bearer token") || strings.Contains(string(out), "http://localhost") {
		t.Errorf("the Inspector, interactive: %v\n%s", err, out)
	}
}
