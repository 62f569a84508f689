package front

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/internal/apierr"
	"github.com/airlockhq/airlock/internal/e2b"
	"github.com/airlockhq/airlock/internal/errdefs"
)

// Errors are answered in one place per wire format the front speaks. A
// handler answers a refusal or a failure by returning an error, classed
// with errdefs or of one of the front's kinds below, to writeErr (the
// native API: api.Error) or to writeE2BErr or writeConnectErr (the E2B
// API: e2b.APIError, or a Connect error for a sandbox-side call), never
// with a status of its own choosing. The message is the error's text,
// so an error handed to them is written for the caller.
//
// The native API's answers of the classes are the daemon's (package
// apierr, which internal/edge uses too; the front may not link edge,
// which links the node): a caller sees the same answer for the same
// refusal from a node or a front.

// The front's own kinds of error, each in a class but answered apart
// from the class's usual answer.
var (
	// errUnauthenticated: no valid bearer token, or API key.
	errUnauthenticated = errdefs.New(errdefs.ErrDenied, "a valid token is required")
	// errNodeGone: the node an id names is not live, or no longer
	// answers: what the id named ended with it.
	errNodeGone = errdefs.New(errdefs.ErrUnavailable, "its node is gone")
	// errNodeFailed: a node could not finish a call it may have got,
	// or could not be asked (a bad gateway).
	errNodeFailed = errdefs.New(errdefs.ErrUnavailable, "a node failed the call")
	// errNotRunning: envd's health check of a sandbox the front cannot
	// reach: the SDK reads any 502 as "not running".
	errNotRunning = errdefs.New(errdefs.ErrUnavailable, "the sandbox is not running")
	// errGone: a sandbox-side call (commands, files) on a sandbox no
	// live node holds: what E2B's proxy answers for a sandbox it does not
	// find, 502 "was not found", as a node answers for one that ended.
	errGone = errdefs.New(errdefs.ErrUnavailable, "the sandbox was not found")
	// errSignature: a signed URL that no node's sandbox signed, or one
	// past its expiry: 401, as envd answers.
	errSignature = errdefs.New(errdefs.ErrDenied, "invalid signature")
)

// sandboxSide is err of a sandbox-side call as E2B answers it: a sandbox
// that is not there, or whose node is gone, is errGone.
func sandboxSide(id string, err error) error {
	if errors.Is(err, errNodeGone) || errdefs.Class(err) == errdefs.ErrNotFound {
		return errdefs.Errorf(errGone, "sandbox %q was not found (%v)", shorten(id), err)
	}
	return err
}

// nodeStatus is a node's refusal passed on with the node's own status.
type nodeStatus struct {
	status int
	msg    string
}

func (e *nodeStatus) Error() string { return e.msg }

// retryLater is an error whose answer says when to try again
// (Retry-After, in seconds).
type retryLater struct {
	error
	after int
}

func (e *retryLater) Unwrap() error { return e.error }

// apiAnswer is what the native API answers for an error.
type apiAnswer struct {
	status int
	code   string
}

// apiKinds are the errors the native API answers apart from their
// class, tried in order before the classes.
var apiKinds = []struct {
	err error
	apiAnswer
}{
	{errUnauthenticated, apiAnswer{http.StatusUnauthorized, api.CodeUnauthorized}},
	// A session's node is gone, and the session with it: ended, as a
	// node answers a call on a session that has ended, but 503, as the
	// node and not the caller is at fault.
	{errNodeGone, apiAnswer{http.StatusServiceUnavailable, api.CodeEnded}},
	{errNodeFailed, apiAnswer{http.StatusBadGateway, api.CodeUnavailable}},
}

// apiStatusOf is the HTTP status and API code of err: its kind's, else
// its class's (apierr, the daemon's answers), else 500 internal (the
// front's own failure).
func apiStatusOf(err error) (int, string) {
	for _, k := range apiKinds {
		if errors.Is(err, k.err) {
			return k.status, k.code
		}
	}
	return apierr.StatusOf(err)
}

// writeErr answers err on the native API: its status and code
// (apiStatusOf) and its text as the message.
func writeErr(w http.ResponseWriter, err error) {
	setRetryAfter(w, err)
	status, code := apiStatusOf(err)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(api.Error{Code: code, Message: err.Error()})
}

// e2bAnswer is what the E2B API answers for an error: the HTTP status of
// a control-plane call (its body's code too), and the Connect code of a
// sandbox-side one.
type e2bAnswer struct {
	status  int
	connect string
}

// e2bKinds are the errors the E2B API answers apart from their class,
// tried in order before the classes.
var e2bKinds = []struct {
	err error
	e2bAnswer
}{
	// First: a health check's failure is 502 whatever its cause.
	{errNotRunning, e2bAnswer{http.StatusBadGateway, e2b.CodeUnavailable}},
	{errGone, e2bAnswer{http.StatusBadGateway, e2b.CodeUnavailable}},
	{errSignature, e2bAnswer{http.StatusUnauthorized, e2b.CodeUnauthenticated}},
	{errUnauthenticated, e2bAnswer{http.StatusUnauthorized, e2b.CodeUnauthenticated}},
	// The SDK tells a sandbox that has ended by 404.
	{errNodeGone, e2bAnswer{http.StatusNotFound, e2b.CodeNotFound}},
	{errNodeFailed, e2bAnswer{http.StatusBadGateway, e2b.CodeUnavailable}},
}

// e2bClasses are the E2B API's answers of the error classes.
var e2bClasses = map[error]e2bAnswer{
	errdefs.ErrInvalid:     {http.StatusBadRequest, e2b.CodeInvalidArgument},
	errdefs.ErrNotFound:    {http.StatusNotFound, e2b.CodeNotFound},
	errdefs.ErrDenied:      {http.StatusForbidden, e2b.CodePermissionDenied},
	errdefs.ErrConflict:    {http.StatusConflict, e2b.CodeAlreadyExists},
	errdefs.ErrLimit:       {http.StatusRequestEntityTooLarge, e2b.CodeResourceExhaust},
	errdefs.ErrUnavailable: {http.StatusServiceUnavailable, e2b.CodeUnavailable},
}

// e2bStatusOf is the HTTP status and Connect code of err on the E2B API:
// a node's own status passed on, else its kind's, else its class's,
// else 500 internal.
func e2bStatusOf(err error) (int, string) {
	var ns *nodeStatus
	if errors.As(err, &ns) {
		return ns.status, e2b.CodeUnavailable
	}
	for _, k := range e2bKinds {
		if errors.Is(err, k.err) {
			return k.status, k.connect
		}
	}
	if a, ok := e2bClasses[errdefs.Class(err)]; ok {
		return a.status, a.connect
	}
	return http.StatusInternalServerError, e2b.CodeInternal
}

// writeE2BErr answers err on the E2B control plane (and file calls):
// e2b.APIError with its status (e2bStatusOf) and its text.
func writeE2BErr(w http.ResponseWriter, err error) {
	setRetryAfter(w, err)
	status, _ := e2bStatusOf(err)
	e2b.WriteAPIError(w, status, err.Error())
}

// writeConnectErr answers err as a sandbox-side (Connect) call expects
// it: the end of a stream for a streaming call, a JSON error for a
// unary one, and a control-plane error for a call that is not Connect.
func writeConnectErr(w http.ResponseWriter, r *http.Request, err error) {
	_, code := e2bStatusOf(err)
	if strings.HasPrefix(r.Header.Get("Content-Type"), "application/connect+") {
		end, _ := json.Marshal(e2b.EndStream{Error: e2b.Errorf(code, "%s", err.Error())})
		w.Header().Set("Content-Type", "application/connect+json")
		// A stream's error is in its end, after a 200.
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(e2b.AppendEnvelope(nil, e2b.FlagEndStream, end))
		return
	}
	if r.Header.Get("Connect-Protocol-Version") != "" {
		e2b.WriteUnaryError(w, e2b.Errorf(code, "%s", err.Error()))
		return
	}
	writeE2BErr(w, err)
}

// setRetryAfter says when to try again, for an error that says.
func setRetryAfter(w http.ResponseWriter, err error) {
	var rl *retryLater
	if errors.As(err, &rl) && rl.after > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(rl.after))
	}
}
