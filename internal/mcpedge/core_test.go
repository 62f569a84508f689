package mcpedge

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlockhq/airlock/internal/audit"
	"github.com/airlockhq/airlock/internal/config"
	"github.com/airlockhq/airlock/internal/edge"
	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/node"
	"github.com/airlockhq/airlock/internal/runner/attach"
	"github.com/airlockhq/airlock/internal/tokens"
	"github.com/airlockhq/airlock/result"
	"github.com/airlockhq/airlock/sandbox"
)

// fakeCore is a node for MCP's protocol tests: no sandbox, no root. Its
// run is run; it has no sessions and no MCP servers.
type fakeCore struct {
	log    *audit.Log
	counts node.Counters
	run    func(ctx context.Context, j node.RunRequest) (*result.Result, func(), error)
}

var _ Core = (*fakeCore)(nil)
var _ edge.Core = (*fakeCore)(nil)

func (f *fakeCore) Tools() *config.Config  { return nil }
func (f *fakeCore) Audit() *audit.Log      { return f.log }
func (f *fakeCore) Counts() *node.Counters { return &f.counts }
func (f *fakeCore) Authorize(c *node.Caller, tool string) error {
	if !c.Allows(tool) {
		return errdefs.Errorf(errdefs.ErrDenied, "%s may not use tool %q", c.Name, tool)
	}
	return nil
}
func (f *fakeCore) Exec(context.Context, *node.Session, string, sandbox.ExecRequest) (*result.Result, error) {
	return nil, node.ErrGone
}
func (f *fakeCore) Later(done func()) { done() }
func (f *fakeCore) OpenSession(context.Context, *config.Tool, string, *node.Caller, time.Duration, time.Duration, *attach.Policy) (*node.Session, error) {
	return nil, node.ErrShutdown
}
func (f *fakeCore) Quitting() context.Context                                      { return context.Background() }
func (f *fakeCore) RecordFile(string, *node.Session, string, string, int64, error) {}
func (f *fakeCore) ReserveCapture(context.Context, *config.Tool, *sandbox.Limits) (func(), error) {
	return func() {}, nil
}
func (f *fakeCore) Run(ctx context.Context, j node.RunRequest) (*result.Result, func(), error) {
	return f.run(ctx, j)
}
func (f *fakeCore) StartProcess(context.Context, *config.Tool, *node.Caller, string) (*node.Process, error) {
	return nil, node.ErrShutdown
}

// connectFake connects an MCP client (the Go SDK's) to the MCP server
// the edge builds for caller c over a fake core, in memory.
func connectFake(t *testing.T, c *node.Caller, run func(ctx context.Context, j node.RunRequest) (*result.Result, func(), error)) *mcp.ClientSession {
	t.Helper()
	cfg, err := config.Parse("a.yaml", []byte(`
tools:
  echo:
    description: says a word
    command: [echo, "{word}"]
    inputs:
      word: {required: true, max_length: 10}
  other:
    command: [echo, other]
`))
	if err != nil {
		t.Fatal(err)
	}
	log, err := audit.Open(t.Context(), audit.Options{Path: filepath.Join(t.TempDir(), "audit.db")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { log.Close(context.Background()) })
	f := &fakeCore{log: log, run: run}
	s := New(f, edge.NewGuard(f, &tokens.Set{}, nil), Options{Config: cfg, Version: "test"})
	ct, st := mcp.NewInMemoryTransports()
	if _, err := s.MCPServer(c, "test").Connect(t.Context(), st, nil); err != nil {
		t.Fatal(err)
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil).Connect(t.Context(), ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

// TestToolsProtocol drives MCP through the edge alone: the tools a
// caller is given, what the core is asked for a tools/call, and what the
// client is answered for a result and for the core's refusal. No sandbox
// is made, and no root is needed.
func TestToolsProtocol(t *testing.T) {
	var asked node.RunRequest
	run := func(_ context.Context, j node.RunRequest) (*result.Result, func(), error) {
		asked = j
		if j.Argv[len(j.Argv)-1] == "busy" {
			return nil, nil, &node.Refusal{Kind: node.ErrTooMany, RetryAfter: 1, Msg: "token ci has 2 calls in flight"}
		}
		return &result.Result{Outcome: result.Exited, Stdout: result.Output(j.Argv[1] + "\n")}, func() {}, nil
	}
	scoped := node.TokenCaller(&config.Token{Name: "ci", Tools: []string{"echo"}})
	for _, tt := range []struct {
		name   string
		caller *node.Caller
		tools  []string
	}{
		{"local", node.Local, []string{"echo", "other"}},
		{"scoped token", scoped, []string{"echo"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cs := connectFake(t, tt.caller, run)
			list, err := cs.ListTools(t.Context(), nil)
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, tool := range list.Tools {
				if !strings.HasPrefix(tool.Name, "airlock_") {
					names = append(names, tool.Name)
				}
			}
			if !slices.Equal(names, tt.tools) {
				t.Errorf("tools given: %v, want %v", names, tt.tools)
			}
			res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"word": "hi"}})
			if err != nil || res.IsError || !strings.Contains(resultText(res), "hi") {
				t.Fatalf("echo: %+v %v", res, err)
			}
			if asked.Tool.Name != "echo" || asked.Caller != tt.caller || !asked.Capture || strings.Join(asked.Argv, " ") != "echo hi" {
				t.Errorf("the core was asked %+v", asked)
			}
			res, err = cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"word": "busy"}})
			if err == nil && !res.IsError || !strings.Contains(errText(res, err), "2 calls in flight") {
				t.Errorf("a refused call: %+v %v", res, err)
			}
			// An argument past its declared bound never reaches the core.
			asked = node.RunRequest{}
			res, err = cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"word": strings.Repeat("x", 11)}})
			if err == nil && !res.IsError || asked.Tool != nil {
				t.Errorf("an oversized argument: %+v %v (the core was asked %+v)", res, err, asked)
			}
		})
	}
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

func errText(r *mcp.CallToolResult, err error) string {
	if err != nil {
		return err.Error()
	}
	return resultText(r)
}
