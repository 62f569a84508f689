package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/testutil"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/client"
	"github.com/airlockhq/airlock/internal/config"
	"github.com/airlockhq/airlock/internal/testutil/isolatednet"
	"github.com/airlockhq/airlock/sandbox"
)

func freePort(t *testing.T) string { return testutil.FreeAddr(t) }

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
	sock := filepath.Join(t.TempDir(), "a.sock")
	d, err := New(t.Context(), Options{Config: cfg, Socket: sock,
		Sandbox: sandbox.Options{StateDir: testStateDir, CgroupParent: testCgroup, InitPath: testutil.InitPath(t)}, AuditPath: testAudit(t), Grace: 5 * time.Second})
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
	// No token, a wrong token, a token's prefix: 401 (health alone
	// needs none, see TestHealthWithoutToken).
	for _, tok := range []string{"", "wrong", ciToken[:len(ciToken)-1]} {
		_, err := client.NewTCP(addr, tok).Tools(t.Context())
		if got := status(err); got != 401 {
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
		req, _ := http.NewRequest("GET", "http://"+addr+"/v1/tools", nil)
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
	if n := d.Counts().Unauthorized.Load(); n != 3 {
		t.Fatalf("%d unauthorized counted, want 3", n)
	}

	// Every refusal is in the audit log with who asked: a client's first
	// in a window on its own, the rest summed in one record at the
	// window's end (flushed here rather than waited for).
	d.FlushRefusals()
	local := client.New(sock)
	denied := waitAudit(t, local, client.AuditQuery{Kind: "api.request", Decision: "deny"}, func(evs []api.AuditEvent) bool { return len(evs) >= 2 })
	total, first := 0, 0
	for _, ev := range denied {
		var det struct {
			Status   int `json:"status"`
			Repeated int `json:"repeated"`
		}
		if err := json.Unmarshal(ev.Detail, &det); err != nil {
			t.Fatal(err)
		}
		switch {
		case ev.Client == "tcp:127.0.0.1" && det.Repeated > 0:
			total += det.Repeated
		case strings.HasPrefix(ev.Client, "tcp:127.0.0.1:") && det.Status == 401:
			first++
			total++
		}
	}
	if first != 1 || total != 6 {
		t.Errorf("denied requests in the audit log: %d recorded alone (want the first), %d in all (want 3 without a valid token, 2 with a foreign Host or Origin, 1 out of scope): %+v", first, total, denied)
	}
	started := waitAudit(t, local, client.AuditQuery{Kind: "run.started", Client: "token:ci"}, func(evs []api.AuditEvent) bool { return len(evs) >= 1 })
	if started[0].Tool != "sh" {
		t.Errorf("ci's run recorded as %+v", started[0])
	}
	// A token reads only the events it caused: no other caller's, no
	// daemon events (TestAuditScopedToToken attacks this).
	page, err := ci.Audit(t.Context(), client.AuditQuery{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Events) == 0 {
		t.Fatal("ci sees no events of its own")
	}
	for _, ev := range page.Events {
		if ev.Client != "token:ci" || ev.Tool != "sh" && ev.Tool != "" {
			t.Fatalf("ci sees an event outside its scope: %+v", ev)
		}
	}
	if page, err := ci.Audit(t.Context(), client.AuditQuery{Tool: "other"}); err != nil || len(page.Events) != 0 {
		t.Fatalf("ci asked for tool other's events and got %+v %v", page, err)
	}
}

func TestShortTokenRefused(t *testing.T) {
	isolatednet.Require(t)
	t.Setenv("TEST_SHORT", "short")
	cfg, err := config.Parse("a.yaml", []byte("server:\n  tcp: 127.0.0.1:1\n  tokens: [{name: a, secret: s, tools: ['*']}]\nsecrets:\n  s: {env: TEST_SHORT}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := New(t.Context(), Options{Config: cfg, Socket: filepath.Join(t.TempDir(), "a.sock"), Sandbox: sandbox.Options{StateDir: testStateDir, CgroupParent: testCgroup, InitPath: testutil.InitPath(t)}, AuditPath: testAudit(t)}); err == nil {
		t.Fatal("a daemon started with a 5-byte token")
	}
}

func port(addr string) string {
	_, p, _ := net.SplitHostPort(addr)
	return p
}

// TestHealthWithoutToken: /healthz answers a probe with no token on the
// TCP and E2B listeners, saying only ok (or unavailable); every other
// path still wants one, and a health probe is not a refusal to record.
func TestHealthWithoutToken(t *testing.T) {
	t.Setenv("HEALTH_TOK", "health-token-0123456789abcdef")
	tcp, e2b := freePort(t), freePort(t)
	d, _ := serveConfig(t, `
server:
  tcp: `+tcp+`
  e2b: `+e2b+`
  tokens:
    - {name: a, secret: a, tools: ["*"]}
secrets:
  a: {env: HEALTH_TOK}
tools:
  sh: {}
`, nil)
	for _, addr := range []string{tcp, e2b} {
		for path, want := range map[string]int{"/healthz": 200, "/healthz/x": 401, "/metrics": 401} {
			resp, err := http.Get("http://" + addr + path)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != want && !(addr == e2b && want == 401 && resp.StatusCode == 404) {
				t.Errorf("GET %s%s without a token: %d %s; want %d", addr, path, resp.StatusCode, b, want)
			}
			if want == 200 && strings.TrimSpace(string(b)) != `{"status":"ok"}` {
				t.Errorf("GET %s%s: %s; want only the status", addr, path, b)
			}
		}
	}
	if n := d.Counts().Unauthorized.Load(); n == 0 {
		t.Error("no request without a token was refused")
	}
}
