package e2bserver

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/audit"
	"github.com/airlockhq/airlock/internal/config"
	"github.com/airlockhq/airlock/internal/edge"
	"github.com/airlockhq/airlock/internal/node"
	"github.com/airlockhq/airlock/internal/runner/attach"
	"github.com/airlockhq/airlock/internal/tokens"
	"github.com/airlockhq/airlock/result"
	"github.com/airlockhq/airlock/sandbox"
)

// fakeCore is a node for the E2B API's protocol tests: no sandbox, no
// root. A session it is asked to open is open's answer.
type fakeCore struct {
	counts node.Counters
	open   func(t *config.Tool, c *node.Caller, life time.Duration) error
}

var _ Core = (*fakeCore)(nil)
var _ edge.Core = (*fakeCore)(nil)

func (f *fakeCore) Audit() *audit.Log      { return nil }
func (f *fakeCore) Counts() *node.Counters { return &f.counts }
func (f *fakeCore) Authorize(c *node.Caller, tool string) error {
	if !c.Allows(tool) {
		return node.ErrNoCaller
	}
	return nil
}
func (f *fakeCore) Exec(context.Context, *node.Session, string, sandbox.ExecRequest) (*result.Result, error) {
	return nil, node.ErrGone
}
func (f *fakeCore) Pause(context.Context, *node.Session, string, string) error {
	return errors.New("not in this fake")
}
func (f *fakeCore) Resume(context.Context, *node.Session, string, string, time.Duration) (bool, error) {
	return false, errors.New("not in this fake")
}
func (f *fakeCore) OpenSession(_ context.Context, t *config.Tool, _ string, c *node.Caller, _, life time.Duration, _ *attach.Policy) (*node.Session, error) {
	return nil, f.open(t, c, life)
}
func (f *fakeCore) Plan(string) attach.Plan                     { return attach.Plan{} }
func (f *fakeCore) RecordCode(string, *node.Session, node.Code) {}
func (f *fakeCore) RecordPort(string, *node.Session, node.Port) {}
func (f *fakeCore) SessionsOf(*node.Caller) []*node.Session     { return nil }
func (f *fakeCore) StartKernel(context.Context, *node.Session, string, string, string, []string) (*node.Kernel, error) {
	return nil, node.ErrGone
}

const testKey = "e2b-test-key-0123456789"

// serveFake serves the E2B API over a fake core, with one API key, of a
// token scoped to tool sh.
func serveFake(t *testing.T, open func(t *config.Tool, c *node.Caller, life time.Duration) error) (*fakeCore, string) {
	t.Helper()
	t.Setenv("TEST_E2B_KEY", testKey)
	cfg, err := config.Parse("a.yaml", []byte(`
server:
  e2b: 127.0.0.1:7499
  tokens:
    - {name: ci, secret: key, tools: [sh]}
secrets:
  key: {env: TEST_E2B_KEY}
tools:
  sh: {}
  other: {}
`))
	if err != nil {
		t.Fatal(err)
	}
	toks, err := tokens.Load(cfg)
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeCore{open: open}
	s := New(f, edge.NewGuard(f, toks, nil), Options{Config: cfg, StallTimeout: time.Second})
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(srv.Close)
	return f, srv.URL
}

// TestCreateProtocol drives the E2B control plane's create through the
// edge alone: what the core is asked, and what the SDK's caller is
// answered ({code, message} and the status E2B's clients read) for a key
// missing, a template unknown or outside the key's scope, a timeout out
// of range, and the core's refusal. No sandbox is made, no root needed.
func TestCreateProtocol(t *testing.T) {
	var asked struct {
		tool string
		who  string
		life time.Duration
	}
	_, base := serveFake(t, func(tool *config.Tool, c *node.Caller, life time.Duration) error {
		asked.tool, asked.who, asked.life = tool.Name, c.Name, life
		return &node.Refusal{Kind: sandbox.ErrCapacity, RetryAfter: 1, Msg: "the node is at capacity: 3 sandboxes are live; try again shortly"}
	})
	for _, tt := range []struct {
		name, key, body string
		status          int
		says            string
	}{
		{"no key", "", `{"templateID":"sh"}`, 401, "a valid API key is required"},
		{"wrong key", "not-the-key-0123456789", `{"templateID":"sh"}`, 401, "a valid API key is required"},
		{"unknown template", testKey, `{"templateID":"nope"}`, 404, `no template "nope"`},
		{"out of scope", testKey, `{"templateID":"other"}`, 403, `may not use template "other"`},
		{"timeout", testKey, `{"templateID":"sh","timeout":0}`, 400, "timeout 0 s"},
		{"not JSON", testKey, `{"templateID":`, 400, "not valid JSON"},
		{"refused by the core", testKey, `{"templateID":"sh","timeout":60}`, 503, "at capacity"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			req, _ := http.NewRequestWithContext(t.Context(), "POST", base+"/sandboxes", strings.NewReader(tt.body))
			req.Header.Set("Content-Type", "application/json")
			if tt.key != "" {
				req.Header.Set("X-API-KEY", tt.key)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			var e struct {
				Code    int    `json:"code"`
				Message string `json:"message"`
			}
			if err := json.Unmarshal(b, &e); err != nil || resp.StatusCode != tt.status || e.Code != tt.status || !strings.Contains(e.Message, tt.says) {
				t.Errorf("got %d %s (%v), want %d saying %q", resp.StatusCode, b, err, tt.status, tt.says)
			}
			if ra := resp.Header.Get("Retry-After"); (tt.status == 503) != (ra == "1") {
				t.Errorf("Retry-After %q for a %d", ra, resp.StatusCode)
			}
		})
	}
	if asked.tool != "sh" || asked.who != "token:ci" || asked.life != time.Minute {
		t.Errorf("the core was asked for %+v", asked)
	}
}
