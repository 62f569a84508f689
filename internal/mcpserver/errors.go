package mcpserver

import (
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlockhq/airlock/internal/errdefs"
)

// Outcomes of a call (CallRecord.Outcome) other than a run's.
const (
	// OutcomeInvalid: the call was refused before anything ran (its
	// arguments, or another refusal the agent can act on).
	OutcomeInvalid = "invalid"
	// OutcomeFailed: airlock could not serve the call.
	OutcomeFailed = "failed"
	// OutcomeOK: a built-in or an MCP server's tool answered.
	OutcomeOK = "ok"
	// OutcomeToolError: an MCP server's tool answered with a tool error.
	OutcomeToolError = "tool_error"
)

// Refused reports whether err is a refusal the agent can act on — its
// input, something it named that does not exist or has ended, a scope,
// a ceiling — rather than airlock's failure: errors of the classes
// errdefs.ErrInvalid, ErrNotFound, ErrDenied, ErrConflict and ErrLimit.
func Refused(err error) bool {
	switch errdefs.Class(err) {
	case errdefs.ErrInvalid, errdefs.ErrNotFound, errdefs.ErrDenied, errdefs.ErrConflict, errdefs.ErrLimit:
		return true
	}
	return false
}

// CallError is MCP's answer to a tool call that ended in err. A refusal
// (Refused) is a tool error whose text is err's, written for the agent,
// which can then correct the call. Anything else — airlock could not run
// the call (errdefs.ErrUnavailable, or a failure of its own) — is a
// JSON-RPC internal error "what: err", kept apart from what a tool says.
func CallError(err error, what string) (*mcp.CallToolResult, error) {
	if Refused(err) {
		return toolError(err.Error()), nil
	}
	return nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: what + ": " + err.Error()}
}
