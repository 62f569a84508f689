// Package mcpserver turns configured tools into MCP tools: each tool with
// a command template is listed with its description and an input schema
// built from its declared inputs, and a call renders the arguments into
// whole arguments of the command (never shell text) and runs it in a
// fresh sandbox through a RunFunc. The daemon serves it over streamable
// HTTP, `airlock mcp` over stdio.
package mcpserver

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlockhq/airlock/internal/config"
	"github.com/airlockhq/airlock/internal/refusal"
	"github.com/airlockhq/airlock/internal/termtext"
	"github.com/airlockhq/airlock/result"
)

// Job is one call made concrete.
type Job struct {
	Tool *config.Tool
	Argv []string
	// RecordArgv is Argv with secret inputs masked, for the audit log.
	RecordArgv []string
	Stdin      *string
	// OnEvent gets the run's live events (output, for progress).
	OnEvent func(result.Event)
	// Record returns the record of the call given the run's result. A
	// RunFunc that calls it takes the record over: it records what
	// Record returns (with the run's own record, in one write of the
	// log) and OnCall is not told of the call. It calls Record only on
	// its way to returning a result (never with an error); one that
	// does not call it leaves the record to OnCall.
	Record func(*result.Result) CallRecord
}

// RunFunc runs a job in a fresh sandbox. An error means airlock could not
// run it at all (the audit log refused, no sandbox, shutting down); a
// result with outcome "error" means airlock failed while running it.
type RunFunc func(ctx context.Context, j Job) (*result.Result, error)

// CallRecord is what is recorded of one tools/call.
type CallRecord struct {
	Tool string
	// Arguments are the call's inputs with secret ones masked; nil when
	// they were refused.
	Arguments map[string]string
	// Outcome is the run's outcome, OutcomeInvalid for refused arguments,
	// or OutcomeFailed when airlock could not run it.
	Outcome  string
	Reason   string
	Duration time.Duration
	Sandbox  string
}

// Options configure a server.
type Options struct {
	Config *config.Config
	// Allows reports whether the caller may use a tool; nil allows all.
	Allows func(tool string) bool
	Run    RunFunc
	// OnCall, if set, is told of every call when it ends (the audit log).
	OnCall  func(CallRecord)
	Version string
}

// New builds an MCP server whose tools are the configured tools with a
// command that the caller may use.
func New(opts Options) *mcp.Server {
	s, _ := NewWithHandlers(opts)
	return s
}

// NewWithHandlers is New, and also returns each tool's handler by name: the
// very function the server calls for a tools/call of it.
func NewWithHandlers(opts Options) (*mcp.Server, map[string]mcp.ToolHandler) {
	so := &mcp.ServerOptions{
		Instructions: "Each tool runs its command in a fresh, isolated Linux sandbox that is destroyed afterwards. " +
			"Arguments become whole command-line arguments and are never interpreted by a shell.",
	}
	s := mcp.NewServer(&mcp.Implementation{Name: "airlock", Title: "airlock: sandboxed tools", Version: opts.Version}, so)
	hs := map[string]mcp.ToolHandler{}
	for _, name := range opts.Config.Order {
		t := opts.Config.Tools[name]
		if len(t.Command) == 0 || (opts.Allows != nil && !opts.Allows(name)) {
			continue
		}
		h := handler(opts, t)
		s.AddTool(&mcp.Tool{
			Name:         name,
			Description:  description(t),
			InputSchema:  InputSchema(t),
			OutputSchema: ResultSchema,
		}, h)
		hs[name] = h
	}
	return s, hs
}

func description(t *config.Tool) string {
	if t.Description != "" {
		return t.Description
	}
	var args []string
	for _, a := range t.Command {
		args = append(args, strings.Join(a.Parts, ""))
	}
	return "Runs " + strings.Join(args, " ") + " in a sandbox."
}

// InputSchema is the JSON Schema of a tool's arguments.
func InputSchema(t *config.Tool) map[string]any {
	props := map[string]any{}
	required := []string{}
	for _, in := range t.Inputs {
		p := map[string]any{"type": in.Type}
		if in.Description != "" {
			p["description"] = in.Description
		}
		if len(in.Enum) > 0 {
			p["enum"] = in.Enum
		}
		if in.Type == config.InputString {
			p["maxLength"] = in.MaxLength
		}
		if in.Minimum != nil {
			p["minimum"] = *in.Minimum
		}
		if in.Maximum != nil {
			p["maximum"] = *in.Maximum
		}
		if in.Default != nil {
			p["default"] = in.Default
		}
		props[in.Name] = p
		if in.Required {
			required = append(required, in.Name)
		}
	}
	return map[string]any{"type": "object", "properties": props, "required": required, "additionalProperties": false}
}

// progressChunk bounds the output carried by one progress notification.
const progressChunk = 4 << 10

func handler(opts Options, t *config.Tool) mcp.ToolHandler {
	return func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		start := time.Now()
		rec := CallRecord{Tool: t.Name}
		var taken atomic.Bool // the RunFunc records the call
		defer func() {
			if opts.OnCall != nil && !taken.Load() {
				rec.Duration = time.Since(start)
				opts.OnCall(rec)
			}
		}()
		call, err := t.Render(req.Params.Arguments)
		if err != nil {
			rec.Outcome, rec.Reason = OutcomeInvalid, err.Error()
			return CallError(err, "airlock could not read the arguments")
		}
		rec.Arguments = call.Recorded
		j := Job{Tool: t, Argv: call.Argv, RecordArgv: call.RecordArgv}
		if call.HasStdin {
			j.Stdin = &call.Stdin
		}
		if tok := req.Params.GetProgressToken(); tok != nil {
			var stop func()
			j.OnEvent, stop = progress(ctx, req.Session, tok)
			defer stop()
		}
		ran := func(res *result.Result) CallRecord {
			r := rec
			r.Outcome, r.Sandbox, r.Duration = string(res.Outcome), res.SandboxID, time.Since(start)
			if res.Outcome == result.Error {
				r.Reason = res.Error
			}
			return r
		}
		j.Record = func(res *result.Result) CallRecord {
			taken.Store(true)
			return ran(res)
		}
		res, err := opts.Run(ctx, j)
		if err != nil {
			// The tool never ran. A refusal is the agent's to act on;
			// anything else is a protocol error, kept apart from a
			// command's failure or a breach.
			rec.Outcome, rec.Reason = OutcomeFailed, err.Error()
			if Refused(err) {
				rec.Outcome = OutcomeInvalid
			}
			return CallError(err, "airlock could not run the tool")
		}
		rec = ran(res)
		if res.Outcome == result.Error {
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "airlock failed while running the tool: " + res.Error}
		}
		if ctx.Value(lazyTextKey{}) != nil {
			lazy, _ := LazyToolResult(res)
			return lazy, nil
		}
		return ToolResult(res), nil
	}
}

type lazyTextKey struct{}

// WithLazyText marks ctx as that of a call whose answer's writer encodes
// a run's text itself, from the result (ToolText): the tool's handler
// then answers with LazyToolResult, and holds no copy of the output.
func WithLazyText(ctx context.Context) context.Context {
	return context.WithValue(ctx, lazyTextKey{}, true)
}

// progressQueue bounds the progress notifications waiting to go out; past
// it they are dropped (each says how much output there is so far, so a
// later one makes up for a lost one).
const progressQueue = 16

// progress returns an event handler that reports output as progress, and
// a stop for when the run is over. The handler never blocks: the run's
// output pumps call it, and a client that stops reading its notifications
// must not hold the run (sandbox.ExecRequest.OnEvent). The notifications
// go out on a goroutine of their own, in order; those that find the queue
// full are dropped.
func progress(ctx context.Context, ss *mcp.ServerSession, tok any) (func(result.Event), func()) {
	q := make(chan *mcp.ProgressNotificationParams, progressQueue)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for p := range q {
			_ = ss.NotifyProgress(ctx, p)
		}
	}()
	var mu sync.Mutex // guards sent and closed: the two output pumps call in at once
	var sent float64
	closed := false
	on := func(ev result.Event) {
		if ev.Type != result.EventStdout && ev.Type != result.EventStderr {
			return
		}
		data := ev.Data
		if len(data) > progressChunk {
			data = data[:progressChunk]
		}
		mu.Lock()
		defer mu.Unlock()
		sent += float64(len(ev.Data))
		if closed {
			return
		}
		select {
		case q <- &mcp.ProgressNotificationParams{
			ProgressToken: tok,
			Progress:      sent,
			Message:       ev.Type + ": " + strings.ToValidUTF8(string(data), "\uFFFD"),
		}:
		default:
		}
	}
	stop := func() {
		mu.Lock()
		if !closed {
			closed = true
			close(q)
		}
		mu.Unlock()
		// Those queued go out before the call's answer, unless the
		// client stopped reading: then the answer does not wait.
		select {
		case <-done:
		case <-ctx.Done():
		case <-time.After(progressFlush):
		}
	}
	return on, stop
}

// progressFlush bounds how long a call's answer waits for its queued
// progress notifications.
const progressFlush = 2 * time.Second

func toolError(msg string) *mcp.CallToolResult {
	return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: msg}}}
}

// ToolResult is a run's result as MCP content: the result object as
// structured content, and its output as text. A breach or a failed
// command is a tool error.
func ToolResult(r *result.Result) *mcp.CallToolResult {
	text := ""
	if pieces, ok := ToolText(r); ok {
		text = string(bytes.Join(pieces, nil))
	} else {
		text = invalidText(r)
	}
	return toolResult(r, text)
}

// LazyToolResult is ToolResult without its text, when ToolText can give
// it as pieces: the text content is then empty, for a writer that encodes
// it from the pieces (the daemon's answer of a tools/call, which so holds
// no copy of the output). ok says which it is.
func LazyToolResult(r *result.Result) (res *mcp.CallToolResult, lazy bool) {
	if _, ok := ToolText(r); ok {
		return toolResult(r, ""), true
	}
	return ToolResult(r), false
}

func toolResult(r *result.Result, text string) *mcp.CallToolResult {
	return &mcp.CallToolResult{
		IsError:           r.Outcome != result.Exited || r.ExitCode != 0,
		Content:           []mcp.Content{&mcp.TextContent{Text: text}},
		StructuredContent: Structured{r},
	}
}

// ToolText is the text of ToolResult's content as pieces to be written
// one after another; the output's pieces are r's own buffers, not copies.
// ok is false when the output is not valid UTF-8: its text is then not
// its bytes, and only ToolResult gives it.
func ToolText(r *result.Result) (pieces [][]byte, ok bool) {
	if !utf8.Valid(r.Stdout) || !utf8.Valid(r.Stderr) {
		return nil, false
	}
	n := 0
	add := func(b []byte) {
		pieces = append(pieces, b)
		n += len(b)
	}
	if h := textHead(r); h != "" {
		add([]byte(h))
	}
	text := func(name string, o result.Output) {
		if len(o) == 0 {
			return
		}
		if n > 0 || name == "stderr" {
			add([]byte(name + ":\n"))
		}
		add(o)
		if o[len(o)-1] != '\n' {
			add([]byte("\n"))
		}
	}
	text("stdout", r.Stdout)
	text("stderr", r.Stderr)
	if r.Truncated {
		add([]byte("(output truncated at the output ceiling)\n"))
	}
	if d := Denials(r); d != "" {
		add([]byte(d))
	}
	return pieces, true
}

// Denials is what a tool result's text says of the run's refusals, after
// the output (refusal.Text): one sentence each, distinct ones only, so
// that the model reads why a client failed where the client itself
// prints only "CONNECT tunnel failed, response 403"; "" when nothing was
// refused.
func Denials(r *result.Result) string { return refusal.Text(r) }

// textHead is the text's first line: how the command ended, unless it
// exited 0.
func textHead(r *result.Result) string {
	switch r.Outcome {
	case result.LimitExceeded:
		head := fmt.Sprintf("limit exceeded: %s; the sandbox was destroyed\n", r.Limit)
		if pm := r.PostMortem.Summary(); pm != "" {
			head += "post-mortem: " + termtext.String(pm) + "\n"
		}
		return head
	case result.Signaled:
		return fmt.Sprintf("killed by signal %d\n", r.Signal)
	case result.Exited:
		if r.ExitCode != 0 {
			return fmt.Sprintf("exit code %d\n", r.ExitCode)
		}
	}
	return ""
}

// invalidText is the text of a result whose output is not valid UTF-8.
func invalidText(r *result.Result) string {
	var b strings.Builder
	b.WriteString(textHead(r))
	text := func(name string, o result.Output) {
		if len(o) == 0 {
			return
		}
		s := string(o)
		if !utf8.Valid(o) {
			s = strings.ToValidUTF8(s, "\uFFFD") + "\n(not valid UTF-8; the exact bytes are in the structured result)"
		}
		if b.Len() > 0 || name == "stderr" {
			fmt.Fprintf(&b, "%s:\n", name)
		}
		b.WriteString(s)
		if !strings.HasSuffix(s, "\n") {
			b.WriteByte('\n')
		}
	}
	text("stdout", r.Stdout)
	text("stderr", r.Stderr)
	if r.Truncated {
		b.WriteString("(output truncated at the output ceiling)\n")
	}
	b.WriteString(Denials(r))
	return b.String()
}
