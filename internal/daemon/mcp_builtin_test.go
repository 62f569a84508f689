package daemon

import (
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlockhq/airlock/internal/node"
)

// TestMCPBuiltins: airlock_run in a chosen profile, and the session
// tools, whose sandbox belongs to the MCP session and goes with it.
func TestMCPBuiltins(t *testing.T) {
	d, sock := serveConfig(t, `
mcp: {builtins: [run, session]}
tools:
  sh: {limits: {time: 2s}}
  py: {}
`, nil)
	connect := func() *mcp.ClientSession { return mcpConnect(t, sock, nil) }
	cs := connect()
	defer cs.Close()
	call := func(name string, args map[string]any) *mcp.CallToolResult {
		t.Helper()
		r, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: name, Arguments: args})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return r
	}
	r := call("airlock_run", map[string]any{"tool": "sh", "argv": []string{"sh", "-c", "cat; echo done"}, "stdin": "in "})
	if r.IsError || resultText(r) != "in done\n" {
		t.Fatalf("airlock_run: %+v %q", r, resultText(r))
	}
	r = call("airlock_run", map[string]any{"tool": "sh", "argv": []string{"sleep", "10"}})
	if !r.IsError || !strings.Contains(resultText(r), "limit exceeded: time") {
		t.Fatalf("airlock_run breach: %q", resultText(r))
	}
	for _, tt := range []struct {
		args map[string]any
		want string
	}{
		{map[string]any{"tool": "nope", "argv": []string{"true"}}, `no tool "nope"`},
		{map[string]any{"tool": "sh", "argv": []string{}}, `invalid input "argv"`},
		{map[string]any{"tool": "sh", "argv": []string{"true"}, "shell": true}, "invalid arguments"},
	} {
		if r := call("airlock_run", tt.args); !r.IsError || !strings.Contains(resultText(r), tt.want) {
			t.Errorf("airlock_run %v: %q, want %q", tt.args, resultText(r), tt.want)
		}
	}
	// Sessions: nothing before open; then state persists between calls.
	if r := call("airlock_session_exec", map[string]any{"argv": []string{"true"}}); !r.IsError || !strings.Contains(resultText(r), "no sandbox open") {
		t.Fatalf("exec before open: %q", resultText(r))
	}
	if r := call("airlock_session_open", map[string]any{"tool": "py"}); r.IsError {
		t.Fatalf("open: %q", resultText(r))
	}
	if r := call("airlock_session_open", map[string]any{"tool": "py"}); !r.IsError {
		t.Fatal("a second open succeeded")
	}
	if r := call("airlock_session_write", map[string]any{"path": "d/a.txt", "content": "hello"}); r.IsError {
		t.Fatalf("write: %q", resultText(r))
	}
	if r := call("airlock_session_exec", map[string]any{"argv": []string{"sh", "-c", "cat d/a.txt > b.txt; echo $(cat b.txt) again"}}); r.IsError || resultText(r) != "hello again\n" {
		t.Fatalf("exec: %q", resultText(r))
	}
	if r := call("airlock_session_read", map[string]any{"path": "b.txt"}); r.IsError || resultText(r) != "hello" {
		t.Fatalf("read: %q", resultText(r))
	}
	if r := call("airlock_session_read", map[string]any{"path": "../../etc/passwd"}); !r.IsError {
		t.Fatalf("read outside the workspace: %q", resultText(r))
	}
	open := d.SessionsOf(node.Local)
	if len(open) != 1 {
		t.Fatalf("%d sandbox sessions open, want the one tied to the MCP session", len(open))
	}
	sess := open[0]
	// Another MCP session has its own, and none to begin with.
	cs2 := connect()
	if r, err := cs2.CallTool(t.Context(), &mcp.CallToolParams{Name: "airlock_session_read", Arguments: map[string]any{"path": "b.txt"}}); err != nil || !r.IsError {
		t.Fatalf("another MCP session read the first one's file: %+v %v", r, err)
	}
	cs2.Close()
	// The MCP session's end destroys its sandbox.
	cs.Close()
	deadline := time.Now().Add(10 * time.Second)
	for sess.Alive() {
		if time.Now().After(deadline) {
			t.Fatal("the sandbox outlived its MCP session")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestMCPSessionOpenRace: opens of one MCP session's sandbox sent at once
// give it exactly one; each other open is refused, and its sandbox, made
// while the first was being made, is destroyed rather than left to wait
// out its idle time unreachable.
func TestMCPSessionOpenRace(t *testing.T) {
	d, sock := serveConfig(t, "mcp: {builtins: [session]}\ntools:\n  sh: {}\n", nil)
	cs := mcpConnect(t, sock, nil)
	const n = 6
	var wg sync.WaitGroup
	var opened atomic.Int32
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "airlock_session_open", Arguments: map[string]any{"tool": "sh"}})
			if err != nil {
				t.Error(err)
				return
			}
			if !r.IsError {
				opened.Add(1)
			} else if !strings.Contains(resultText(r), "already has a sandbox") {
				t.Errorf("a refused open: %q", resultText(r))
			}
		}()
	}
	wg.Wait()
	if opened.Load() != 1 {
		t.Fatalf("%d opens succeeded, want 1", opened.Load())
	}
	deadline := time.Now().Add(10 * time.Second)
	for d.Runtime().Usage().Sandboxes != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("%d sandboxes live for one MCP session's sandbox", d.Runtime().Usage().Sandboxes)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
