package mcpserver

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Relay forwards tool calls to an upstream MCP server: `airlock mcp`
// relays stdio to the daemon's /mcp. Progress the upstream reports for a
// call goes to the session that made the call.
type Relay struct {
	mu      sync.Mutex                 // guards waiting
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

// Upstream is one upstream MCP server to mirror.
type Upstream struct {
	Session *mcp.ClientSession
	// Prefix is put before each tool's name ("github." gives
	// "github.search").
	Prefix string
	// Timeout bounds one call; 0 is none. A call that takes longer gets
	// an error, and Hung is called (to replace the server).
	Timeout time.Duration
	Hung    func()
	// Ended, if set, says why the server is gone, for the error of a call
	// whose connection failed; nil if it still runs. It may wait a little
	// for the server's end to be known.
	Ended func() error
	// OnCall, if set, is told of each call.
	OnCall func(CallRecord)
}

// maxMirrored bounds the tools taken from one upstream: a hostile server
// could list without end, and each costs the daemon memory.
const maxMirrored = 512

// validName reports whether an upstream's tool name is one MCP allows
// (1-128 of A-Z a-z 0-9 _ - .): names reach clients and log lines.
func validName(name string) bool {
	if name == "" || len(name) > 128 {
		return false
	}
	for _, c := range name {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '.') {
			return false
		}
	}
	return true
}

// Mirror adds to s every tool the upstream lists, named Prefix plus its
// name, each call relayed as it is. It refuses an upstream that lists
// more than 512 tools, or a tool name MCP does not allow.
func (r *Relay) Mirror(ctx context.Context, s *mcp.Server, u Upstream) error {
	n := 0
	for t, err := range u.Session.Tools(ctx, nil) {
		if err != nil {
			return fmt.Errorf("list the upstream's tools: %w", err)
		}
		if n++; n > maxMirrored {
			return fmt.Errorf("the upstream lists more than %d tools", maxMirrored)
		}
		if !validName(t.Name) || !validName(u.Prefix+t.Name) {
			return fmt.Errorf("the upstream lists a tool named %.80q, which MCP does not allow", t.Name)
		}
		name := t.Name
		local := *t
		local.Name = u.Prefix + name
		if local.InputSchema == nil {
			local.InputSchema = map[string]any{"type": "object"}
		}
		s.AddTool(&local, func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			start := time.Now()
			res, err := r.call(ctx, u, name, req)
			if u.OnCall != nil {
				rec := CallRecord{Tool: local.Name, Outcome: OutcomeOK, Duration: time.Since(start)}
				switch {
				case err != nil:
					rec.Outcome, rec.Reason = OutcomeFailed, err.Error()
				case res.IsError:
					rec.Outcome = OutcomeToolError
				}
				u.OnCall(rec)
			}
			return res, err
		})
	}
	return nil
}

func (r *Relay) call(ctx context.Context, u Upstream, name string, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
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
	cctx := ctx
	if u.Timeout > 0 {
		var cancel context.CancelFunc
		cctx, cancel = context.WithTimeout(ctx, u.Timeout)
		defer cancel()
	}
	res, err := u.Session.CallTool(cctx, p)
	if err == nil {
		return res, nil
	}
	var rpc *jsonrpc.Error
	switch {
	case ctx.Err() != nil:
		return nil, err // the caller went away
	case cctx.Err() != nil:
		if u.Hung != nil {
			u.Hung()
		}
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: fmt.Sprintf("the MCP server did not answer within %s; its sandbox was destroyed", u.Timeout)}
	case errors.As(err, &rpc):
		return nil, rpc // the server answered with an error
	case u.Ended != nil:
		// The connection failed: say how the server ended, if it did.
		if e := u.Ended(); e != nil {
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "the MCP server has ended: " + e.Error()}
		}
	}
	return nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "the MCP server failed: " + err.Error()}
}
