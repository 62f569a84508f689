package daemon

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/client"
	"github.com/airlockhq/airlock/internal/mcpedge"
	"github.com/airlockhq/airlock/internal/testutil"
	"github.com/airlockhq/airlock/internal/testutil/isolatednet"
)

// testServerDir holds the test MCP server where a sandbox may read it
// (mount sources must be reachable by the sandbox's ids).
func testServerDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "airlock-testmcp")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	os.Chmod(dir, 0o755)
	b, err := os.ReadFile(testutil.Binary(t, "github.com/airlockhq/airlock/internal/testmcp"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "testmcp"), b, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// startGateway runs a daemon whose config has the test MCP server, and
// returns a function that opens an MCP client session to it.
func startGateway(t *testing.T) (func() *mcp.ClientSession, *Daemon, *client.Client) {
	t.Helper()
	isolatednet.Require(t)
	t.Setenv("TEST_GW_SECRET", "gateway-secret-value-1234")
	d, sock := serveConfig(t, `
secrets:
  s: {env: TEST_GW_SECRET}
services:
  svc:
    upstream: http://127.0.0.1:1
    private: true
    credential: {secret: s}
    operations: [GET /x]
mcp_servers:
  t:
    command: [/srv/testmcp/testmcp]
    mounts: [{source: `+testServerDir(t)+`, target: /srv/testmcp}]
    limits: {memory: 128MiB}
    services: [svc]
tools:
  echo:
    command: [echo, "{word}"]
    inputs: {word: {}}
`, nil)
	connect := func() *mcp.ClientSession {
		t.Helper()
		return mcpConnect(t, sock, nil)
	}
	return connect, d, client.New(sock)
}

func TestGateway(t *testing.T) {
	connect, d, c := startGateway(t)
	ctx := t.Context()
	before := cgroupCount(t)
	cs := connect()
	tools, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tl := range tools.Tools {
		names = append(names, tl.Name)
	}
	if got := strings.Join(names, " "); got != "echo t.crash t.dial t.echo t.env t.hang t.read" {
		t.Fatalf("tools %q", got)
	}
	call := func(cs *mcp.ClientSession, name string, args map[string]any) (string, error) {
		t.Helper()
		r, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
		if err != nil {
			return "", err
		}
		return resultText(r), nil
	}
	if got, err := call(cs, "t.echo", map[string]any{"text": "relayed"}); err != nil || got != "relayed" {
		t.Fatalf("t.echo: %q %v", got, err)
	}
	// The server's sandbox: it cannot read the host, reach anything
	// unlisted, or see the service's credential.
	for _, tt := range []struct {
		tool string
		args map[string]any
		bad  string
	}{
		{"t.read", map[string]any{"path": "/etc/shadow"}, "read:"},
		{"t.read", map[string]any{"path": "/root/.bashrc"}, "read:"},
		{"t.read", map[string]any{"path": "/proc/1/environ"}, "TEST_GW_SECRET"},
		{"t.dial", map[string]any{"addr": "169.254.169.254:80"}, "connected"},
		{"t.dial", map[string]any{"addr": "10.0.0.1:80"}, "connected"},
		{"t.dial", map[string]any{"addr": "127.0.0.1:22"}, "connected"},
		{"t.env", nil, "gateway-secret-value"},
	} {
		got, err := call(cs, tt.tool, tt.args)
		if err != nil || strings.Contains(got, tt.bad) {
			t.Errorf("%s %v: %q %v", tt.tool, tt.args, got, err)
		}
	}
	if got, _ := call(cs, "t.env", nil); !strings.Contains(got, "AIRLOCK_BROKER_URL=") {
		t.Errorf("the server's environment lacks the broker: %q", got)
	}
	// Each client session has its own server, in its own sandbox.
	cs2 := connect()
	if n := cgroupCount(t); n < before+2 {
		t.Errorf("%d sandbox cgroups with two sessions open, %d before", n, before)
	}
	// A crash: the call fails clearly, later calls too, and the other
	// session's server is untouched.
	if _, err := call(cs, "t.crash", nil); err == nil {
		t.Fatal("t.crash answered")
	}
	_, err = call(cs, "t.echo", map[string]any{"text": "again"})
	if err == nil || !strings.Contains(err.Error(), "exited with code 3") || !strings.Contains(err.Error(), "crashing on request") {
		t.Fatalf("a call after the crash: %v", err)
	}
	if got, err := call(cs2, "t.echo", map[string]any{"text": "other"}); err != nil || got != "other" {
		t.Fatalf("the other session after the crash: %q %v", got, err)
	}
	// Ending a session destroys its server's sandbox.
	cs2.Close()
	deadline := time.Now().Add(10 * time.Second)
	for d.mcp.Running() > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d MCP servers still running after their sessions ended", d.mcp.Running())
		}
		time.Sleep(50 * time.Millisecond)
	}
	// Calls through the gateway are in the audit log.
	evs := waitAudit(t, c, client.AuditQuery{Kind: "mcp.call"}, func(evs []api.AuditEvent) bool { return len(evs) >= 10 })
	seen := map[string]bool{}
	for _, ev := range evs {
		seen[ev.Tool+":"+ev.Decision] = true
	}
	if !seen["t.echo:ok"] || !seen["t.crash:failed"] {
		t.Errorf("gateway calls recorded: %v", seen)
	}
}

// TestGatewayHang: a server that never answers gets its call cut at the
// timeout and its sandbox destroyed.
func TestGatewayHang(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for the call timeout")
	}
	old := mcpedge.ServerCall
	mcpedge.ServerCall = time.Second
	defer func() { mcpedge.ServerCall = old }()
	connect, d, _ := startGateway(t)
	cs := connect()
	start := time.Now()
	_, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "t.hang"})
	if err == nil || !strings.Contains(err.Error(), "did not answer within 1s") || time.Since(start) > 10*time.Second {
		t.Fatalf("t.hang: %v after %s", err, time.Since(start))
	}
	deadline := time.Now().Add(10 * time.Second)
	for d.mcp.Running() > 0 {
		if time.Now().After(deadline) {
			t.Fatal("the hung server is still running")
		}
		time.Sleep(50 * time.Millisecond)
	}
}
