package e2bserver

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http/httptest"
	"os"
	"testing"

	"github.com/airlockhq/airlock/internal/e2b"
	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/linux/inroot"
	"github.com/airlockhq/airlock/internal/node"
	"github.com/airlockhq/airlock/sandbox"
)

// TestAnswers is the E2B edge's whole map of errors to answers: the
// control plane's HTTP status and envd's Connect code of every class,
// the edge's own kinds and the node's errors that reach a handler. What
// the SDKs see must not change by accident.
func TestAnswers(t *testing.T) {
	capacity := fmt.Errorf("%w: 3 sandboxes are live, the most this node allows", sandbox.ErrCapacity)
	tests := []struct {
		name   string
		err    error
		status int    // the control plane's
		code   string // envd's
	}{
		// The classes.
		{"invalid", errdefs.ErrInvalid, 400, e2b.CodeInvalidArgument},
		{"not found", errdefs.ErrNotFound, 404, e2b.CodeNotFound},
		{"denied", errdefs.ErrDenied, 403, e2b.CodePermissionDenied},
		{"conflict", errdefs.ErrConflict, 409, e2b.CodeFailedPrecondition},
		{"limit", errdefs.ErrLimit, 413, e2b.CodeResourceExhaust},
		{"unavailable", errdefs.ErrUnavailable, 503, e2b.CodeUnavailable},
		{"unclassified", errors.New("the answer could not be encoded"), 500, e2b.CodeInternal},

		// The edge's kinds.
		{"no API key", errNoAPIKey, 401, e2b.CodePermissionDenied},
		{"pause", errdefs.New(errUnsupported, "airlock does not pause sandboxes"), 501, e2b.CodeUnimplemented},
		{"upload stalled", errdefs.Errorf(errUploadStalled, "the upload stalled: nothing came for %v", "30s"), 408, e2b.CodeInvalidArgument},
		{"upload ended", errUploadEnded, 502, e2b.CodeUnavailable},
		{"not running", errdefs.Errorf(errNotRunning, "%s: %v", e2b.CodeUnavailable, errEnded), 502, e2b.CodeNotFound},
		{"signature", errBadSignature, 401, e2b.CodePermissionDenied},
		{"port not open", errdefs.Errorf(errPortClosed, "the sandbox %q is running but port is not open (port %d)", "x", 8000), 502, e2b.CodeUnavailable},
		{"no traffic token", errNoTraffic, 403, e2b.CodePermissionDenied},
		{"signature expired", errSignatureExpired, 401, e2b.CodePermissionDenied},
		{"watch timeout", errdefs.Errorf(errTimedOut, "the watch's timeout of %v passed", "1s"), 503, e2b.CodeDeadlineExceeded},
		{"watches all in use", errdefs.Errorf(errBusy, "this airlock serves %d directory watches at once", 48), 503, e2b.CodeResourceExhaust},
		{"ended", errEnded, 502, e2b.CodeUnavailable},
		{"body over 1 MiB", errdefs.Errorf(errdefs.ErrLimit, "the body is over %d KiB", 1024), 413, e2b.CodeResourceExhaust},
		// A files call's envd error keeps its class under its code.
		{"files: no sandbox", fmt.Errorf("%s: %w", e2b.CodeNotFound, errdefs.New(errdefs.ErrNotFound, "sandbox \"x\" not found")), 404, e2b.CodeNotFound},
		{"files: no id", fmt.Errorf("%s: %w", e2b.CodeInvalidArgument, errdefs.New(errdefs.ErrInvalid, "E2b-Sandbox-Id is required")), 400, e2b.CodeInvalidArgument},

		// The node's errors.
		{"audit refused", node.ErrAuditRefused, 503, e2b.CodeUnavailable},
		{"shutdown", node.ErrShutdown, 503, e2b.CodeUnavailable},
		{"no sandbox", node.ErrNoSandbox, 503, e2b.CodeUnavailable},
		{"at capacity", node.AtCapacity(capacity), 503, e2b.CodeUnavailable},
		{"max sessions", &node.Refusal{Kind: errdefs.ErrUnavailable, Msg: "256 sessions are open", RetryAfter: 5}, 503, e2b.CodeUnavailable},
		{"token concurrency", &node.Refusal{Kind: node.ErrTooMany, Msg: "token ci has 2 calls in flight", RetryAfter: 1}, 429, e2b.CodeResourceExhaust},
		{"file: gone", node.FileError(node.ErrGone), 409, e2b.CodeFailedPrecondition},
		{"file: not found", node.FileError(inroot.ErrNotFound), 404, e2b.CodeNotFound},
		{"file: too large", node.FileError(fmt.Errorf("%w: the file is 20 bytes", inroot.ErrTooLarge)), 413, e2b.CodeResourceExhaust},
		{"file: disk full", node.FileError(inroot.ErrNoSpace), 507, e2b.CodeResourceExhaust},
		{"file: other", node.FileError(errors.New("openat2 /var/lib/x: EIO")), 500, e2b.CodeInternal},

		// A filesystem call's failures, as e2bFSError words them.
		{"fs: not found", e2bFSError("a", inroot.ErrNotFound), 404, e2b.CodeNotFound},
		{"fs: exists", e2bFSError("a", fmt.Errorf("%w: a directory", inroot.ErrExists)), 500, e2b.CodeAlreadyExists},
		{"fs: path", e2bFSError("a", inroot.ErrPath), 400, e2b.CodeInvalidArgument},
		{"fs: too many", e2bFSError("a", inroot.ErrTooMany), 413, e2b.CodeResourceExhaust},
		{"fs: no space", e2bFSError("a", inroot.ErrNoSpace), 413, e2b.CodeResourceExhaust},
		{"fs: permission", e2bFSError("a", os.ErrPermission), 403, e2b.CodePermissionDenied},
		{"fs: gone", e2bFSError("a", node.ErrGone), 502, e2b.CodeUnavailable},
		{"fs: other", e2bFSError("a", errors.New("openat2 /var/lib/x: EIO")), 500, e2b.CodeInternal},
	}
	for _, tc := range tests {
		if got := apiStatus(tc.err); got != tc.status {
			t.Errorf("%s: apiStatus = %d, want %d", tc.name, got, tc.status)
		}
		if got := rpcCode(tc.err); got != tc.code {
			t.Errorf("%s: rpcCode = %s, want %s", tc.name, got, tc.code)
		}
		if re := rpcError(tc.err); re.Code != tc.code || re.Message != tc.err.Error() {
			t.Errorf("%s: rpcError = %+v, want %s %q", tc.name, re, tc.code, tc.err.Error())
		}
	}
}

// TestFSErrorWords: what a filesystem call's failure says names the
// path as given, never a host path or the error beneath.
func TestFSErrorWords(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{inroot.ErrNotFound, "a/b: no such file or directory"},
		{fmt.Errorf("%w: a directory", inroot.ErrExists), "a/b: already exists: a directory"},
		{os.ErrPermission, "a/b: permission denied"},
		{node.ErrGone, "the sandbox was not found: it has ended"},
		{errors.New("openat2 /var/lib/x: EIO"), "a/b: the file operation failed"},
	} {
		if got := e2bFSError("a/b", tc.err).Error(); got != tc.want {
			t.Errorf("%v: got %q, want %q", tc.err, got, tc.want)
		}
	}
}

// TestRPCErrorPassesThrough: package e2b's own refusal of a request it
// could not read is answered as it is.
func TestRPCErrorPassesThrough(t *testing.T) {
	re := e2b.Errorf(e2b.CodeUnimplemented, "compressed messages are not supported")
	if got := rpcError(re); got != re {
		t.Errorf("got %+v, want %+v", got, re)
	}
}

// TestWriteAPIError: the control plane's error body is {code, message},
// code the status again, and a refusal that says when to try again
// carries Retry-After.
func TestWriteAPIError(t *testing.T) {
	for _, tc := range []struct {
		name       string
		err        error
		status     int
		retryAfter string
	}{
		{"not found", errdefs.Errorf(errdefs.ErrNotFound, "sandbox %q not found", "x"), 404, ""},
		{"refusal", &node.Refusal{Kind: errdefs.ErrUnavailable, Msg: "256 sessions are open", RetryAfter: 5}, 503, "5"},
	} {
		w := httptest.NewRecorder()
		writeAPIError(w, tc.err)
		var got e2b.APIError
		if err := json.Unmarshal(w.Body.Bytes(), &got); err != nil {
			t.Fatalf("%s: %v: %s", tc.name, err, w.Body)
		}
		if w.Code != tc.status || got.Code != tc.status || got.Message != tc.err.Error() {
			t.Errorf("%s: %d %+v, want %d %q", tc.name, w.Code, got, tc.status, tc.err.Error())
		}
		if ra := w.Header().Get("Retry-After"); ra != tc.retryAfter {
			t.Errorf("%s: Retry-After %q, want %q", tc.name, ra, tc.retryAfter)
		}
	}
}
