package daemon

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/client"
	"github.com/airlockhq/airlock/internal/config"
	"github.com/airlockhq/airlock/internal/mcpedge"
)

// TestMCPBypassCorpus is the MCP surface's regression corpus: each row is
// an attack on a tool call or on another caller's session, the refusal it
// must meet and the audit line that records it, with what ran (if
// anything) checked from the host. The egress proxy's corpus is in
// internal/egress, the broker's in internal/broker.
func TestMCPBypassCorpus(t *testing.T) {
	oldCheck, oldPrune := mcpedge.OwnerCheck, mcpedge.OwnerPrune
	// Owner entries are checked on every session's opening, at once: a
	// session must stay its opener's however long it goes unused.
	mcpedge.OwnerCheck, mcpedge.OwnerPrune = 0, 0
	t.Cleanup(func() { mcpedge.OwnerCheck, mcpedge.OwnerPrune = oldCheck, oldPrune })
	addr := freePort(t)
	const tokA, tokB = "corpus-a-0123456789abcdef", "corpus-b-0123456789abcdef"
	t.Setenv("TEST_CORPUS_A", tokA)
	t.Setenv("TEST_CORPUS_B", tokB)
	_, sock := serveConfig(t, `
server:
  tcp: `+addr+`
  tokens:
    - {name: a, secret: a, tools: [echo, opt]}
    - {name: b, secret: b, tools: ["*"]}
secrets:
  a: {env: TEST_CORPUS_A}
  b: {env: TEST_CORPUS_B}
tools:
  echo:
    command: [echo, "{word}", "{more}"]
    inputs:
      word: {required: true}
      more: {max_length: 10}
  opt:
    # The option goes with its optional argument, or not at all.
    command: [echo, [--flag, "{flag}"], "{word}"]
    inputs:
      flag: {}
      word: {required: true}
  admin:
    command: [echo, admin]
`, nil)
	c := client.New(sock)
	bearer := func(tok string) *http.Client {
		return &http.Client{Transport: roundTripper(func(r *http.Request) (*http.Response, error) {
			r = r.Clone(r.Context())
			r.Header.Set("Authorization", "Bearer "+tok)
			return http.DefaultTransport.RoundTrip(r)
		})}
	}
	connect := func(tok string) *mcp.ClientSession {
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "corpus", Version: "1"}, nil).
			Connect(t.Context(), &mcp.StreamableClientTransport{Endpoint: "http://" + addr + "/mcp", HTTPClient: bearer(tok)}, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cs.Close() })
		return cs
	}
	owner := connect(tokA)

	// Attacks through the arguments of a call by token a.
	calls := []struct {
		name, tool, args string
		// refusal is in the tool error and the mcp.call event's reason;
		// empty for a call that runs, printing out.
		refusal, out string
	}{
		{name: "option injection", tool: "echo", args: `{"word": "--help"}`, refusal: `invalid input "word": must not start with '-'`},
		{name: "undeclared input", tool: "echo", args: `{"word": "x", "rm": "-rf"}`, refusal: `invalid input "rm": is not an input of this tool`},
		{name: "over its length", tool: "echo", args: `{"word": "x", "more": "` + strings.Repeat("y", 11) + `"}`, refusal: `invalid input "more": 11 bytes; at most 10`},
		{name: "wrong type", tool: "echo", args: `{"word": ["a", "b"]}`, refusal: `invalid input "word": must be a string`},
		{name: "not an object", tool: "echo", args: `["--help"]`, refusal: "want a JSON object"},
		{name: "shell metacharacters stay one argument", tool: "echo", args: `{"word": "$(id) ; id | tee /x"}`, out: "$(id) ; id | tee /x\n"},
		{name: "an absent optional takes its option along", tool: "opt", args: `{"word": "w"}`, out: "w\n"},
		{name: "a given optional keeps its option", tool: "opt", args: `{"word": "w", "flag": "f"}`, out: "--flag f w\n"},
		{name: "a tool the token is not given", tool: "admin", args: `{}`, refusal: `tool "admin"`},
	}
	for _, tt := range calls {
		t.Run(tt.name, func(t *testing.T) {
			r, err := owner.CallTool(t.Context(), &mcp.CallToolParams{Name: tt.tool, Arguments: json.RawMessage(tt.args)})
			got := ""
			switch {
			case err != nil:
				got = err.Error()
			case r.IsError:
				got = resultText(r)
			}
			if tt.refusal == "" {
				if err != nil || r.IsError || resultText(r) != tt.out {
					t.Fatalf("got %v %q, want it run printing %q", err, got+resultTextOf(r), tt.out)
				}
				return
			}
			if !strings.Contains(got, tt.refusal) {
				t.Fatalf("got %v %q, want a refusal with %q", err, got, tt.refusal)
			}
			waitAudit(t, c, client.AuditQuery{Kind: "mcp.call", Client: "token:a", Tail: true, Limit: 20}, func(evs []api.AuditEvent) bool {
				for _, ev := range evs {
					if ev.Tool == tt.tool && ev.Decision != "exited" && strings.Contains(string(ev.Detail), jsonQuoted(tt.refusal)) {
						return true
					}
				}
				return false
			})
		})
	}

	// Attacks on token a's session by token b, who learned its id.
	for _, method := range []string{http.MethodPost, http.MethodGet, http.MethodDelete} {
		t.Run("another caller's session by "+method, func(t *testing.T) {
			connect(tokB) // an opening: the check of unused owners runs
			req, _ := http.NewRequest(method, "http://"+addr+"/mcp", strings.NewReader(`{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"admin","arguments":{}}}`))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Accept", "application/json, text/event-stream")
			req.Header.Set("Mcp-Session-Id", owner.ID())
			resp, err := bearer(tokB).Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusNotFound {
				t.Fatalf("%s with token a's session id: %d, want 404", method, resp.StatusCode)
			}
			waitAudit(t, c, client.AuditQuery{Kind: "api.request", Client: "token:b", Decision: "deny", Tail: true, Limit: 20}, func(evs []api.AuditEvent) bool {
				for _, ev := range evs {
					if strings.Contains(string(ev.Detail), "another caller opened") {
						return true
					}
				}
				return false
			})
			// The opener's session is untouched, and nothing ran for b.
			if _, err := owner.ListTools(t.Context(), nil); err != nil {
				t.Fatalf("the owner's session after the attempt: %v", err)
			}
			if evs := waitAudit(t, c, client.AuditQuery{Kind: "mcp.call", Client: "token:b", Limit: 10}, func([]api.AuditEvent) bool { return true }); len(evs) != 0 {
				t.Fatalf("token b's call ran: %+v", evs)
			}
		})
	}

	// A template whose literal option would take the next caller-supplied
	// value never loads.
	t.Run("shifting template", func(t *testing.T) {
		_, err := config.Parse("airlock.yaml", []byte("tools:\n  dl:\n    command: [curl, -o, \"{out}\", \"{url}\"]\n    inputs:\n      out: {}\n      url: {required: true}\n"))
		if err == nil || !strings.Contains(err.Error(), `[-o, "{out}"]`) {
			t.Fatalf("a template whose option would take the next argument: %v", err)
		}
	})
}

func resultTextOf(r *mcp.CallToolResult) string {
	if r == nil {
		return ""
	}
	return resultText(r)
}

// jsonQuoted is s as it appears inside a JSON string.
func jsonQuoted(s string) string {
	b, _ := json.Marshal(s)
	return string(b[1 : len(b)-1])
}
