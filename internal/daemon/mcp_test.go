package daemon

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/client"
	"github.com/airlockhq/airlock/internal/testutil"
)

const mcpConfig = `
tools:
  echo:
    description: prints its words
    command: [echo, "{word}", "{more}"]
    pool: {warm: 1}
    inputs:
      word: {required: true, description: the first word}
      more: {max_length: 10}
  slow:
    command: [sh, -c, "for i in 1 2 3; do echo tick $i; sleep 0.2; done"]
  nap:
    command: [sleep, "{seconds}"]
    limits: {time: 300ms}
    inputs:
      seconds: {type: integer, minimum: 0, maximum: 60, required: true}
  login:
    command: [sh, -c, "echo got ${{#1}} bytes", sh, "{password}"]
    inputs:
      password: {secret: true, required: true}
  kernel:
    command: [uname, -r]
  plain: {}
`

// startMCP runs a daemon with the MCP test tools and connects the Go
// SDK's client to its /mcp endpoint over the unix socket. With runsc set,
// every tool has isolation gvisor.
func startMCP(t *testing.T, opts *mcp.ClientOptions, runsc string) (*mcp.ClientSession, *client.Client) {
	t.Helper()
	cfg, adjust := mcpConfig, func(*Options) {}
	if runsc != "" {
		cfg = withIsolation(cfg, "gvisor")
		adjust = func(o *Options) { o.Sandbox.Runsc = runsc }
	}
	_, sock := serveConfig(t, cfg, adjust)
	return mcpConnect(t, sock, opts), client.New(sock)
}

// withIsolation gives every tool of a config's tools section (tools at
// two spaces, their settings at four) the isolation iso.
func withIsolation(cfg, iso string) string {
	var b strings.Builder
	in := false
	for _, line := range strings.SplitAfter(cfg, "\n") {
		switch {
		case strings.HasPrefix(line, "tools:"):
			in = true
		case in && len(line) > 2 && line[0] != ' ':
			in = false
		case in && strings.HasPrefix(line, "  ") && !strings.HasPrefix(line, "   "):
			name, rest, _ := strings.Cut(strings.TrimSpace(line), ":")
			rest = strings.TrimSpace(rest)
			if rest == "" {
				b.WriteString(line + "    isolation: " + iso + "\n")
				continue
			}
			// A flow mapping: {} or {k: v}.
			inner := strings.TrimSpace(strings.TrimSuffix(strings.TrimPrefix(rest, "{"), "}"))
			if inner != "" {
				inner += ", "
			}
			b.WriteString("  " + name + ": {" + inner + "isolation: " + iso + "}\n")
			continue
		}
		b.WriteString(line)
	}
	return b.String()
}

func resultText(r *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range r.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

func TestMCPOverHTTP(t *testing.T) { testMCPOverHTTP(t, "") }

// TestMCPOverHTTPGVisor is TestMCPOverHTTP with every tool on gVisor.
func TestMCPOverHTTPGVisor(t *testing.T) { testMCPOverHTTP(t, testutil.Runsc(t)) }

func testMCPOverHTTP(t *testing.T, runsc string) {
	var mu sync.Mutex
	var ticks []string
	cs, c := startMCP(t, &mcp.ClientOptions{ProgressNotificationHandler: func(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
		mu.Lock()
		ticks = append(ticks, req.Params.Message)
		mu.Unlock()
	}}, runsc)
	ctx := t.Context()
	tools, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tl := range tools.Tools {
		names = append(names, tl.Name)
		if tl.Name == "echo" {
			schema, _ := json.Marshal(tl.InputSchema)
			if tl.Description != "prints its words" || !strings.Contains(string(schema), `"required":["word"]`) || tl.OutputSchema == nil {
				t.Errorf("echo is listed as %+v with schema %s", tl, schema)
			}
		}
	}
	if strings.Join(names, " ") != "echo kernel login nap slow" {
		t.Fatalf("tools %v; want the tools with a command", names)
	}

	call := func(name string, args any) *mcp.CallToolResult {
		t.Helper()
		r, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return r
	}
	// The backend is the tool's.
	if k := resultText(call("kernel", nil)); strings.Contains(k, "gvisor") != (runsc != "") {
		t.Fatalf("kernel %q, with runsc %q", k, runsc)
	}
	// Shell metacharacters are one argument, printed as given.
	r := call("echo", map[string]any{"word": "a b; id `id` $(id) | tee /x"})
	if r.IsError || resultText(r) != "a b; id `id` $(id) | tee /x\n" {
		t.Fatalf("echo: %+v %q", r, resultText(r))
	}
	var res struct {
		Outcome   string `json:"outcome"`
		ExitCode  int    `json:"exit_code"`
		SandboxID string `json:"sandbox_id"`
	}
	b, _ := json.Marshal(r.StructuredContent)
	if err := json.Unmarshal(b, &res); err != nil || res.Outcome != "exited" || res.SandboxID == "" {
		t.Fatalf("structured content %s", b)
	}
	// Refused arguments are tool errors naming the input.
	for _, tt := range []struct {
		args any
		want string
	}{
		{map[string]any{}, `invalid input "word": is required`},
		{map[string]any{"word": "--version"}, `invalid input "word": must not start with '-'`},
		{map[string]any{"word": "x", "more": strings.Repeat("y", 11)}, `invalid input "more": 11 bytes; at most 10`},
		{map[string]any{"word": 7}, `invalid input "word": must be a string`},
		{map[string]any{"word": "x", "rm": "-rf"}, `invalid input "rm": is not an input of this tool`},
	} {
		r := call("echo", tt.args)
		if !r.IsError || !strings.Contains(resultText(r), tt.want) {
			t.Errorf("echo %v: %+v %q, want a tool error with %q", tt.args, r, resultText(r), tt.want)
		}
	}
	// A breach is a tool error naming the limit.
	r = call("nap", map[string]any{"seconds": 5})
	if !r.IsError || !strings.Contains(resultText(r), "limit exceeded: time") {
		t.Fatalf("nap: %+v %q", r, resultText(r))
	}
	// Output arrives as progress to a client that asked for it.
	r, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "slow", Meta: mcp.Meta{"progressToken": "p1"}})
	if err != nil || r.IsError || resultText(r) != "tick 1\ntick 2\ntick 3\n" {
		t.Fatalf("slow: %+v %v", r, err)
	}
	mu.Lock()
	got := strings.Join(ticks, "|")
	mu.Unlock()
	if !strings.Contains(got, "tick 1") || !strings.Contains(got, "tick 3") {
		t.Errorf("progress notifications %q", got)
	}
	// A tool without a command, or none at all, cannot be called.
	for _, name := range []string{"plain", "nope"} {
		if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name}); err == nil || !strings.Contains(err.Error(), "unknown tool") {
			t.Errorf("calling %s: %v", name, err)
		}
	}
	// Every call is in the audit log; a secret input never is.
	r = call("login", map[string]any{"password": "hunter2-do-not-log"})
	if r.IsError || resultText(r) != "got 18 bytes\n" {
		t.Fatalf("login: %+v %q", r, resultText(r))
	}
	evs := waitAudit(t, c, client.AuditQuery{Kind: "mcp.call"}, func(evs []api.AuditEvent) bool { return len(evs) >= 9 })
	page, err := c.Audit(ctx, client.AuditQuery{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	all, _ := json.Marshal(page)
	if strings.Contains(string(all), "hunter2") {
		t.Fatal("a secret input reached the audit log")
	}
	outcomes := map[string]int{}
	for _, ev := range evs {
		outcomes[ev.Tool+":"+ev.Decision]++
		if !strings.HasPrefix(ev.Client, "unix:uid=0,pid=") {
			t.Errorf("mcp.call without the caller: %+v", ev)
		}
		if ev.Tool == "echo" && ev.Decision == "exited" && ev.Sandbox != res.SandboxID {
			t.Errorf("mcp.call of the echo that ran names sandbox %q, want %q", ev.Sandbox, res.SandboxID)
		}
	}
	if outcomes["echo:exited"] != 1 || outcomes["echo:invalid"] != 5 || outcomes["nap:limit"] != 1 || outcomes["login:exited"] != 1 {
		t.Errorf("mcp.call outcomes %v", outcomes)
	}
}

// roundTripper is a function as an http.RoundTripper.
type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// TestShutdownWithMCPClientOpen: a connected MCP client keeps a standing
// event stream open; shutdown ends it rather than waiting out the grace
// period.
func TestShutdownWithMCPClientOpen(t *testing.T) {
	d, sock := serveConfig(t, mcpConfig, nil)
	cs := mcpConnect(t, sock, nil)
	if _, err := cs.ListTools(t.Context(), nil); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond) // the client opens its stream
	start := time.Now()
	if err := d.Shutdown(t.Context()); err != nil {
		t.Fatalf("shutdown with an MCP client connected: %v", err)
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("shutdown took %s with an MCP client connected (grace is 5s)", took)
	}
}
