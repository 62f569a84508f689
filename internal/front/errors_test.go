package front

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/internal/e2b"
	"github.com/airlockhq/airlock/internal/errdefs"
)

// The errors the front's handlers return, as they make them.
var (
	gone      = errdefs.Errorf(errNodeGone, "session s1 ended: its node n1 is gone")
	failed    = errdefs.Errorf(errNodeFailed, "node n1 failed the call")
	unauth    = errdefs.New(errUnauthenticated, "a valid API key is required")
	notPlaced = errdefs.Errorf(errdefs.ErrUnavailable, "no live node serves tool %q", "t")
)

func TestAPIStatusOf(t *testing.T) {
	tests := []struct {
		name       string
		err        error
		wantStatus int
		wantCode   string
	}{
		{"invalid", errdefs.Errorf(errdefs.ErrInvalid, "limit %q: want 1 to 1000", "0"), 400, api.CodeInvalid},
		{"not found", errdefs.New(errdefs.ErrNotFound, "no run"), 404, api.CodeNotFound},
		{"denied", errdefs.New(errdefs.ErrDenied, "token:ci may not use tool"), 403, api.CodeForbidden},
		{"limit", errdefs.New(errdefs.ErrLimit, "the request is over 64 MiB"), 413, api.CodeTooLarge},
		{"conflict", errdefs.New(errdefs.ErrConflict, "ended"), 409, api.CodeEnded},
		{"unavailable", errNoNodeLive, 503, api.CodeUnavailable},
		{"no node for the tool", notPlaced, 503, api.CodeUnavailable},
		{"placement's own failure", &noNode{tried: 2}, 503, api.CodeUnavailable},
		{"unauthenticated", unauth, 401, api.CodeUnauthorized},
		{"a session's node gone", gone, 503, api.CodeEnded},
		{"a node failed", failed, 502, api.CodeUnavailable},
		{"wrapped with context", fmt.Errorf("relay: %w", failed), 502, api.CodeUnavailable},
		{"a health check's (E2B only)", errdefs.Errorf(errNotRunning, "%w", gone), 503, api.CodeEnded},
		{"unclassified", errors.New("boom"), 500, api.CodeInternal},
	}
	for _, tt := range tests {
		status, code := apiStatusOf(tt.err)
		if status != tt.wantStatus || code != tt.wantCode {
			t.Errorf("%s: apiStatusOf(%v) = %d %s, want %d %s", tt.name, tt.err, status, code, tt.wantStatus, tt.wantCode)
		}
	}
}

func TestE2BStatusOf(t *testing.T) {
	tests := []struct {
		name       string
		err        error
		wantStatus int
		wantCode   string
	}{
		{"invalid", errdefs.New(errdefs.ErrInvalid, "a file call carries E2b-Sandbox-Id"), 400, e2b.CodeInvalidArgument},
		{"not found", errdefs.New(errdefs.ErrNotFound, "sandbox not found"), 404, e2b.CodeNotFound},
		{"unavailable", errdefs.New(errdefs.ErrUnavailable, "no live node serves template"), 503, e2b.CodeUnavailable},
		{"unauthenticated", unauth, 401, e2b.CodeUnauthenticated},
		// The SDK tells an ended sandbox by 404.
		{"a sandbox's node gone", gone, 404, e2b.CodeNotFound},
		{"a node failed", failed, 502, e2b.CodeUnavailable},
		// envd's health check: 502 whatever the cause.
		{"health: node gone", errdefs.Errorf(errNotRunning, "%w", gone), 502, e2b.CodeUnavailable},
		{"health: not found", errdefs.Errorf(errNotRunning, "%w", errdefs.New(errdefs.ErrNotFound, "x")), 502, e2b.CodeUnavailable},
		{"a node's own status", &nodeStatus{status: 401, msg: "node n1 refused the list"}, 401, e2b.CodeUnavailable},
		{"unclassified", errors.New("boom"), 500, e2b.CodeInternal},
	}
	for _, tt := range tests {
		status, code := e2bStatusOf(tt.err)
		if status != tt.wantStatus || code != tt.wantCode {
			t.Errorf("%s: e2bStatusOf(%v) = %d %s, want %d %s", tt.name, tt.err, status, code, tt.wantStatus, tt.wantCode)
		}
	}
}

// TestWriters checks what each writer puts on the wire: status, body,
// and Retry-After for an error that says when.
func TestWriters(t *testing.T) {
	busy := &retryLater{errdefs.New(errdefs.ErrUnavailable, "128 uploads are passing through this front already; try again"), 1}
	tests := []struct {
		name      string
		write     func(http.ResponseWriter, error)
		err       error
		wantBody  string
		wantRetry string
	}{
		{"native", writeErr, gone, `{"code":"ended","error":"session s1 ended: its node n1 is gone"}`, ""},
		{"native, retry", writeErr, busy, `{"code":"unavailable","error":"128 uploads are passing through this front already; try again"}`, "1"},
		{"e2b", writeE2BErr, gone, `{"code":404,"message":"session s1 ended: its node n1 is gone"}`, ""},
		{"e2b, retry", writeE2BErr, busy, `{"code":503,"message":"128 uploads are passing through this front already; try again"}`, "1"},
	}
	for _, tt := range tests {
		rec := httptest.NewRecorder()
		tt.write(rec, tt.err)
		var got, want any
		if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
			t.Fatalf("%s: body %q: %v", tt.name, rec.Body, err)
		}
		_ = json.Unmarshal([]byte(tt.wantBody), &want)
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s: body = %s, want %s", tt.name, rec.Body, tt.wantBody)
		}
		if got := rec.Header().Get("Retry-After"); got != tt.wantRetry {
			t.Errorf("%s: Retry-After = %q, want %q", tt.name, got, tt.wantRetry)
		}
		if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
			t.Errorf("%s: Content-Type = %q, want application/json", tt.name, ct)
		}
	}
}

// TestWriteConnectErr checks the three forms of a sandbox-side error.
func TestWriteConnectErr(t *testing.T) {
	tests := []struct {
		name       string
		header     http.Header
		wantStatus int
		wantCT     string
	}{
		{"stream", http.Header{"Content-Type": {"application/connect+json"}}, 200, "application/connect+json"},
		{"unary", http.Header{"Connect-Protocol-Version": {"1"}}, 404, "application/json"},
		{"not connect", http.Header{}, 404, "application/json"},
	}
	for _, tt := range tests {
		r := httptest.NewRequest("POST", "/process.Process/Start", nil)
		r.Header = tt.header
		rec := httptest.NewRecorder()
		writeConnectErr(rec, r, gone)
		if rec.Code != tt.wantStatus || rec.Header().Get("Content-Type") != tt.wantCT {
			t.Errorf("%s: %d %s, want %d %s", tt.name, rec.Code, rec.Header().Get("Content-Type"), tt.wantStatus, tt.wantCT)
		}
	}
}
