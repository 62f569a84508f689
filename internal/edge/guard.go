// Package edge is what the node's HTTP edges (the native API, MCP over
// HTTP, the E2B API) share: who made a request (its caller, put in its
// context by the listener that authenticated it, and refused when none
// did), the audit record of every request, the bounds on callers that
// keep failing, and the one mapping of the node's errors (classed by
// package errdefs) to HTTP statuses.
package edge

import (
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"

	"github.com/airlockhq/airlock/internal/audit"
	"github.com/airlockhq/airlock/internal/node"
	"github.com/airlockhq/airlock/internal/tokens"
)

// Guard is an edge's guard of its listeners: it authenticates, records
// and slows down callers, for one node.
type Guard struct {
	node Core
	// tokens are the accepted tokens; a reload replaces them whole.
	tokens atomic.Pointer[tokens.Set]
	// console, if set, is the caller of a request's console session
	// (package console), which the TCP listener takes in place of a
	// token.
	console func(*http.Request) *node.Caller
	logger  *slog.Logger
	// noCallerOnce logs, once, that a request came with no caller (see
	// RequireCaller).
	noCallerOnce sync.Once
	refusals     refusals
}

// Core is what the guard asks of the node (*node.Node).
type Core interface {
	Audit() *audit.Log
	Counts() *node.Counters
	Authorize(c *node.Caller, tool string) error
}

var _ Core = (*node.Node)(nil)

// NewGuard returns the guard of n's listeners, whose TCP callers show
// one of t's tokens; a nil logger discards.
func NewGuard(n Core, t *tokens.Set, logger *slog.Logger) *Guard {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	g := &Guard{node: n, logger: logger}
	g.tokens.Store(t)
	return g
}

// Tokens are the tokens the guard accepts.
func (g *Guard) Tokens() *tokens.Set { return g.tokens.Load() }

// SetConsole makes the guard take a console session (caller returns its
// caller, nil for none) where a request has no token. Before serving.
func (g *Guard) SetConsole(caller func(*http.Request) *node.Caller) { g.console = caller }

// SetTokens makes t the tokens the guard accepts, from the next request
// on (a reload's).
func (g *Guard) SetTokens(t *tokens.Set) { g.tokens.Store(t) }
