package daemon

import (
	"context"
	"errors"
	"net"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/client"
	"github.com/airlockhq/airlock/internal/config"
	"github.com/airlockhq/airlock/internal/testutil/isolatednet"
	"github.com/airlockhq/airlock/sandbox"
)

func freePort(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func TestTCPTokensAndScopes(t *testing.T) {
	isolatednet.Require(t)
	const ciToken = "ci-0123456789abcdef-ci"
	const adminToken = "admin-0123456789abcdef"
	t.Setenv("TEST_CI_TOKEN", ciToken)
	t.Setenv("TEST_ADMIN_TOKEN", adminToken)
	addr := freePort(t)
	cfg, err := config.Parse("airlock.yaml", []byte(`
server:
  tcp: `+addr+`
  tokens:
    - {name: ci, secret: ci, tools: [sh]}
    - {name: admin, secret: admin, tools: ["*"]}
secrets:
  ci: {env: TEST_CI_TOKEN}
  admin: {env: TEST_ADMIN_TOKEN}
tools:
  sh: {}
  other: {}
`))
	if err != nil {
		t.Fatal(err)
	}
	d, err := New(t.Context(), Options{Config: cfg, Socket: filepath.Join(t.TempDir(), "a.sock"),
		Sandbox: sandbox.Options{StateDir: testStateDir, CgroupParent: testCgroup}, Grace: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Serve(ctx) }()
	defer func() { cancel(); <-done }()
	var ce *client.Error
	status := func(err error) int {
		if errors.As(err, &ce) {
			return ce.Status
		}
		if err != nil {
			t.Fatalf("not an API error: %v", err)
		}
		return 200
	}
	// No token, a wrong token, a token's prefix: 401.
	for _, tok := range []string{"", "wrong", ciToken[:len(ciToken)-1]} {
		if got := status(client.NewTCP(addr, tok).Health(t.Context())); got != 401 {
			t.Errorf("token %q: got %d, want 401", tok, got)
		}
	}
	ci := client.NewTCP(addr, ciToken)
	if _, err := ci.Run(t.Context(), api.RunRequest{Tool: "sh", Argv: []string{"true"}}); err != nil {
		t.Fatal(err)
	}
	if got := status(func() error {
		_, err := ci.Run(t.Context(), api.RunRequest{Tool: "other", Argv: []string{"true"}})
		return err
	}()); got != 403 || ce.Code != api.CodeForbidden {
		t.Fatalf("out of scope: %d", got)
	}
	tools, err := ci.Tools(t.Context())
	if err != nil || len(tools) != 1 || tools[0].Name != "sh" {
		t.Fatalf("ci sees tools %+v %v", tools, err)
	}
	// A session belongs to the token that opened it.
	s, err := ci.CreateSession(t.Context(), api.SessionRequest{Tool: "sh"})
	if err != nil {
		t.Fatal(err)
	}
	admin := client.NewTCP(addr, adminToken)
	if got := status(func() error { _, err := admin.Session(t.Context(), s.ID); return err }()); got != 404 {
		t.Fatalf("another token saw the session: %d", got)
	}
	if _, err := ci.Exec(t.Context(), s.ID, api.ExecRequest{Argv: []string{"true"}}); err != nil {
		t.Fatal(err)
	}
	if err := ci.DeleteSession(t.Context(), s.ID); err != nil {
		t.Fatal(err)
	}
	// DNS rebinding: a page's name pointed at 127.0.0.1 sends its own
	// Host, and a browser adds its Origin.
	for _, hdr := range []map[string]string{{"Host": "evil.example:" + port(addr)}, {"Origin": "http://evil.example"}} {
		req, _ := http.NewRequest("GET", "http://"+addr+"/healthz", nil)
		req.Header.Set("Authorization", "Bearer "+adminToken)
		for k, v := range hdr {
			if k == "Host" {
				req.Host = v
			} else {
				req.Header.Set(k, v)
			}
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusMisdirectedRequest && resp.StatusCode != http.StatusForbidden {
			t.Errorf("%v: got %d", hdr, resp.StatusCode)
		}
	}
	if n := d.counts.unauthorized.Load(); n != 3 {
		t.Fatalf("%d unauthorized counted, want 3", n)
	}
}

func TestShortTokenRefused(t *testing.T) {
	isolatednet.Require(t)
	t.Setenv("TEST_SHORT", "short")
	cfg, err := config.Parse("a.yaml", []byte("server:\n  tcp: 127.0.0.1:1\n  tokens: [{name: a, secret: s, tools: ['*']}]\nsecrets:\n  s: {env: TEST_SHORT}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := New(t.Context(), Options{Config: cfg, Socket: filepath.Join(t.TempDir(), "a.sock"), Sandbox: sandbox.Options{StateDir: testStateDir, CgroupParent: testCgroup}}); err == nil {
		t.Fatal("a daemon started with a 5-byte token")
	}
}

func port(addr string) string {
	_, p, _ := net.SplitHostPort(addr)
	return p
}
