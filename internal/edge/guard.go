// Package edge is what the node's HTTP edges (the native API, MCP over
// HTTP, the E2B API) share: who made a request (its caller, put in its
// context by the listener that authenticated it, and refused when none
// did), the audit record of every request, the bounds on callers that
// keep failing, and the one mapping of the node's errors (classed by
// package errdefs) to HTTP statuses.
package edge

import (
	"log/slog"
	"sync"

	"github.com/airlockhq/airlock/internal/node"
	"github.com/airlockhq/airlock/internal/tokens"
)

// Guard is an edge's guard of its listeners: it authenticates, records
// and slows down callers, for one node.
type Guard struct {
	node   *node.Node
	tokens *tokens.Set
	logger *slog.Logger
	// noCallerOnce logs, once, that a request came with no caller (see
	// RequireCaller).
	noCallerOnce sync.Once
	refusals     refusals
}

// NewGuard returns the guard of n's listeners, whose TCP callers show
// one of t's tokens.
func NewGuard(n *node.Node, t *tokens.Set, logger *slog.Logger) *Guard {
	return &Guard{node: n, tokens: t, logger: logger}
}

// Tokens are the tokens the guard accepts.
func (g *Guard) Tokens() *tokens.Set { return g.tokens }
