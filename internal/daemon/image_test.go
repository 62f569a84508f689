package daemon

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/client"
	"github.com/airlockhq/airlock/internal/config"
	"github.com/airlockhq/airlock/internal/image"
	"github.com/airlockhq/airlock/internal/image/imagetest"
	"github.com/airlockhq/airlock/internal/testutil"
	"github.com/airlockhq/airlock/internal/testutil/isolatednet"
	"github.com/airlockhq/airlock/result"
	"github.com/airlockhq/airlock/sandbox"
)

// testImageStore is an empty image store, on a file system that takes
// idmapped mounts, removed after the test.
func testImageStore(t *testing.T) *image.Store {
	t.Helper()
	testutil.RequireRoot(t)
	dir, err := os.MkdirTemp("/var/tmp", "airlock-daemon-image-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	st, err := image.Open(image.Options{Dir: filepath.Join(dir, "store")})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// TestImageTool serves a tool whose image was imported from an OCI
// layout: the image's user, working directory, environment and command
// are the tool's defaults, and its pool keeps the image busy.
func TestImageTool(t *testing.T) {
	st := testImageStore(t)
	imp, err := st.Import(context.Background(), imagetest.Layout(t, imagetest.Tool(t, runtime.GOARCH), "tool:1"), image.ImportOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var given *config.Config
	_, sock := serveConfig(t, "images:\n  store: "+st.Dir()+"\n"+`tools:
  img:
    image: tool:1
    env:
      EXTRA: "yes"
    pool: {warm: 1}
  img-override:
    image: `+imp.Digest+`
    user: "77"
    workdir: /workspace
`, func(o *Options) { given = o.Config })
	c := client.New(sock)
	ctx := t.Context()
	for _, tt := range []struct {
		tool string
		argv []string
		want string
	}{
		{"img", nil, `"value":"1234:2345 /srv"`},
		{"img", []string{"/bin/t", "env", "GREETING"}, `"value":"hello"`},
		{"img", []string{"/bin/t", "env", "EXTRA"}, `"value":"yes"`},
		{"img", []string{"/bin/t", "cat", "/srv/data"}, `"value":"layer two"`},
		{"img", []string{"/bin/t", "stat", "/etc/gone"}, `"ok":false`},
		{"img-override", []string{"/bin/t", "id"}, `"value":"77:77 /workspace"`},
	} {
		r, err := c.Run(ctx, api.RunRequest{Tool: tt.tool, Argv: tt.argv})
		if err != nil {
			t.Fatalf("%s %v: %v", tt.tool, tt.argv, err)
		}
		if r.Outcome != result.Exited || r.ExitCode != 0 || !strings.Contains(string(r.Stdout), tt.want) {
			t.Errorf("%s %v: %s %d %q %q, want %s", tt.tool, tt.argv, r.Outcome, r.ExitCode, r.Stdout, r.Stderr, tt.want)
		}
	}
	// The audit log says which image each sandbox of the tool was made
	// from.
	waitAudit(t, c, client.AuditQuery{Kind: "sandbox.created", Tool: "img"}, func(evs []api.AuditEvent) bool {
		for _, e := range evs {
			if !strings.Contains(string(e.Detail), imp.Digest) {
				t.Fatalf("sandbox.created without the image: %s", e.Detail)
			}
		}
		return len(evs) > 0
	})
	// The image's defaults went into the daemon's own copy of the tool.
	if tl := given.Tools["img"]; strings.Join(tl.Env, " ") != "EXTRA=yes" || tl.Workdir != "/workspace" {
		t.Errorf("the caller's config changed: env %v workdir %s", tl.Env, tl.Workdir)
	}
	// The warm sandbox holds the image: removing it is refused.
	if _, err := st.Remove("tool:1", image.RemoveOptions{}); err == nil || !strings.Contains(err.Error(), "live sandbox") {
		t.Errorf("remove while a pool holds it: %v", err)
	}
}

// TestImageToolGVisor serves a gvisor tool whose image was imported from
// an OCI layout: the image is its root (read-only), with its defaults,
// on gVisor's kernel.
func TestImageToolGVisor(t *testing.T) {
	runsc := testutil.Runsc(t)
	st := testImageStore(t)
	if _, err := st.Import(context.Background(), imagetest.Layout(t, imagetest.Tool(t, runtime.GOARCH), "tool:1"), image.ImportOptions{}); err != nil {
		t.Fatal(err)
	}
	_, sock := serveConfig(t, "images:\n  store: "+st.Dir()+"\n"+`tools:
  img:
    image: tool:1
    isolation: gvisor
`, func(o *Options) { o.Sandbox.Runsc = runsc })
	c := client.New(sock)
	for _, tt := range []struct {
		argv []string
		want string
	}{
		{nil, `"value":"1234:2345 /srv"`},
		{[]string{"/bin/t", "cat", "/srv/data"}, `"value":"layer two"`},
		{[]string{"/bin/t", "cat", "/proc/sys/kernel/osrelease"}, `gvisor`},
		{[]string{"/bin/t", "write", "/srv/x", "y"}, `"ok":false`},
		{[]string{"/bin/t", "write", "/workspace/x", "y"}, `"ok":true`},
	} {
		r, err := c.Run(t.Context(), api.RunRequest{Tool: "img", Argv: tt.argv})
		if err != nil {
			t.Fatalf("%v: %v", tt.argv, err)
		}
		if r.Outcome != result.Exited || r.ExitCode != 0 || !strings.Contains(string(r.Stdout), tt.want) {
			t.Errorf("%v: %s %d %q %q, want %s", tt.argv, r.Outcome, r.ExitCode, r.Stdout, r.Stderr, tt.want)
		}
	}
}

// TestImageToolMissing: a tool naming an image that is not stored stops
// the daemon from starting, with the tool and the image named.
func TestImageToolMissing(t *testing.T) {
	testutil.RequireRoot(t)
	isolatednet.Require(t)
	cfg, err := config.Parse("a.yaml", []byte("images:\n  store: "+filepath.Join(t.TempDir(), "store")+"\ntools:\n  t:\n    image: absent:1\n"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = New(t.Context(), Options{Config: cfg, Socket: filepath.Join(t.TempDir(), "s.sock"), AuditPath: testAudit(t),
		Sandbox: sandbox.Options{StateDir: testStateDir, CgroupParent: testCgroup, InitPath: testutil.InitPath(t)}})
	if err == nil || !strings.Contains(err.Error(), "tool t") || !strings.Contains(err.Error(), "absent:1") {
		t.Errorf("New: %v", err)
	}
}

// TestGatewayFromImage: a third-party MCP server shipped as an image runs
// from it behind the gateway.
func TestGatewayFromImage(t *testing.T) {
	st := testImageStore(t)
	srv, err := os.ReadFile(testutil.Binary(t, "github.com/airlockhq/airlock/internal/testmcp"))
	if err != nil {
		t.Fatal(err)
	}
	layer := imagetest.Tar(t, imagetest.Dir("bin/"), imagetest.Entry{Name: "bin/testmcp", Data: string(srv), Mode: 0o755},
		imagetest.Dir("etc/"), imagetest.Entry{Name: "etc/os-release", Data: "ID=mcp-image\n"})
	img := imagetest.Image(t, runtime.GOARCH, v1.Config{Entrypoint: []string{"/bin/testmcp"}}, layer)
	if _, err := st.Import(context.Background(), imagetest.DockerSave(t, map[string]v1.Image{"example.com/mcp:1": img}), image.ImportOptions{}); err != nil {
		t.Fatal(err)
	}
	_, sock := serveConfig(t, "images:\n  store: "+st.Dir()+"\n"+`mcp_servers:
  m:
    image: example.com/mcp:1
    command: [/bin/testmcp]
`, nil)
	cs := mcpConnect(t, sock, nil)
	for name, args := range map[string]map[string]any{
		"m.echo": {"text": "from the image"},
		"m.read": {"path": "/etc/os-release"},
	} {
		r, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: name, Arguments: args})
		if err != nil || r.IsError {
			t.Fatalf("%s: %v %v", name, err, r)
		}
		if got := resultText(r); !strings.Contains(got, "from the image") && !strings.Contains(got, "ID=mcp-image") {
			t.Errorf("%s: %q", name, got)
		}
	}
}
