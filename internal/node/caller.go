package node

import (
	"github.com/airlockhq/airlock/internal/config"
	"github.com/airlockhq/airlock/internal/errdefs"
)

// Caller is who made a call: the local socket's user (trusted by the
// socket's file permissions) or a token, scoped to some tools.
type Caller struct {
	// Name is "local" or "token:NAME".
	Name string
	// Token is the caller's token; nil for the local socket.
	Token *config.Token
}

// Local is every call made on the unix socket: the one caller with no
// token, which sees every run and session. Only a listener meant to be
// trusted (the socket, mode 0660) names it, explicitly.
var Local = &Caller{Name: "local"}

// TokenCaller is the caller of a valid token.
func TokenCaller(t *config.Token) *Caller { return &Caller{Name: "token:" + t.Name, Token: t} }

// ErrNoCaller refuses a call that carries no authenticated caller: a
// listener wired without authentication must not get the socket's
// rights (fail closed).
var ErrNoCaller = errdefs.New(errdefs.ErrDenied, "this listener authenticates no caller; the request is refused")

// Allows reports whether c may use tool (or MCP server) name.
func (c *Caller) Allows(tool string) bool {
	return c != nil && (c.Token == nil || c.Token.AllowsTool(tool))
}

// Sees reports whether c may see what owner (a Caller's Name) started:
// the local socket sees all, a token its own.
func (c *Caller) Sees(owner string) bool {
	return c != nil && (c == Local || c.Name == owner)
}

// Authorize is the one check of whether c may use tool: a caller
// without a tool in its token's scope is refused, naming the tool.
func (n *Node) Authorize(c *Caller, tool string) error {
	if c == nil {
		return ErrNoCaller
	}
	if !c.Allows(tool) {
		n.counts.Forbidden.Add(1)
		return errdefs.Errorf(errdefs.ErrDenied, "%s may not use tool %q", c.Name, tool)
	}
	return nil
}
