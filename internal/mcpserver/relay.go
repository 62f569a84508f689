package mcpserver

import (
	"context"
	"fmt"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Relay forwards tool calls to an upstream MCP server: `airlock mcp`
// relays stdio to the daemon's /mcp. Progress the upstream reports for a
// call goes to the session that made the call.
type Relay struct {
	mu      sync.Mutex
	waiting map[any]*mcp.ServerSession // progress token -> downstream
}

// NewRelay returns a relay; pass ClientOptions to mcp.NewClient for the
// upstream connection.
func NewRelay() *Relay { return &Relay{waiting: map[any]*mcp.ServerSession{}} }

// ClientOptions route upstream progress notifications.
func (r *Relay) ClientOptions() *mcp.ClientOptions {
	return &mcp.ClientOptions{ProgressNotificationHandler: func(ctx context.Context, req *mcp.ProgressNotificationClientRequest) {
		r.mu.Lock()
		ss := r.waiting[req.Params.ProgressToken]
		r.mu.Unlock()
		if ss != nil {
			_ = ss.NotifyProgress(ctx, req.Params)
		}
	}}
}

// Mirror adds to s every tool the upstream session lists, named prefix
// plus its name, each call relayed as it is.
func (r *Relay) Mirror(ctx context.Context, s *mcp.Server, up *mcp.ClientSession, prefix string) error {
	for t, err := range up.Tools(ctx, nil) {
		if err != nil {
			return fmt.Errorf("list the upstream's tools: %w", err)
		}
		name := t.Name
		local := *t
		local.Name = prefix + name
		if local.InputSchema == nil {
			local.InputSchema = map[string]any{"type": "object"}
		}
		s.AddTool(&local, func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			p := &mcp.CallToolParams{Name: name, Arguments: req.Params.Arguments}
			if tok := req.Params.GetProgressToken(); tok != nil {
				p.SetProgressToken(tok)
				r.mu.Lock()
				r.waiting[tok] = req.Session
				r.mu.Unlock()
				defer func() {
					r.mu.Lock()
					delete(r.waiting, tok)
					r.mu.Unlock()
				}()
			}
			return up.CallTool(ctx, p)
		})
	}
	return nil
}
