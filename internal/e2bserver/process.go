package e2bserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlockhq/airlock/internal/e2b"
	"github.com/airlockhq/airlock/internal/edge"
	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/httpx"
	"github.com/airlockhq/airlock/internal/node"
	"github.com/airlockhq/airlock/internal/refusal"
	"github.com/airlockhq/airlock/result"
	"github.com/airlockhq/airlock/sandbox"
)

// The E2B process service (process.Process) over Connect.

// e2bProc is a command started through process.Process/Start.
type e2bProc struct {
	pid    uint32
	config e2b.ProcessConfig
	signal chan unix.Signal
	// stdin, for a command started with stdin or a pty, takes
	// SendInput's bytes; CloseStdin closes it (on a pty: a Ctrl-D).
	stdin *io.PipeWriter
	// resize, for a command with a pty, carries Update's sizes.
	resize chan sandbox.WinSize

	// mu guards subs: the streams its output goes to (Start's, and each
	// Connect's). done is closed once it has ended, with end (or
	// endErr) set before.
	mu     sync.Mutex
	subs   map[*e2bStream]struct{}
	done   chan struct{}
	end    *e2b.EndEvent
	endErr error
}

// send gives ev to every stream attached to p.
func (p *e2bProc) send(ev e2b.ProcessEvent) {
	p.mu.Lock()
	subs := make([]*e2bStream, 0, len(p.subs))
	for s := range p.subs {
		subs = append(subs, s)
	}
	p.mu.Unlock()
	for _, s := range subs {
		s.event(ev)
	}
}

// attachWith adds st to p's streams, with first written to it before any
// output p sends it (the start event, which a client acts on); the
// returned func removes it.
func (p *e2bProc) attachWith(st *e2bStream, first e2b.ProcessEvent) func() {
	p.mu.Lock()
	st.event(first)
	p.subs[st] = struct{}{}
	p.mu.Unlock()
	return func() {
		p.mu.Lock()
		delete(p.subs, st)
		p.mu.Unlock()
	}
}

// finish ends a stream as p ended: its end event and the end of stream,
// or the error that ended it.
func (p *e2bProc) finish(st *e2bStream) {
	if p.endErr != nil {
		st.end(p.endErr)
		return
	}
	st.end(nil, e2b.ProcessEvent{End: p.end})
}

func (d *Server) e2bProcList(r *http.Request, sb *e2bSandbox, _ []byte) (any, error) {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	out := []e2b.ProcessInfo{}
	for _, p := range sb.procs {
		out = append(out, e2b.ProcessInfo{Config: p.config, PID: p.pid})
	}
	return map[string]any{"processes": out}, nil
}

func (d *Server) e2bSignal(r *http.Request, sb *e2bSandbox, body []byte) (any, error) {
	var req e2b.SignalRequest
	if err := json.Unmarshal(body, &req); err != nil {
		return nil, errdefs.Errorf(errdefs.ErrInvalid, "request: %s", httpx.DescribeJSON(err))
	}
	sig, ok := e2b.Signals[req.Signal]
	if !ok {
		return nil, errdefs.Errorf(errdefs.ErrInvalid, "signal %q: want SIGNAL_SIGKILL or SIGNAL_SIGTERM", node.Shorten(req.Signal))
	}
	p, err := sb.procOf(req.Process)
	if err != nil {
		return nil, err
	}
	select {
	case p.signal <- unix.Signal(sig):
	default: // one is on its way already
	}
	return struct{}{}, nil
}

// procOf finds the process a request selects.
func (sb *e2bSandbox) procOf(sel e2b.Selector) (*e2bProc, error) {
	if sel.PID == nil {
		return nil, errdefs.Errorf(errdefs.ErrInvalid, "process.pid is required (tags are not supported)")
	}
	sb.mu.Lock()
	p := sb.procs[*sel.PID]
	sb.mu.Unlock()
	if p == nil {
		return nil, errdefs.Errorf(errdefs.ErrNotFound, "process %d not found", *sel.PID)
	}
	return p, nil
}

func (d *Server) e2bInput(r *http.Request, sb *e2bSandbox, body []byte) (any, error) {
	var req struct {
		Process e2b.Selector `json:"process"`
		Input   struct {
			Stdin []byte `json:"stdin"`
			PTY   []byte `json:"pty"`
		} `json:"input"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		return nil, errdefs.Errorf(errdefs.ErrInvalid, "request: %s", httpx.DescribeJSON(err))
	}
	p, err := sb.procOf(req.Process)
	if err != nil {
		return nil, err
	}
	if err := p.input(req.Input.Stdin, req.Input.PTY); err != nil {
		return nil, err
	}
	return struct{}{}, nil
}

// input gives the command stdin bytes, or a pty's typed ones (pty not
// nil). It blocks while the command does not read, at most until it ends.
func (p *e2bProc) input(stdin, pty []byte) error {
	in := stdin
	switch {
	case pty != nil && p.resize == nil:
		return errdefs.Errorf(errdefs.ErrInvalid, "process %d has no pty: send stdin", p.pid)
	case pty != nil:
		in = pty
	case p.resize != nil:
		return errdefs.Errorf(errdefs.ErrInvalid, "process %d has a pty: send pty input", p.pid)
	case p.stdin == nil:
		return errdefs.Errorf(errdefs.ErrInvalid, "process %d was not started with stdin", p.pid)
	}
	if _, err := p.stdin.Write(in); err != nil {
		return errdefs.Errorf(errdefs.ErrNotFound, "process %d: its input is closed", p.pid)
	}
	return nil
}

// e2bStreamInput is process.Process/StreamInput, a client stream: a
// start naming the process, then its input, message by message, given to
// the command as it comes; answered once the client's stream has ended
// (or at the first message refused). Each wait for the next message is
// bounded by the server's stall timeout, as an upload's.
func (d *Server) e2bStreamInput(w http.ResponseWriter, r *http.Request) {
	st := &e2bStream{w: w, out: httpx.NewStream(w, d.opts.StallTimeout)}
	sb, err := d.e2bEnvd(r)
	if err != nil {
		st.end(err)
		return
	}
	var p *e2bProc
	for {
		flags, msg, err := e2b.ReadEnvelope(r.Body, e2b.MaxMessage)
		switch {
		case errors.Is(err, io.EOF):
			st.write(0, struct{}{}, false)
			st.end(nil)
			return
		case errors.Is(err, e2b.ErrTooLarge):
			st.end(e2b.Errorf(e2b.CodeResourceExhaust, "a message %v", err))
			return
		case err != nil:
			st.end(e2b.Errorf(e2b.CodeInvalidArgument, "the input stream: %v", err))
			return
		case flags&e2b.FlagCompressed != 0:
			st.end(e2b.Errorf(e2b.CodeUnimplemented, "compressed messages are not supported"))
			return
		case flags&e2b.FlagEndStream != 0:
			st.write(0, struct{}{}, false)
			st.end(nil)
			return
		}
		var ev struct {
			Start *struct {
				Process e2b.Selector `json:"process"`
			} `json:"start"`
			Data *struct {
				Input struct {
					Stdin []byte `json:"stdin"`
					PTY   []byte `json:"pty"`
				} `json:"input"`
			} `json:"data"`
		}
		if err := json.Unmarshal(msg, &ev); err != nil {
			st.end(errdefs.Errorf(errdefs.ErrInvalid, "a message: %s", httpx.DescribeJSON(err)))
			return
		}
		switch {
		case ev.Start != nil && p == nil:
			if p, err = sb.procOf(ev.Start.Process); err != nil {
				st.end(err)
				return
			}
		case ev.Start != nil:
			st.end(errdefs.New(errdefs.ErrInvalid, "a second start: the stream's process is named once"))
			return
		case ev.Data != nil && p == nil:
			st.end(errdefs.New(errdefs.ErrInvalid, "input before the start that names its process"))
			return
		case ev.Data != nil:
			if err := p.input(ev.Data.Input.Stdin, ev.Data.Input.PTY); err != nil {
				st.end(err)
				return
			}
		}
		// Anything else is a keepalive.
	}
}

// maxPTYSide bounds a pty's rows and columns.
const maxPTYSide = 1000

// ptySize checks a pty size of the API.
func ptySize(rows, cols uint32) (sandbox.WinSize, error) {
	if rows == 0 || cols == 0 || rows > maxPTYSide || cols > maxPTYSide {
		return sandbox.WinSize{}, errdefs.Errorf(errdefs.ErrInvalid, "pty size of %d rows and %d cols: each must be 1 to %d", rows, cols, maxPTYSide)
	}
	return sandbox.WinSize{Rows: uint16(rows), Cols: uint16(cols)}, nil
}

// e2bUpdate serves process.Process/Update: a pty's new size.
func (d *Server) e2bUpdate(r *http.Request, sb *e2bSandbox, body []byte) (any, error) {
	var req struct {
		Process e2b.Selector `json:"process"`
		PTY     *struct {
			Size struct {
				Cols uint32 `json:"cols"`
				Rows uint32 `json:"rows"`
			} `json:"size"`
		} `json:"pty"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		return nil, errdefs.Errorf(errdefs.ErrInvalid, "request: %s", httpx.DescribeJSON(err))
	}
	p, err := sb.procOf(req.Process)
	if err != nil {
		return nil, err
	}
	switch {
	case req.PTY == nil:
		return struct{}{}, nil // nothing to change
	case p.resize == nil:
		return nil, errdefs.Errorf(errdefs.ErrInvalid, "process %d has no pty to resize", p.pid)
	}
	size, err := ptySize(req.PTY.Size.Rows, req.PTY.Size.Cols)
	if err != nil {
		return nil, err
	}
	// Handed to the command's loop, which sets the size at once: the
	// answer goes out once it has it, so input sent after the answer
	// meets the new size (an SDK resizes, then types `stty size`).
	t := time.NewTimer(resizeWait)
	defer t.Stop()
	select {
	case p.resize <- size:
		return struct{}{}, nil
	case <-p.done:
		return struct{}{}, nil // ended: no size to change
	case <-r.Context().Done():
		return nil, context.Cause(r.Context())
	case <-t.C:
		return nil, errdefs.Errorf(errdefs.ErrUnavailable, "process %d did not take its new size within %s", p.pid, resizeWait)
	}
}

// resizeWait bounds how long a resize waits for its command's loop.
const resizeWait = 5 * time.Second

func (d *Server) e2bCloseStdin(r *http.Request, sb *e2bSandbox, body []byte) (any, error) {
	var req struct {
		Process e2b.Selector `json:"process"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		return nil, errdefs.Errorf(errdefs.ErrInvalid, "request: %s", httpx.DescribeJSON(err))
	}
	p, err := sb.procOf(req.Process)
	if err != nil {
		return nil, err
	}
	if p.stdin == nil {
		return nil, errdefs.Errorf(errdefs.ErrInvalid, "process %d was not started with stdin", p.pid)
	}
	p.stdin.Close()
	return struct{}{}, nil
}

// connectTimeout is a stream's Connect-Timeout-Ms (0: none).
func connectTimeout(r *http.Request) (time.Duration, error) {
	v := r.Header.Get("Connect-Timeout-Ms")
	if v == "" {
		return 0, nil
	}
	ms, err := strconv.ParseInt(v, 10, 64)
	if err != nil || ms < 0 || len(v) > 10 {
		return 0, errdefs.Errorf(errdefs.ErrInvalid, "Connect-Timeout-Ms %q is not a number of milliseconds", node.Shorten(v))
	}
	return time.Duration(ms) * time.Millisecond, nil
}

// keepaliveEvery bounds the silence of a process's stream: the SDK's
// HTTP client gives up on a response silent for 300 s.
const keepaliveEvery = 50 * time.Second

// e2bStart is process.Process/Start: the command runs in the session's
// sandbox; its stream says it started, carries its output, and ends
// with its end. The client going away does not end the command; the
// Connect-Timeout-Ms header is its lifetime (a SIGKILL when it runs out).
func (d *Server) e2bStart(w http.ResponseWriter, r *http.Request) {
	st := &e2bStream{w: w, out: httpx.NewStream(w, d.opts.StallTimeout)}
	sb, err := d.e2bEnvd(r)
	if err != nil {
		st.end(err)
		return
	}
	var req e2b.StartRequest
	if err := e2b.ReadRequest(r.Body, &req); err != nil {
		st.end(err)
		return
	}
	switch {
	case req.Process == nil || req.Process.Cmd == "":
		st.end(errdefs.Errorf(errdefs.ErrInvalid, "process.cmd is required"))
		return
	}
	var tty *sandbox.WinSize
	if req.PTY != nil {
		size, err := ptySize(req.PTY.Size.Rows, req.PTY.Size.Cols)
		if err != nil {
			st.end(err)
			return
		}
		tty = &size
	}
	env := append([]string(nil), sb.env...)
	for k, v := range req.Process.Envs {
		if k == "" || strings.ContainsAny(k, "=\x00") || strings.ContainsRune(v, 0) {
			st.end(errdefs.Errorf(errdefs.ErrInvalid, "envs: %q is not a variable name", node.Shorten(k)))
			return
		}
		env = append(env, k+"="+v)
	}
	dir := ""
	if req.Process.Cwd != nil {
		dir = *req.Process.Cwd
		if !path.IsAbs(dir) {
			st.end(errdefs.Errorf(errdefs.ErrInvalid, "cwd %q is not an absolute path", node.Shorten(dir)))
			return
		}
	}
	life, err := connectTimeout(r)
	if err != nil {
		st.end(err)
		return
	}
	if !sb.s.Enter() {
		st.end(errdefs.Errorf(errdefs.ErrNotFound, "sandbox %q has ended", sb.s.ID()))
		return
	}
	defer sb.s.Leave()
	p := &e2bProc{config: *req.Process, signal: make(chan unix.Signal, 1), subs: map[*e2bStream]struct{}{}, done: make(chan struct{})}
	sb.mu.Lock()
	sb.nextPID++
	p.pid = sb.nextPID
	sb.procs[p.pid] = p
	sb.mu.Unlock()
	defer func() {
		sb.mu.Lock()
		delete(sb.procs, p.pid)
		sb.mu.Unlock()
	}()
	var timedOut atomic.Bool
	if life > 0 {
		t := time.AfterFunc(life, func() {
			timedOut.Store(true)
			select {
			case p.signal <- unix.SIGKILL:
			default:
			}
		})
		defer t.Stop()
	}
	x := sandbox.ExecRequest{Argv: append([]string{req.Process.Cmd}, req.Process.Args...), Env: env, Dir: node.Workdir(dir, sb.s.Tool()), Signal: p.signal}
	if tty != nil {
		x.TTY = tty
		p.resize = make(chan sandbox.WinSize)
		x.Resize = p.resize
	}
	if (req.Stdin != nil && *req.Stdin) || req.PTY != nil {
		pr, pw := io.Pipe()
		x.Stdin, p.stdin = pr, pw
		// Once the command has ended, input sent to it fails.
		defer pr.Close()
	}
	x.OnEvent = func(ev result.Event) {
		switch {
		case ev.Type == result.EventStdout && x.TTY != nil:
			// A terminal's output is one stream.
			p.send(e2b.ProcessEvent{Data: &e2b.DataEvent{PTY: ev.Data}})
		case ev.Type == result.EventStdout:
			p.send(e2b.ProcessEvent{Data: &e2b.DataEvent{Stdout: ev.Data}})
		case ev.Type == result.EventStderr:
			p.send(e2b.ProcessEvent{Data: &e2b.DataEvent{Stderr: ev.Data}})
		}
	}
	// Attached as its start event goes out: a client that acts on the
	// start (sends input) sees all the output that follows it.
	detach := p.attachWith(st, e2b.ProcessEvent{Start: &e2b.StartEvent{PID: p.pid}})
	stop := st.keepalive(keepaliveEvery)
	// Not the request's context: the command outlives its client.
	res, err := d.Exec(context.WithoutCancel(r.Context()), sb.s, edge.ClientOf(r), x)
	if err == nil {
		// An E2B client reads a command's output and nothing else of
		// its run: the run's refusals (internal/refusal) follow the
		// command's own stderr, once each, as an MCP tool result's
		// text lists them, so that an agent reads why its curl or
		// pip failed.
		if t := refusal.Text(res); t != "" {
			if x.TTY != nil {
				p.send(e2b.ProcessEvent{Data: &e2b.DataEvent{PTY: []byte(strings.ReplaceAll(t, "\n", "\r\n"))}})
			} else {
				p.send(e2b.ProcessEvent{Data: &e2b.DataEvent{Stderr: []byte(t)}})
			}
		}
	}
	stop()
	detach()
	switch {
	case err != nil:
		p.endErr = err
	case res.Outcome == result.Signaled && res.Signal == int(unix.SIGKILL) && timedOut.Load():
		// As envd: the call's deadline passed, which ends the stream
		// (the SDKs' TimeoutError), and the command with it.
		p.endErr = errdefs.Errorf(errTimedOut, "the command's timeout of %v passed: it was killed", life)
	case res.Outcome != result.LimitExceeded && ending(sb.s):
		// Killed with its sandbox (a kill, its timeout): as E2B's,
		// where the connection to the sandbox goes with it, this is
		// not the command's end but the sandbox's.
		p.endErr = errdefs.Errorf(errEnded, "sandbox %q was not found: it ended while the command ran (%s)", sb.s.ID(), sb.s.View().EndReason)
	default:
		p.end = endEvent(res)
	}
	close(p.done)
	p.finish(st)
}

// e2bProcConnect is process.Process/Connect: a stream of a running command's
// output from now on (not what it wrote before), and its end.
func (d *Server) e2bProcConnect(w http.ResponseWriter, r *http.Request) {
	st := &e2bStream{w: w, out: httpx.NewStream(w, d.opts.StallTimeout)}
	sb, err := d.e2bEnvd(r)
	if err != nil {
		st.end(err)
		return
	}
	var req struct {
		Process e2b.Selector `json:"process"`
	}
	if err := e2b.ReadRequest(r.Body, &req); err != nil {
		st.end(err)
		return
	}
	p, err := sb.procOf(req.Process)
	if err != nil {
		st.end(err)
		return
	}
	// Attached as its start event goes out: a client that acts on the
	// start (sends input) sees all the output that follows it.
	detach := p.attachWith(st, e2b.ProcessEvent{Start: &e2b.StartEvent{PID: p.pid}})
	stop := st.keepalive(keepaliveEvery)
	select {
	case <-p.done:
	case <-r.Context().Done():
	}
	stop()
	detach()
	select {
	case <-p.done:
		p.finish(st)
	default: // the client went away first
	}
}

// ending says whether s has started to end.
func ending(s *node.Session) bool {
	select {
	case <-s.Ending():
		return true
	default:
		return false
	}
}

// endEvent is a result as envd reports a process's end. A breach, which
// also ends the sandbox, is an error that names the ceiling.
func endEvent(r *result.Result) *e2b.EndEvent {
	switch r.Outcome {
	case result.Exited:
		e := &e2b.EndEvent{ExitCode: int32(r.ExitCode), Exited: true, Status: fmt.Sprintf("exit status %d", r.ExitCode)}
		if r.ExitCode != 0 {
			e.Error = e.Status
		}
		return e
	case result.Signaled:
		name := unix.SignalName(unix.Signal(r.Signal))
		return &e2b.EndEvent{ExitCode: -1, Status: "signal: " + name, Error: "signal: " + name}
	case result.LimitExceeded:
		msg := "the sandbox was destroyed: limit exceeded"
		if r.Limit != nil {
			msg = fmt.Sprintf("the sandbox was destroyed: limit exceeded: %s (ceiling %d %s, observed %d)", r.Limit.Name, r.Limit.Ceiling, r.Limit.Unit, r.Limit.Observed)
		}
		if pm := r.PostMortem.Summary(); pm != "" {
			msg += "; post-mortem: " + pm
		}
		return &e2b.EndEvent{ExitCode: -1, Status: msg, Error: msg}
	default:
		return &e2b.EndEvent{ExitCode: -1, Status: "error: " + r.Error, Error: r.Error}
	}
}

// e2bStream writes a server-streaming Connect answer: 200 with
// application/connect+json once, enveloped events, an end of stream.
// Writes after the client went away are dropped.
type e2bStream struct {
	w http.ResponseWriter
	// out bounds each write: a client that takes nothing for its stall
	// time has stopped reading, and the stream is dropped (so that a
	// process's output, which every stream attached to it gets, never
	// waits on it).
	out *httpx.Stream

	mu      sync.Mutex // guards started and gone, and orders the writes
	started bool
	gone    bool // the client went away, or the stream has ended
}

func (s *e2bStream) write(flags byte, v any, flush bool) {
	b, err := json.Marshal(v)
	if err != nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.started {
		s.w.Header().Set("Content-Type", "application/connect+json")
		s.w.WriteHeader(http.StatusOK)
		s.started = true
	}
	if s.gone {
		return
	}
	if s.out.Write(e2b.AppendEnvelope(nil, flags, b)) != nil {
		s.gone = true
		return
	}
	if flush && s.out.Flush() != nil {
		s.gone = true
		return
	}
	if flags&e2b.FlagEndStream != 0 {
		// The handler returns next: nothing touches w after this. The
		// connection may carry the client's next request.
		s.out.End()
		s.gone = true
	}
}

func (s *e2bStream) event(ev e2b.ProcessEvent) { s.write(0, e2b.StreamEvent{Event: ev}, true) }

// end ends the stream, with err as the call's error if it is not nil; a
// last event, if given, goes out in the same write.
func (s *e2bStream) end(err error, last ...e2b.ProcessEvent) {
	for _, ev := range last {
		s.write(0, e2b.StreamEvent{Event: ev}, false)
	}
	var es e2b.EndStream
	if err != nil {
		es.Error = rpcError(err)
	}
	s.write(e2b.FlagEndStream, es, true)
}

// keepalive sends a keepalive event after every interval of silence
// until stop.
func (s *e2bStream) keepalive(every time.Duration) (stop func()) {
	t := time.NewTicker(every)
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-t.C:
				s.event(e2b.ProcessEvent{Keepalive: &struct{}{}})
			case <-done:
				return
			}
		}
	}()
	return func() { t.Stop(); close(done) }
}
