package edge

import (
	"errors"
	"net/http"
	"strconv"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/internal/apierr"
	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/node"
	"github.com/airlockhq/airlock/sandbox"
)

// Errors are answered in one place. A handler answers a refusal or a
// failure with WriteErr(w, err), never with a status of its own choosing:
// StatusOf picks the HTTP status and API code from the error's class
// (package errdefs), and mcpserver.CallError picks MCP's answer from the
// same class. The message is the error's text, so an error handed to
// WriteErr is written for the caller: no host paths, secrets or dial
// errors.

// The edges' own kinds of error, each in a class but answered apart
// from the class's usual answer (see errorKinds). The node's errors are
// the node's (node.ErrAuditRefused...).
var (
	// ErrMethod: the endpoint does not take the request's method.
	ErrMethod = errdefs.New(errdefs.ErrInvalid, "method not allowed")
	// ErrUnauthenticated: no valid bearer token on the TCP listener.
	ErrUnauthenticated = errdefs.New(errdefs.ErrDenied, "a valid bearer token is required")
	// ErrMisdirected: a request to a loopback listener naming another
	// host (DNS rebinding).
	ErrMisdirected = errdefs.New(errdefs.ErrDenied, "misdirected request")
)

// answer is what the API answers for an error.
type answer struct {
	status int
	code   string
}

// errorKinds are the errors answered apart from their class, tried in order
// before the classes.
var errorKinds = []struct {
	err error
	answer
}{
	{ErrMethod, answer{http.StatusMethodNotAllowed, api.CodeMethodNotAllowed}},
	{ErrUnauthenticated, answer{http.StatusUnauthorized, api.CodeUnauthorized}},
	{node.ErrNoCaller, answer{http.StatusUnauthorized, api.CodeUnauthorized}},
	// 421 says "not this server" to a browser's request; the code is
	// forbidden, as for any other refusal of who is asking.
	{ErrMisdirected, answer{http.StatusMisdirectedRequest, api.CodeForbidden}},
	{node.ErrTooMany, answer{http.StatusTooManyRequests, api.CodeTooManyRequests}},
	{node.ErrAuditRefused, answer{http.StatusServiceUnavailable, api.CodeAuditUnavailable}},
	{sandbox.ErrCapacity, answer{http.StatusServiceUnavailable, api.CodeCapacity}},
	// The disk ceiling is a limit like a file's size, but of the
	// sandbox's storage: 507.
	{node.ErrDiskFull, answer{http.StatusInsufficientStorage, api.CodeTooLarge}},
}

// StatusOf is the HTTP status and API code of err: its kind's, else its
// class's (apierr, the answers a cluster's front gives too), else 500
// internal (the daemon's own failure).
func StatusOf(err error) (int, string) {
	for _, k := range errorKinds {
		if errors.Is(err, k.err) {
			return k.status, k.code
		}
	}
	return apierr.StatusOf(err)
}

// WriteErr answers err: its status and code (StatusOf), its text as the
// message, and Retry-After for a refusal that says when to try again.
func WriteErr(w http.ResponseWriter, err error) {
	var r *refusal
	if errors.As(err, &r) && r.RetryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(r.RetryAfter))
	}
	status, code := StatusOf(err)
	WriteJSON(w, status, api.Error{Code: code, Message: err.Error()})
}

// refusal is an error that says when to try again (node.Refusal).
type refusal = node.Refusal
