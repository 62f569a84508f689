package httpapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http/httptest"
	"testing"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/internal/config"
	"github.com/airlockhq/airlock/internal/edge"
	"github.com/airlockhq/airlock/internal/egress/policy"
	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/image"
	"github.com/airlockhq/airlock/internal/linux/inroot"
	"github.com/airlockhq/airlock/internal/mcpserver"
	"github.com/airlockhq/airlock/internal/node"
	"github.com/airlockhq/airlock/pool"
	"github.com/airlockhq/airlock/sandbox"
)

// TestStatusOf is the API's whole map of errors to answers: every class,
// the daemon's own kinds and the errors of the packages below that reach
// a handler. What clients see must not change by accident.
func TestStatusOf(t *testing.T) {
	capacity := fmt.Errorf("%w: 3 sandboxes are live, the most this node allows", sandbox.ErrCapacity)
	tests := []struct {
		name   string
		err    error
		status int
		code   string
		// refused says MCP answers it with a tool error (else a
		// JSON-RPC error).
		refused bool
	}{
		// The classes.
		{"invalid", errdefs.ErrInvalid, 400, api.CodeInvalid, true},
		{"not found", errdefs.ErrNotFound, 404, api.CodeNotFound, true},
		{"denied", errdefs.ErrDenied, 403, api.CodeForbidden, true},
		{"conflict", errdefs.ErrConflict, 409, api.CodeEnded, true},
		{"limit", errdefs.ErrLimit, 413, api.CodeTooLarge, true},
		{"unavailable", errdefs.ErrUnavailable, 503, api.CodeUnavailable, false},
		{"unclassified", errors.New("result could not be encoded"), 500, api.CodeInternal, false},

		// The daemon's kinds and errors.
		{"method", errdefs.Errorf(edge.ErrMethod, "%s is not allowed here", "PATCH"), 405, api.CodeMethodNotAllowed, true},
		{"no token", errdefs.New(edge.ErrUnauthenticated, "a valid bearer token is required"), 401, api.CodeUnauthorized, true},
		{"misdirected", errdefs.New(edge.ErrMisdirected, "this listener answers only to its own loopback address"), 421, api.CodeForbidden, true},
		{"no tool", (&Server{Core: &fakeCore{}, opts: Options{Config: &config.Config{Order: []string{"sh"}}}}).noTool("x"), 404, api.CodeNotFound, true},
		{"no command", errNoCommand, 400, api.CodeInvalid, true},
		{"session ended", errdefs.Errorf(errdefs.ErrConflict, "session %s has ended (%s)", "s_1", "deleted"), 409, api.CodeEnded, true},
		{"audit refused", node.ErrAuditRefused, 503, api.CodeAuditUnavailable, false},
		{"shutdown", node.ErrShutdown, 503, api.CodeUnavailable, false},
		{"no sandbox", node.ErrNoSandbox, 503, api.CodeUnavailable, false},
		{"bind", node.ErrBind, 503, api.CodeUnavailable, false},
		{"at capacity", node.AtCapacity(capacity), 503, api.CodeCapacity, false},
		{"max sessions", &node.Refusal{Kind: errdefs.ErrUnavailable, Msg: "256 sessions are open", RetryAfter: 5}, 503, api.CodeUnavailable, false},
		{"token concurrency", &node.Refusal{Kind: node.ErrTooMany, Msg: "token ci has 2 calls in flight", RetryAfter: 1}, 429, api.CodeTooManyRequests, false},

		// File calls, over the API and MCP alike.
		{"file: gone", node.FileError(node.ErrGone), 409, api.CodeEnded, true},
		{"file: path", node.FileError(fmt.Errorf("%w: %q is absolute", inroot.ErrPath, "/etc")), 400, api.CodeInvalid, true},
		{"file: not found", node.FileError(inroot.ErrNotFound), 404, api.CodeNotFound, true},
		{"file: not regular", node.FileError(inroot.ErrNotRegular), 400, api.CodeInvalid, true},
		{"file: too large", node.FileError(fmt.Errorf("%w: the file is 20 bytes", inroot.ErrTooLarge)), 413, api.CodeTooLarge, true},
		{"file: disk full", node.FileError(inroot.ErrNoSpace), 507, api.CodeTooLarge, true},
		{"file: other", node.FileError(errors.New("openat2 /var/lib/x: EIO")), 500, api.CodeInternal, false},

		// Errors of the packages below, by their class.
		{"config error", &config.Error{File: "a.yaml", Msg: "bad"}, 400, api.CodeInvalid, true},
		{"config input", &config.InputError{Input: "n", Reason: "is required"}, 400, api.CodeInvalid, true},
		{"config not found", fmt.Errorf("tool %q: %w", "x", config.ErrNotFound), 404, api.CodeNotFound, true},
		{"secret", &config.SecretError{Secret: "gh", Problem: "unset"}, 503, api.CodeUnavailable, false},
		{"sandbox invalid", fmt.Errorf("%w: empty command", sandbox.ErrInvalid), 400, api.CodeInvalid, true},
		{"sandbox capacity", capacity, 503, api.CodeCapacity, false},
		{"sandbox dead", sandbox.ErrDead, 409, api.CodeEnded, true},
		{"pool closed", pool.ErrClosed, 503, api.CodeUnavailable, false},
		{"image not found", fmt.Errorf("%w: tools/a:1", image.ErrNotFound), 404, api.CodeNotFound, true},
		{"image in use", image.ErrInUse, 409, api.CodeEnded, true},
		{"egress destination", &policy.SpecError{Problem: "bad"}, 400, api.CodeInvalid, true},
	}
	for _, tt := range tests {
		status, code := edge.StatusOf(tt.err)
		if status != tt.status || code != tt.code {
			t.Errorf("%s: edge.StatusOf(%v) = %d %s, want %d %s", tt.name, tt.err, status, code, tt.status, tt.code)
		}
		if got := mcpserver.Refused(tt.err); got != tt.refused {
			t.Errorf("%s: mcpserver.Refused(%v) = %v, want %v", tt.name, tt.err, got, tt.refused)
		}
	}
}

// TestWriteErr checks the answer itself: status, code, the error's text,
// and Retry-After for a refusal that says when.
func TestWriteErr(t *testing.T) {
	tests := []struct {
		err        error
		status     int
		body       api.Error
		retryAfter string
	}{
		{errdefs.New(errdefs.ErrNotFound, "no session \"s_x\""), 404, api.Error{Code: api.CodeNotFound, Message: `no session "s_x"`}, ""},
		{node.AtCapacity(fmt.Errorf("%w: 3 sandboxes are live", sandbox.ErrCapacity)), 503,
			api.Error{Code: api.CodeCapacity, Message: "the node is at capacity: 3 sandboxes are live; try again shortly"}, "1"},
		{&node.Refusal{Kind: node.ErrTooMany, Msg: "slow down", RetryAfter: 1}, 429, api.Error{Code: api.CodeTooManyRequests, Message: "slow down"}, "1"},
	}
	for _, tt := range tests {
		w := httptest.NewRecorder()
		edge.WriteErr(w, tt.err)
		var got api.Error
		if err := json.Unmarshal(w.Body.Bytes(), &got); err != nil {
			t.Fatalf("%v: body %q: %v", tt.err, w.Body, err)
		}
		if w.Code != tt.status || got != tt.body || w.Header().Get("Retry-After") != tt.retryAfter || w.Header().Get("Content-Type") != "application/json" {
			t.Errorf("edge.WriteErr(%v) = %d %+v Retry-After %q, want %d %+v %q", tt.err, w.Code, got, w.Header().Get("Retry-After"), tt.status, tt.body, tt.retryAfter)
		}
	}
}
