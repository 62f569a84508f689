package daemon

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/internal/audit"
	"github.com/airlockhq/airlock/internal/node"
)

// TestNoCallerRefused serves the API on a listener wired with no caller
// wrapper (no withCaller, no requireToken): every request is refused
// with 401, and nothing runs. A request without a caller used to be
// taken for the node.Local socket's, so such a listener would have handed
// root-socket rights to whoever reached it. A run or session started in
// code with no caller is refused too. The effect is checked in the
// pools (no sandbox claimed), the session table and the audit log.
func TestNoCallerRefused(t *testing.T) {
	d, _ := serveConfig(t, testConfig, nil)
	srv := httptest.NewServer(d.api.Handler())
	defer srv.Close()
	for _, tt := range []struct {
		method, path, body string
	}{
		{"POST", "/v1/runs", `{"tool":"sh","argv":["sh","-c","echo ran"]}`},
		{"POST", "/v1/sessions", `{"tool":"sh"}`},
		{"GET", "/v1/sessions", ""},
		{"GET", "/v1/ps", ""},
		{"GET", "/v1/tools", ""},
		{"GET", "/v1/audit", ""},
		{"GET", "/healthz", ""},
		{"POST", "/mcp", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`},
	} {
		req, err := http.NewRequestWithContext(t.Context(), tt.method, srv.URL+tt.path, strings.NewReader(tt.body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var got api.Error
		err = json.NewDecoder(resp.Body).Decode(&got)
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized || err != nil || got.Code != api.CodeUnauthorized {
			t.Errorf("%s %s: got %d %+v (%v), want 401 %s", tt.method, tt.path, resp.StatusCode, got, err, api.CodeUnauthorized)
		}
	}

	// In code: a job or a session with no caller is not run as node.Local's.
	tool := d.opts.Config.Tools["sh"]
	res, done, err := d.Run(t.Context(), node.RunRequest{Tool: tool, Argv: []string{"true"}, Capture: true})
	if !errors.Is(err, node.ErrNoCaller) || res != nil || done != nil {
		t.Errorf("run with no caller: %v %v, want node.ErrNoCaller", res, err)
	}
	if s, err := d.OpenSession(t.Context(), tool, "test", nil, time.Minute, time.Minute, nil); !errors.Is(err, node.ErrNoCaller) || s != nil {
		t.Errorf("session with no caller: %v, want node.ErrNoCaller", err)
	}

	// Nothing ran: no sandbox claimed, no session, nothing recorded.
	for _, name := range d.Config().Order {
		if st := d.Pool(name).Stats(); st.Hits+st.Misses != 0 {
			t.Errorf("pool %s: %d claims, want none", name, st.Hits+st.Misses)
		}
	}
	if open := d.Sessions(); open != 0 {
		t.Errorf("%d sessions open, want none", open)
	}
	if err := d.Audit().Append(t.Context()); err != nil {
		t.Fatal(err)
	}
	for _, kind := range []string{"run", "session", "mcp"} {
		evs, err := d.Audit().Query(t.Context(), audit.Query{Kind: kind})
		if err != nil || len(evs) != 0 {
			t.Errorf("%s events: %d (%v), want none", kind, len(evs), err)
		}
	}
}
