package mcpedge

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlockhq/airlock/internal/config"
	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/httpx"
	"github.com/airlockhq/airlock/internal/mcpserver"
	"github.com/airlockhq/airlock/internal/node"
	"github.com/airlockhq/airlock/result"
	"github.com/airlockhq/airlock/sandbox"
)

// maxBuiltinArgs bounds the argv of a built-in run or exec.
const maxBuiltinArgs = 256

// mcpSessions ties airlock sessions to MCP sessions: each MCP session
// owns at most one, destroyed when the MCP session ends.
type mcpSessions struct {
	mu sync.Mutex // guards m
	m  map[*mcp.ServerSession]*node.Session
}

// addBuiltins adds the built-in tools the config enables, for a caller.
func (d *Server) addBuiltins(s *mcp.Server, c *node.Caller, client string) {
	var tools []string
	for _, name := range d.tools().Order {
		if c.Allows(name) {
			tools = append(tools, name)
		}
	}
	if len(tools) == 0 {
		return
	}
	argv := map[string]any{"type": "array", "items": map[string]any{"type": "string"}, "minItems": 1, "maxItems": maxBuiltinArgs,
		"description": "the command and its arguments; not given to a shell (use [\"sh\", \"-c\", \"...\"] for one)"}
	stdin := map[string]any{"type": "string", "description": "fed to the command's standard input"}
	toolIn := map[string]any{"type": "string", "enum": tools, "description": "the tool profile whose sandbox runs it"}
	obj := func(props map[string]any, required ...string) map[string]any {
		o := map[string]any{"type": "object", "properties": props, "additionalProperties": false}
		// Never "required": null: the official TypeScript SDK drops a
		// tool whose schema has it from tools/list.
		if len(required) > 0 {
			o["required"] = required
		}
		return o
	}
	record := d.recordCall(client)
	if d.tools().MCP.HasBuiltin(config.BuiltinRun) {
		s.AddTool(&mcp.Tool{
			Name:         "airlock_run",
			Description:  "Runs a command in a fresh sandbox of a tool profile, destroyed afterwards.",
			InputSchema:  obj(map[string]any{"tool": toolIn, "argv": argv, "stdin": stdin}, "tool", "argv"),
			OutputSchema: mcpserver.ResultSchema,
		}, builtin(record, "airlock_run", func(ctx context.Context, req *mcp.CallToolRequest, in builtinIn) (*mcp.CallToolResult, error) {
			t, err := d.builtinTool(c, in.Tool)
			if err != nil {
				return nil, err
			}
			j := node.RunRequest{Tool: t, Client: client, Caller: c, Argv: in.Argv, Dir: node.Workdir("", t), Capture: true}
			if in.Stdin != nil {
				j.Stdin = strings.NewReader(*in.Stdin)
			}
			res, done, err := d.Run(ctx, j)
			if err != nil {
				return nil, err
			}
			d.destroyLater(ctx, done)
			return runResult(res)
		}))
	}
	if !d.tools().MCP.HasBuiltin(config.BuiltinSession) {
		return
	}
	pathIn := map[string]any{"type": "string", "description": "a path relative to /workspace"}
	s.AddTool(&mcp.Tool{
		Name:        "airlock_session_open",
		Description: "Opens this MCP session's sandbox: one dedicated sandbox of a tool profile, kept until airlock_session_close or the end of the MCP session. Files and processes persist between execs.",
		InputSchema: obj(map[string]any{"tool": toolIn}, "tool"),
	}, builtin(record, "airlock_session_open", func(ctx context.Context, req *mcp.CallToolRequest, in builtinIn) (*mcp.CallToolResult, error) {
		t, err := d.builtinTool(c, in.Tool)
		if err != nil {
			return nil, err
		}
		if d.mcpSession(req.Session) != nil {
			return nil, errdefs.New(errdefs.ErrConflict, "this MCP session already has a sandbox; close it first")
		}
		sess, err := d.OpenSession(ctx, t, client, c, node.DefaultIdle, node.DefaultLife, nil)
		if err != nil {
			return nil, err
		}
		// Checked again as it is kept: of two opens at once on one MCP
		// session, the second would otherwise replace the first, whose
		// sandbox then waited out its idle time unreachable.
		d.mcpSess.mu.Lock()
		if d.mcpSess.m == nil {
			d.mcpSess.m = map[*mcp.ServerSession]*node.Session{}
		}
		_, taken := d.mcpSess.m[req.Session]
		if !taken {
			d.mcpSess.m[req.Session] = sess
		}
		d.mcpSess.mu.Unlock()
		if taken {
			_ = sess.End(context.WithoutCancel(ctx), "opened twice at once")
			return nil, errdefs.New(errdefs.ErrConflict, "this MCP session already has a sandbox; close it first")
		}
		go func() {
			_ = req.Session.Wait()
			d.closeMCPSession(req.Session, "MCP session ended")
		}()
		return text(fmt.Sprintf("opened a sandbox of tool %s (session %s); it is destroyed when this MCP session ends", t.Name, sess.ID())), nil
	}))
	s.AddTool(&mcp.Tool{
		Name:         "airlock_session_exec",
		Description:  "Runs a command in this MCP session's sandbox (open it first).",
		InputSchema:  obj(map[string]any{"argv": argv, "stdin": stdin}, "argv"),
		OutputSchema: mcpserver.ResultSchema,
	}, builtin(record, "airlock_session_exec", func(ctx context.Context, req *mcp.CallToolRequest, in builtinIn) (*mcp.CallToolResult, error) {
		sess, err := d.enterMCPSession(req.Session)
		if err != nil {
			return nil, err
		}
		defer sess.Leave()
		free, err := d.ReserveCapture(ctx, sess.Tool(), nil)
		if err != nil {
			return nil, err
		}
		defer free()
		x := sandbox.ExecRequest{Argv: in.Argv, Dir: node.Workdir("", sess.Tool()), Capture: true}
		if in.Stdin != nil {
			x.Stdin = strings.NewReader(*in.Stdin)
		}
		res, err := d.Exec(ctx, sess, client, x)
		if err != nil {
			return nil, err
		}
		return runResult(res)
	}))
	s.AddTool(&mcp.Tool{
		Name:        "airlock_session_write",
		Description: "Writes a text file into this MCP session's workspace, creating directories.",
		InputSchema: obj(map[string]any{"path": pathIn, "content": map[string]any{"type": "string", "maxLength": node.MaxFile}}, "path", "content"),
	}, builtin(record, "airlock_session_write", func(ctx context.Context, req *mcp.CallToolRequest, in builtinIn) (*mcp.CallToolResult, error) {
		sess, err := d.enterMCPSession(req.Session)
		if err != nil {
			return nil, err
		}
		defer sess.Leave()
		n, err := sess.WriteFile(in.Path, strings.NewReader(in.Content))
		d.RecordFile(client, sess, "put", in.Path, n, err)
		if err != nil {
			return nil, node.FileError(err)
		}
		return text(fmt.Sprintf("wrote %d bytes to %s", n, in.Path)), nil
	}))
	s.AddTool(&mcp.Tool{
		Name:        "airlock_session_read",
		Description: "Reads a file of this MCP session's workspace.",
		InputSchema: obj(map[string]any{"path": pathIn}, "path"),
	}, builtin(record, "airlock_session_read", func(ctx context.Context, req *mcp.CallToolRequest, in builtinIn) (*mcp.CallToolResult, error) {
		sess, err := d.enterMCPSession(req.Session)
		if err != nil {
			return nil, err
		}
		defer sess.Leave()
		f, size, err := sess.OpenFile(in.Path)
		d.RecordFile(client, sess, "get", in.Path, size, err)
		if err != nil {
			return nil, node.FileError(err)
		}
		defer f.Close()
		b, err := io.ReadAll(io.LimitReader(f, size))
		if err != nil {
			return nil, err
		}
		if !utf8.Valid(b) {
			return text(fmt.Sprintf("%s is %d bytes of binary data; read it with airlock_session_exec (base64 %s)", in.Path, len(b), in.Path)), nil
		}
		return text(string(b)), nil
	}))
	s.AddTool(&mcp.Tool{
		Name:        "airlock_session_close",
		Description: "Closes this MCP session's sandbox and destroys it.",
		InputSchema: obj(map[string]any{}),
	}, builtin(record, "airlock_session_close", func(ctx context.Context, req *mcp.CallToolRequest, in builtinIn) (*mcp.CallToolResult, error) {
		if !d.closeMCPSession(req.Session, "closed") {
			return nil, errdefs.New(errdefs.ErrConflict, "this MCP session has no sandbox open")
		}
		return text("closed; the sandbox was destroyed"), nil
	}))
}

// builtinIn holds the arguments of every built-in tool.
type builtinIn struct {
	Tool    string   `json:"tool"`
	Argv    []string `json:"argv"`
	Stdin   *string  `json:"stdin"`
	Path    string   `json:"path"`
	Content string   `json:"content"`
}

// builtin wraps a built-in tool's body: arguments decoded strictly, its
// errors answered by mcpserver.CallError (refusals are tool errors,
// airlock's failures protocol errors), and the call recorded.
func builtin(record func(mcpserver.CallRecord), name string, fn func(context.Context, *mcp.CallToolRequest, builtinIn) (*mcp.CallToolResult, error)) mcp.ToolHandler {
	return func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		rec := mcpserver.CallRecord{Tool: name}
		res, err := func() (*mcp.CallToolResult, error) {
			var in builtinIn
			dec := json.NewDecoder(strings.NewReader(string(req.Params.Arguments)))
			dec.DisallowUnknownFields()
			if len(req.Params.Arguments) > 0 {
				if err := dec.Decode(&in); err != nil {
					return nil, errdefs.New(errdefs.ErrInvalid, "invalid arguments: "+httpx.DescribeJSON(err))
				}
			}
			if len(in.Argv) > maxBuiltinArgs || (in.Argv != nil && (len(in.Argv) == 0 || in.Argv[0] == "")) {
				return nil, errdefs.Errorf(errdefs.ErrInvalid, `invalid input "argv": want a command and at most %d arguments`, maxBuiltinArgs-1)
			}
			for _, a := range in.Argv {
				if strings.IndexByte(a, 0) >= 0 {
					return nil, errdefs.New(errdefs.ErrInvalid, `invalid input "argv": an argument holds a NUL byte`)
				}
			}
			return fn(ctx, req, in)
		}()
		switch {
		case err != nil:
			rec.Outcome, rec.Reason = mcpserver.OutcomeFailed, err.Error()
			if mcpserver.Refused(err) {
				rec.Outcome = mcpserver.OutcomeInvalid
			}
			res, err = mcpserver.CallError(err, "airlock")
		default:
			rec.Outcome = mcpserver.OutcomeOK
			if sc, ok := res.StructuredContent.(mcpserver.Structured); ok {
				rec.Outcome, rec.Sandbox = string(sc.Outcome), sc.SandboxID
			}
		}
		record(rec)
		return res, err
	}
}

func text(s string) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: s}}}
}

// runResult is a run's result for a built-in, or the protocol error of
// airlock's own failure.
func runResult(r *result.Result) (*mcp.CallToolResult, error) {
	if r.Outcome == result.Error {
		return nil, errors.New("failed while running: " + r.Error)
	}
	return mcpserver.ToolResult(r), nil
}

// builtinTool is the tool profile a built-in call names, if the caller
// may use it.
func (d *Server) builtinTool(c *node.Caller, name string) (*config.Tool, error) {
	t, ok := d.tools().Tools[name]
	if !ok || !c.Allows(name) {
		return nil, errdefs.Errorf(errdefs.ErrInvalid, `invalid input "tool": no tool %q for this caller`, name)
	}
	return t, nil
}

func (d *Server) mcpSession(ss *mcp.ServerSession) *node.Session {
	d.mcpSess.mu.Lock()
	defer d.mcpSess.mu.Unlock()
	return d.mcpSess.m[ss]
}

// enterMCPSession enters the MCP session's sandbox session.
func (d *Server) enterMCPSession(ss *mcp.ServerSession) (*node.Session, error) {
	s := d.mcpSession(ss)
	if s == nil {
		return nil, errdefs.New(errdefs.ErrConflict, "this MCP session has no sandbox open; call airlock_session_open first")
	}
	if !s.Enter() {
		v := s.View()
		return nil, errdefs.Errorf(errdefs.ErrConflict, "this MCP session's sandbox has ended (%s); open another", v.EndReason)
	}
	return s, nil
}

// closeMCPSession ends the MCP session's sandbox, if it has one.
func (d *Server) closeMCPSession(ss *mcp.ServerSession, reason string) bool {
	d.mcpSess.mu.Lock()
	s := d.mcpSess.m[ss]
	delete(d.mcpSess.m, ss)
	d.mcpSess.mu.Unlock()
	if s == nil {
		return false
	}
	_ = s.End(context.Background(), reason)
	return true
}
