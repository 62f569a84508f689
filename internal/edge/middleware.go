package edge

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"runtime/debug"

	"github.com/airlockhq/airlock/internal/errdefs"
)

// Counted counts API requests.
func (g *Guard) Counted(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		g.node.Counts().Requests.Add(1)
		h.ServeHTTP(w, r)
	})
}

// Recoverer turns a handler panic into a 500 instead of a dropped
// connection (the daemon must never go down on a request) and logs it
// with its stack: the caller is told only "internal error", so the log
// is the one place the failure can be read.
func (g *Guard) Recoverer(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if v := recover(); v != nil {
				if v == http.ErrAbortHandler {
					panic(v)
				}
				g.logger.Error("a request's handler panicked", "method", r.Method, "path", ShortenPath(r.URL.Path), "panic", fmt.Sprint(v), "stack", string(debug.Stack()))
				WriteErr(w, errors.New("internal error"))
			}
		}()
		h.ServeHTTP(w, r)
	})
}

// Only restricts a handler to one method.
func Only(method string, h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Method != method {
			w.Header().Set("Allow", method)
			WriteErr(w, errdefs.Errorf(ErrMethod, "%s is not allowed here; use %s", r.Method, method))
			return
		}
		h(w, r)
	}
}

// WriteJSON answers v as JSON with status.
func WriteJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// ShortenPath bounds a path quoted in an answer.
func ShortenPath(p string) string {
	if len(p) > 256 {
		return p[:256] + "..."
	}
	return p
}
