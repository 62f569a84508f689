package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlockhq/airlock/client"
	"github.com/airlockhq/airlock/internal/audit"
)

const mcpTools = `
tools:
  echo:
    description: prints its words
    command: [echo, "{word}"]
    inputs:
      word: {required: true}
  slow:
    command: [sh, -c, "for i in 1 2 3; do echo tick $i; sleep 0.2; done"]
  hog:
    description: allocates memory until stopped
    command: [python3, -c, "b = []\nwhile True: b.append(bytearray(1 << 20))"]
    limits: {memory: 32MiB, time: 20s}
  sh: {}
`

func mcpText(r *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range r.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

// connectStdio starts `airlock mcp` with args and connects the Go SDK's
// client to its standard input and output.
func connectStdio(t *testing.T, opts *mcp.ClientOptions, args ...string) *mcp.ClientSession {
	t.Helper()
	cmd := exec.Command(airlockBin(t), append([]string{"mcp"}, args...)...)
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, opts).Connect(t.Context(), &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatalf("connect: %v\n%s", err, stderr.String())
	}
	t.Cleanup(func() {
		cs.Close()
		if t.Failed() {
			t.Logf("airlock mcp's stderr:\n%s", stderr.String())
		}
	})
	return cs
}

// exerciseMCP lists and calls the tools of mcpTools through cs.
func exerciseMCP(t *testing.T, cs *mcp.ClientSession, progress func() string) {
	t.Helper()
	ctx := t.Context()
	tools, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tl := range tools.Tools {
		names = append(names, tl.Name)
	}
	if strings.Join(names, " ") != "echo hog slow" {
		t.Fatalf("tools %v", names)
	}
	r, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"word": "hi; rm -rf / #"}})
	if err != nil || r.IsError || mcpText(r) != "hi; rm -rf / #\n" {
		t.Fatalf("echo: %+v %v", r, err)
	}
	r, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"word": "-e"}})
	if err != nil || !r.IsError || !strings.Contains(mcpText(r), `invalid input "word"`) {
		t.Fatalf("option-looking word: %+v %v", r, err)
	}
	r, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "hog"})
	if err != nil || !r.IsError || !strings.Contains(mcpText(r), "limit exceeded: memory") {
		t.Fatalf("hog: %+v %q %v", r, mcpText(r), err)
	}
	r, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "slow", Meta: mcp.Meta{"progressToken": "t1"}})
	if err != nil || r.IsError || mcpText(r) != "tick 1\ntick 2\ntick 3\n" {
		t.Fatalf("slow: %+v %v", r, err)
	}
	if got := progress(); !strings.Contains(got, "tick 2") {
		t.Errorf("progress notifications: %q", got)
	}
	if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "sh", Arguments: map[string]any{}}); err == nil {
		t.Error("a tool without a command was callable")
	}
}

func progressRecorder() (*mcp.ClientOptions, func() string) {
	var mu sync.Mutex
	var msgs []string
	return &mcp.ClientOptions{ProgressNotificationHandler: func(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
			mu.Lock()
			msgs = append(msgs, req.Params.Message)
			mu.Unlock()
		}}, func() string {
			mu.Lock()
			defer mu.Unlock()
			return strings.Join(msgs, "|")
		}
}

// TestMCPStdioEmbedded runs `airlock mcp` with no daemon: it runs the
// tools itself, and records the calls in the audit log it is given.
func TestMCPStdioEmbedded(t *testing.T) {
	requireRoot(t)
	cfg := writeConfig(t, mcpTools)
	db := filepath.Join(t.TempDir(), "audit.db")
	opts, progress := progressRecorder()
	cs := connectStdio(t, opts, "--config", cfg, "--socket", filepath.Join(t.TempDir(), "none.sock"), "--audit", db,
		"--state-dir", "/run/airlock-test-cli", "--cgroup-parent", testCgroup)
	exerciseMCP(t, cs, progress)
	cs.Close()
	l, err := audit.Open(t.Context(), audit.Options{Path: db})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close(context.Background())
	evs, err := l.Query(t.Context(), audit.Query{Kind: audit.KindMCPCall})
	if err != nil {
		t.Fatal(err)
	}
	// Four calls ran or were refused by airlock; the fifth, of a tool
	// without a command (not listed), was refused by the SDK: all five
	// are recorded, that one as denied.
	if len(evs) != 5 || !strings.HasPrefix(evs[0].Client, "stdio:uid=0,ppid=") || evs[4].Tool != "sh" || evs[4].Decision != audit.Deny {
		t.Fatalf("mcp.call events %+v", evs)
	}
	if n := cliCgroups(t); n != 0 {
		t.Errorf("%d sandbox cgroups left after airlock mcp ended", n)
	}
}

// TestMCPStdioViaDaemon runs `airlock mcp` beside a daemon: it relays to
// the daemon's /mcp, and the calls are the daemon's runs.
func TestMCPStdioViaDaemon(t *testing.T) {
	requireRoot(t)
	sock, c := serveForTest(t, mcpTools)
	opts, progress := progressRecorder()
	cs := connectStdio(t, opts, "--socket", sock)
	exerciseMCP(t, cs, progress)
	page, err := c.Audit(t.Context(), client.AuditQuery{Kind: "mcp.call"})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Events) < 3 {
		t.Fatalf("the daemon recorded %d MCP calls", len(page.Events))
	}
}

// serveForTest runs `airlock serve` with tools until the test ends.
func serveForTest(t *testing.T, tools string, extra ...string) (string, *client.Client) {
	t.Helper()
	cfg := writeConfig(t, tools)
	sock := filepath.Join(t.TempDir(), "airlock.sock")
	cmd := exec.Command(airlockBin(t), append([]string{"serve", "--config", cfg, "--socket", sock, "--audit", filepath.Join(t.TempDir(), "audit.db"),
		"--state-dir", "/run/airlock-test-cli", "--cgroup-parent", testCgroup}, extra...)...)
	cmd.Env = append([]string{"PATH=/usr/bin:/bin"}, os.Environ()...)
	var logs bytes.Buffer
	cmd.Stderr = &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		if err := cmd.Wait(); err != nil {
			t.Errorf("daemon: %v\n%s", err, logs.String())
		}
	})
	c := waitForDaemon(t, sock, &logs, 20*time.Second)
	return sock, c
}

// jsonOut decodes the JSON a command printed.
func jsonOut(t *testing.T, out []byte, v any) {
	t.Helper()
	if err := json.Unmarshal(out, v); err != nil {
		t.Fatalf("%v in %s", err, out)
	}
}
