package e2bserver

import (
	"errors"
	"net/http"
	"strconv"

	"github.com/airlockhq/airlock/internal/e2b"
	"github.com/airlockhq/airlock/internal/edge"
	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/linux/inroot"
	"github.com/airlockhq/airlock/internal/node"
)

// Errors are answered in one place, as on every edge (STYLE.md, Errors).
// A handler returns an error in a class of package errdefs (or one of
// the node's, or one of the kinds below) and never picks a status or a
// code: a control-plane call's error is answered by writeAPIError, its
// HTTP status chosen by apiStatus; an envd call's (Connect) by rpcError,
// its code chosen by rpcCode. The message is the error's text, so an
// error a handler returns is written for the caller: no host paths,
// secrets or dial errors.

// The E2B edge's own kinds of error, each in a class but answered apart
// from the class's usual answer, because E2B's API answers them so (see
// apiKinds and rpcKinds).
var (
	// errNoAPIKey: a control-plane call without a valid X-API-KEY.
	errNoAPIKey = errdefs.New(errdefs.ErrDenied, "a valid API key is required (X-API-KEY: an airlock token)")
	// errUnsupported: a call or an option of E2B's that airlock does
	// not serve (pausing, a Connect method it lacks).
	errUnsupported = errdefs.New(errdefs.ErrInvalid, "not supported by airlock (docs/e2b.md)")
	// errUploadStalled: an upload's body stopped coming (the client's
	// doing: sending it again may work).
	errUploadStalled = errdefs.New(errdefs.ErrInvalid, "the upload stalled")
	// errNotRunning: envd's health check of a sandbox that is not
	// running (or not the token's).
	errNotRunning = errdefs.New(errdefs.ErrNotFound, "the sandbox is not running")
	// errTimedOut: a stream's Connect-Timeout-Ms passed.
	errTimedOut = errdefs.New(errdefs.ErrUnavailable, "the call's timeout passed")
	// errBadSignature, errSignatureExpired: a signed URL no live
	// sandbox's token signed for its path and operation, or one past its
	// expiry; worded as envd's.
	errBadSignature     = errdefs.New(errdefs.ErrDenied, "invalid signature")
	errSignatureExpired = errdefs.New(errdefs.ErrDenied, "signature is already expired")
	// errBusy: what the node shares among all sandboxes (its directory
	// watches) is all in use; try again later.
	errBusy = errdefs.New(errdefs.ErrUnavailable, "all in use")
)

// errEnded answers a sandbox's call (envd's side) when the sandbox has
// ended, or is not there at all: 502 and Connect's unavailable, as
// E2B's proxy answers for a sandbox it does not find, with its words
// ("was not found"), which the SDKs read as the sandbox no longer
// running (their TimeoutError, SandboxNotRunningException).
var errEnded = errdefs.New(errdefs.ErrNotFound, "the sandbox was not found: it has ended")

// apiKinds are the control-plane errors answered apart from their class,
// with the statuses E2B's API gives them; tried in order before
// edge.StatusOf.
var apiKinds = []struct {
	err    error
	status int
}{
	{errNoAPIKey, http.StatusUnauthorized},
	{errUnsupported, http.StatusNotImplemented},
	{errUploadStalled, http.StatusRequestTimeout},
	{errBadSignature, http.StatusUnauthorized},
	{errSignatureExpired, http.StatusUnauthorized},
	// E2B's proxy answers 502 for a sandbox that is gone; the SDK's
	// isRunning reads it as not running.
	{errNotRunning, http.StatusBadGateway},
	{errEnded, http.StatusBadGateway},
	// As E2B's proxy: a running sandbox's port nothing listens on.
	{errPortClosed, http.StatusBadGateway},
	{errNoTraffic, http.StatusForbidden},
}

// apiStatus is the HTTP status of a control-plane call's error: its
// E2B kind's (apiKinds), else the one every edge gives the node's errors
// and the classes (edge.StatusOf: 400 invalid, 404 not found, 403
// denied, 409 conflict, 413 limit, 503 unavailable; 429, 503 and 507
// for the node's kinds), else 500.
func apiStatus(err error) int {
	for _, k := range apiKinds {
		if errors.Is(err, k.err) {
			return k.status
		}
	}
	status, _ := edge.StatusOf(err)
	return status
}

// writeAPIError answers a control-plane call with err, as E2B's API
// does ({code, message}), and Retry-After for a refusal that says when
// to try again.
func writeAPIError(w http.ResponseWriter, err error) {
	var r *node.Refusal
	if errors.As(err, &r) && r.RetryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(r.RetryAfter))
	}
	e2b.WriteAPIError(w, apiStatus(err), err.Error())
}

// rpcKinds are the envd errors answered apart from their class, tried
// in order before rpcClasses.
var rpcKinds = []struct {
	err  error
	code string
}{
	{errUnsupported, e2b.CodeUnimplemented},
	{errTimedOut, e2b.CodeDeadlineExceeded},
	{errBusy, e2b.CodeResourceExhaust},
	{errEnded, e2b.CodeUnavailable},
	// A caller's spent share: Connect's 429.
	{node.ErrTooMany, e2b.CodeResourceExhaust},
	{inroot.ErrExists, e2b.CodeAlreadyExists},
}

// rpcClasses are the Connect codes of the error classes.
var rpcClasses = map[error]string{
	errdefs.ErrInvalid:     e2b.CodeInvalidArgument,
	errdefs.ErrNotFound:    e2b.CodeNotFound,
	errdefs.ErrDenied:      e2b.CodePermissionDenied,
	errdefs.ErrConflict:    e2b.CodeFailedPrecondition,
	errdefs.ErrLimit:       e2b.CodeResourceExhaust,
	errdefs.ErrUnavailable: e2b.CodeUnavailable,
}

// rpcCode is the Connect code of an envd call's error: its kind's
// (rpcKinds), else its class's, else internal (airlock's own failure).
func rpcCode(err error) string {
	for _, k := range rpcKinds {
		if errors.Is(err, k.err) {
			return k.code
		}
	}
	if code, ok := rpcClasses[errdefs.Class(err)]; ok {
		return code
	}
	return e2b.CodeInternal
}

// rpcError is err as a Connect error: its code (rpcCode) and its text.
// An *e2b.RPCError, package e2b's refusal of a request it could not
// read, is one already.
func rpcError(err error) *e2b.RPCError {
	var re *e2b.RPCError
	if errors.As(err, &re) {
		return re
	}
	return &e2b.RPCError{Code: rpcCode(err), Message: err.Error()}
}
