package mcpserver

import (
	"errors"
	"fmt"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlockhq/airlock/internal/config"
	"github.com/airlockhq/airlock/internal/errdefs"
)

// TestCallError is MCP's map of errors to answers: a refusal the agent
// can act on is a tool error with the error's text; anything else is a
// JSON-RPC internal error.
func TestCallError(t *testing.T) {
	tests := []struct {
		err       error
		toolError bool
	}{
		{errdefs.New(errdefs.ErrInvalid, `invalid input "argv": an argument holds a NUL byte`), true},
		{&config.InputError{Input: "n", Reason: "is required"}, true},
		{errdefs.New(errdefs.ErrNotFound, "no such file in the workspace"), true},
		{errdefs.New(errdefs.ErrDenied, "not for this caller"), true},
		{errdefs.New(errdefs.ErrConflict, "this MCP session has no sandbox open"), true},
		{fmt.Errorf("%w: the file is 20 bytes", errdefs.ErrLimit), true},
		{errdefs.New(errdefs.ErrUnavailable, "the daemon is shutting down"), false},
		{errors.New("failed while running: setup"), false},
	}
	for _, tt := range tests {
		res, err := CallError(tt.err, "airlock")
		if tt.toolError {
			if err != nil || res == nil || !res.IsError || len(res.Content) != 1 || res.Content[0].(*mcp.TextContent).Text != tt.err.Error() {
				t.Errorf("CallError(%v) = %+v, %v; want a tool error with its text", tt.err, res, err)
			}
			continue
		}
		var je *jsonrpc.Error
		if res != nil || !errors.As(err, &je) || je.Code != jsonrpc.CodeInternalError || je.Message != "airlock: "+tt.err.Error() {
			t.Errorf("CallError(%v) = %+v, %v; want a JSON-RPC internal error", tt.err, res, err)
		}
	}
}
