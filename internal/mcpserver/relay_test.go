package mcpserver

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// upstream serves tools named names over an in-memory transport and
// returns a client session to it.
func upstream(t *testing.T, names ...string) *mcp.ClientSession {
	t.Helper()
	up := mcp.NewServer(&mcp.Implementation{Name: "up", Version: "1"}, nil)
	for _, n := range names {
		up.AddTool(&mcp.Tool{Name: n, InputSchema: map[string]any{"type": "object"}}, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "from " + n}}}, nil
		})
	}
	st, ct := mcp.NewInMemoryTransports()
	if _, err := up.Connect(t.Context(), st, nil); err != nil {
		t.Fatal(err)
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "relay", Version: "1"}, nil).Connect(t.Context(), ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

func TestMirror(t *testing.T) {
	s := mcp.NewServer(&mcp.Implementation{Name: "down", Version: "1"}, nil)
	if err := NewRelay().Mirror(t.Context(), s, Upstream{Session: upstream(t, "a", "b.c"), Prefix: "srv."}); err != nil {
		t.Fatal(err)
	}
	st, ct := mcp.NewInMemoryTransports()
	if _, err := s.Connect(t.Context(), st, nil); err != nil {
		t.Fatal(err)
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "c", Version: "1"}, nil).Connect(t.Context(), ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	r, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "srv.b.c"})
	if err != nil || r.Content[0].(*mcp.TextContent).Text != "from b.c" {
		t.Fatalf("relayed call: %+v %v", r, err)
	}
}

// TestMirrorRefusesHostileListings: an upstream that lists too many tools
// or names MCP does not allow is refused, not mirrored.
func TestMirrorRefusesHostileListings(t *testing.T) {
	many := make([]string, maxMirrored+1)
	for i := range many {
		many[i] = fmt.Sprintf("t%d", i)
	}
	for _, tt := range []struct {
		name  string
		tools []string
		want  string
	}{
		{"too many", many, "more than 512 tools"},
		{"control characters", []string{"ok", "bad\x1b[31mname"}, "MCP does not allow"},
		{"too long with the prefix", []string{strings.Repeat("x", 126)}, "MCP does not allow"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := mcp.NewServer(&mcp.Implementation{Name: "down", Version: "1"}, nil)
			err := NewRelay().Mirror(t.Context(), s, Upstream{Session: upstream(t, tt.tools...), Prefix: "srv."})
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Mirror = %v, want %q", err, tt.want)
			}
		})
	}
}
