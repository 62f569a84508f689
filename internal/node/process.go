package node

import (
	"context"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/airlockhq/airlock/internal/config"
	"github.com/airlockhq/airlock/result"
	"github.com/airlockhq/airlock/sandbox"
)

// A Process is a tool's command that lives past the call that started it
// (an MCP server for one client session): a run, recorded as one, in a
// sandbox of its own with the tool's policy bound, whose stdin and stdout
// are pipes its owner speaks a protocol over. It holds one of the node's
// MaxSessions, and of its caller's token's concurrency, until it ends.
type Process struct {
	// Stdin and Stdout are the command's.
	Stdin  io.WriteCloser
	Stdout io.ReadCloser

	sb     *sandbox.Sandbox
	stderr *tailWriter
	done   chan struct{} // closed once the command has ended
	stop   sync.Once
	// res is the command's result, once done is closed.
	res *result.Result
}

// StartProcess starts tool t's command for c: held, recorded, claimed,
// bound, started. It is listed in flight (kind "server") until it ends.
func (n *Node) StartProcess(ctx context.Context, t *config.Tool, c *Caller, client string) (_ *Process, err error) {
	if err := n.Authorize(c, t.Name); err != nil {
		return nil, err
	}
	release, err := n.hold(c, true)
	if err != nil {
		return nil, err
	}
	scope := &runScope{tool: t.Name, run: newRunID(), client: client}
	dir := Workdir("", t)
	if err := n.recordStart(ctx, *scope, t.Argv(), nil, dir); err != nil {
		release()
		return nil, err
	}
	sb, bind, err := n.claimBound(ctx, t, scope, nil)
	if err != nil {
		release()
		n.finishRun(ctx, *scope, &result.Result{Outcome: result.Error, Error: err.Error()})
		return nil, err
	}
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	p := &Process{Stdin: inW, Stdout: outR, sb: sb, stderr: &tailWriter{max: 2048}, done: make(chan struct{})}
	dropLive := n.live.add(&liveRun{id: scope.run, kind: "server", tool: t.Name, client: client, owner: c.Name, sb: sb, started: time.Now(), kill: func(string) { p.Stop() }})
	go func() {
		defer dropLive()
		// The process lives past the request that started it: until its
		// owner stops it, its ceilings hit, or the node stops.
		res := bind.Exec(context.Background(), sandbox.ExecRequest{
			Argv: t.Argv(), Env: t.Env, Dir: dir, Stdin: inR, Stdout: outW, Stderr: p.stderr,
		}, nil)
		_ = outW.CloseWithError(io.EOF)
		_ = inR.Close()
		// The sandbox served its one command: gone, whether its owner
		// stopped it or it ended on its own.
		_ = sb.Destroy(context.Background())
		_ = bind.Close(context.Background())
		n.finishRun(context.Background(), *scope, res)
		p.res = res
		close(p.done)
		release()
	}()
	return p, nil
}

// Done is closed once the command has ended.
func (p *Process) Done() <-chan struct{} { return p.done }

// Result is how the command ended; nil until Done is closed.
func (p *Process) Result() *result.Result {
	select {
	case <-p.done:
		return p.res
	default:
		return nil
	}
}

// Stderr is the last of what the command wrote to stderr.
func (p *Process) Stderr() string { return p.stderr.String() }

// Stop ends the command, destroys its sandbox and waits for its end to
// be recorded (its result is then Result's); the hold it had of the
// node's capacity is released just after.
func (p *Process) Stop() {
	p.stop.Do(func() {
		_ = p.Stdin.Close()
		// Destroy first: it ends the process (and so the exec) at once.
		_ = p.sb.Destroy(context.Background())
	})
	<-p.done
}

// tailWriter keeps the last bytes written to it.
type tailWriter struct {
	max int

	mu  sync.Mutex // guards buf
	buf []byte
}

func (w *tailWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, p...)
	if len(w.buf) > w.max {
		w.buf = append(w.buf[:0], w.buf[len(w.buf)-w.max:]...)
	}
	return len(p), nil
}

func (w *tailWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return strings.ToValidUTF8(string(w.buf), "?")
}
