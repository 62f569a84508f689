package daemon

import (
	"errors"
	"net/http"
	"strconv"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/node"
	"github.com/airlockhq/airlock/sandbox"
)

// Errors are answered in one place. A handler answers a refusal or a
// failure with writeErr(w, err), never with a status of its own choosing:
// statusOf picks the HTTP status and API code from the error's class
// (package errdefs), and mcpserver.CallError picks MCP's answer from the
// same class. The message is the error's text, so an error handed to
// writeErr is written for the caller: no host paths, secrets or dial
// errors.

// The daemon's own kinds of error, each in a class but answered apart
// from the class's usual answer (see errorKinds).
var (
	// errMethod: the endpoint does not take the request's method.
	errMethod = errdefs.New(errdefs.ErrInvalid, "method not allowed")
	// errUnauthenticated: no valid bearer token on the TCP listener.
	errUnauthenticated = errdefs.New(errdefs.ErrDenied, "a valid bearer token is required")
	// errNoCaller: a request, or a run or session, with no authenticated
	// caller: a listener wired without authentication. It is refused
	// (401), never taken for the local socket's.
	errNoCaller = node.ErrNoCaller
	// errMisdirected: a request to a loopback listener naming another
	// host (DNS rebinding).
	errMisdirected = errdefs.New(errdefs.ErrDenied, "misdirected request")
	// errTooMany: the caller's share is spent (its token's concurrency,
	// or its failed authentications); it may try again shortly.
	errTooMany = node.ErrTooMany
	// errDiskFull: a file call met the sandbox's disk ceiling.
	errDiskFull = node.ErrDiskFull
)

// Errors of the node's, answered by writeErr (API) and the MCP server.
var (
	errAuditRefused = node.ErrAuditRefused
	errShutdown     = node.ErrShutdown
	errNoSandbox    = node.ErrNoSandbox
	errGone         = node.ErrGone
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
	{errMethod, answer{http.StatusMethodNotAllowed, api.CodeMethodNotAllowed}},
	{errUnauthenticated, answer{http.StatusUnauthorized, api.CodeUnauthorized}},
	{node.ErrNoCaller, answer{http.StatusUnauthorized, api.CodeUnauthorized}},
	// 421 says "not this server" to a browser's request; the code is
	// forbidden, as for any other refusal of who is asking.
	{errMisdirected, answer{http.StatusMisdirectedRequest, api.CodeForbidden}},
	{errTooMany, answer{http.StatusTooManyRequests, api.CodeTooManyRequests}},
	{errAuditRefused, answer{http.StatusServiceUnavailable, api.CodeAuditUnavailable}},
	{sandbox.ErrCapacity, answer{http.StatusServiceUnavailable, api.CodeCapacity}},
	// The disk ceiling is a limit like a file's size, but of the
	// sandbox's storage: 507.
	{errDiskFull, answer{http.StatusInsufficientStorage, api.CodeTooLarge}},
}

// classAnswers are the answers of the error classes.
var classAnswers = map[error]answer{
	errdefs.ErrInvalid:  {http.StatusBadRequest, api.CodeInvalid},
	errdefs.ErrNotFound: {http.StatusNotFound, api.CodeNotFound},
	errdefs.ErrDenied:   {http.StatusForbidden, api.CodeForbidden},
	// The one conflict the API has is a call on a session that has
	// ended, so the class's code is ended; another kind of conflict
	// would get a code of its own in errorKinds.
	errdefs.ErrConflict:    {http.StatusConflict, api.CodeEnded},
	errdefs.ErrLimit:       {http.StatusRequestEntityTooLarge, api.CodeTooLarge},
	errdefs.ErrUnavailable: {http.StatusServiceUnavailable, api.CodeUnavailable},
}

// statusOf is the HTTP status and API code of err: its kind's, else its
// class's, else 500 internal (the daemon's own failure).
func statusOf(err error) (int, string) {
	for _, k := range errorKinds {
		if errors.Is(err, k.err) {
			return k.status, k.code
		}
	}
	if a, ok := classAnswers[errdefs.Class(err)]; ok {
		return a.status, a.code
	}
	return http.StatusInternalServerError, api.CodeInternal
}

// writeErr answers err: its status and code (statusOf), its text as the
// message, and Retry-After for a refusal that says when to try again.
func writeErr(w http.ResponseWriter, err error) {
	var r *refusal
	if errors.As(err, &r) && r.RetryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(r.RetryAfter))
	}
	status, code := statusOf(err)
	writeJSON(w, status, api.Error{Code: code, Message: err.Error()})
}

// refusal is an error that says when to try again (node.Refusal).
type refusal = node.Refusal
