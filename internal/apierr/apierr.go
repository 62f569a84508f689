// Package apierr is the native HTTP API's answer to each error class
// (package errdefs): the status and API code every server of the API (a
// node's edges, a cluster's front) answers a class with, kept in one
// place so that a caller sees the same answer for the same refusal from
// either. Each server tries its own kinds of error first (edge.StatusOf,
// the front's apiStatusOf); what is left is answered here.
//
// It links only the wire types and errdefs, so that the front, which may
// not link a node, and the node's edges can both use it.
package apierr

import (
	"net/http"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/internal/errdefs"
)

// classAnswers are the answers of the error classes.
var classAnswers = map[error]struct {
	status int
	code   string
}{
	errdefs.ErrInvalid:  {http.StatusBadRequest, api.CodeInvalid},
	errdefs.ErrNotFound: {http.StatusNotFound, api.CodeNotFound},
	errdefs.ErrDenied:   {http.StatusForbidden, api.CodeForbidden},
	// The one conflict the API has is a call on a session that has
	// ended, so the class's code is ended; another kind of conflict
	// would get a code of its own among a server's kinds.
	errdefs.ErrConflict:    {http.StatusConflict, api.CodeEnded},
	errdefs.ErrLimit:       {http.StatusRequestEntityTooLarge, api.CodeTooLarge},
	errdefs.ErrUnavailable: {http.StatusServiceUnavailable, api.CodeUnavailable},
}

// StatusOf is the HTTP status and API code of err's class (errdefs.Class),
// or 500 internal for an error in no class: the server's own failure.
func StatusOf(err error) (int, string) {
	if a, ok := classAnswers[errdefs.Class(err)]; ok {
		return a.status, a.code
	}
	return http.StatusInternalServerError, api.CodeInternal
}
