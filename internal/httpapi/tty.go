package httpapi

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/httpx"
	"github.com/airlockhq/airlock/internal/node"
	"github.com/airlockhq/airlock/sandbox"
)

// ttyStream is the connection of a run or an exec with a terminal (see
// api.TTYUpgrade): made before the command has its sandbox, switched
// (upgrade) just before it starts. What the client types goes to the
// command through stdin; its window sizes through resize.
type ttyStream struct {
	size   sandbox.WinSize
	stdin  *io.PipeReader
	stdinW *io.PipeWriter
	// resize holds the latest window size not yet applied.
	resize chan sandbox.WinSize
	events *eventWriter
	// stall bounds each write of the events once switched.
	stall time.Duration
	// end ends the command, with the reason as its cause: the client went
	// away or broke the protocol, or the daemon shuts down.
	end context.CancelCauseFunc

	conn net.Conn
}

// Why a command with a terminal was ended from outside.
var (
	errTTYGone     = errors.New("the client's terminal went away")
	errTTYShutdown = errors.New("the daemon is shutting down")
)

// checkTTY refuses a request for a terminal that did not ask to switch
// protocols over HTTP/1.1, or that carries its input in the body.
func checkTTY(r *http.Request, size *api.TTYSize, stdin string) error {
	switch {
	case size == nil:
		return nil
	case stdin != "":
		return errdefs.New(errdefs.ErrInvalid, `"stdin" goes on the terminal's stream, not in a request with "tty"`)
	case r.ProtoMajor != 1 || !headerHasToken(r.Header, "Connection", "upgrade") || !strings.EqualFold(r.Header.Get("Upgrade"), api.TTYUpgrade):
		return errdefs.Errorf(errdefs.ErrInvalid, `a request with "tty" must ask for "Connection: Upgrade" and "Upgrade: %s" over HTTP/1.1`, api.TTYUpgrade)
	}
	return nil
}

// headerHasToken reports whether a comma-separated header holds token.
func headerHasToken(h http.Header, name, token string) bool {
	for _, v := range h.Values(name) {
		for _, t := range strings.Split(v, ",") {
			if strings.EqualFold(strings.TrimSpace(t), token) {
				return true
			}
		}
	}
	return false
}

// newTTY prepares the stream of a request with a terminal of size; ctx
// is the request's, and the returned one the command's. The daemon's
// shutdown ends it too (see Daemon.Shutdown).
func (d *Server) newTTY(ctx context.Context, size *api.TTYSize) (*ttyStream, context.Context, func()) {
	cctx, end := context.WithCancelCause(ctx)
	stop := context.AfterFunc(d.ttyEnd, func() { end(errTTYShutdown) })
	pr, pw := io.Pipe()
	t := &ttyStream{size: sandbox.WinSize{Rows: size.Rows, Cols: size.Cols}, stdin: pr, stdinW: pw,
		resize: make(chan sandbox.WinSize, 1), events: &eventWriter{ended: end}, stall: d.opts.StallTimeout, end: end}
	return t, cctx, func() {
		stop()
		end(nil)
		// The command has ended: typing into it fails from now on.
		pr.Close()
		if t.conn != nil {
			t.conn.Close()
		}
	}
}

// request puts the terminal into a run's request.
func (t *ttyStream) request(j *node.RunRequest) {
	j.TTY, j.Stdin, j.Resize = &t.size, t.stdin, t.resize
	j.Capture = false
	j.OnEvent = t.events.write
}

// execRequest puts the terminal into a session's exec request.
func (t *ttyStream) execRequest(x *sandbox.ExecRequest) {
	x.TTY, x.Stdin, x.Resize = &t.size, t.stdin, t.resize
	x.Capture = false
	x.OnEvent = t.events.write
}

// upgrade switches the connection to api.TTYUpgrade and starts reading
// what the client sends. Before it, events go nowhere (there are none:
// the command has not started).
func (t *ttyStream) upgrade(w http.ResponseWriter) error {
	conn, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return fmt.Errorf("switch to %s: %w", api.TTYUpgrade, err)
	}
	// The server's timeouts were for the request; the stream lasts as
	// long as the command.
	_ = conn.SetDeadline(time.Time{})
	t.conn = conn
	t.events.mu.Lock()
	t.events.out = httpx.ConnStream(brw.Writer, conn, t.stall)
	t.events.mu.Unlock()
	if _, err := brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: " + api.TTYUpgrade + "\r\n\r\n"); err != nil {
		return err
	}
	if err := brw.Flush(); err != nil {
		return err
	}
	go t.read(brw.Reader)
	return nil
}

// read takes the client's lines until the connection ends; an end, or a
// line that is not a TTYInput within api.MaxTTYInput, ends the command.
func (t *ttyStream) read(r *bufio.Reader) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 4<<10), api.MaxTTYInput)
	for sc.Scan() {
		var in api.TTYInput
		if err := json.Unmarshal(sc.Bytes(), &in); err != nil {
			t.end(fmt.Errorf("the client's terminal stream broke: %s", httpx.DescribeJSON(err)))
			t.stdinW.Close()
			return
		}
		if len(in.Data) > 0 {
			if _, err := t.stdinW.Write(in.Data); err != nil {
				return // the command has ended
			}
		}
		if in.Resize != nil {
			t.setSize(sandbox.WinSize{Rows: in.Resize.Rows, Cols: in.Resize.Cols})
		}
		if in.EOF {
			t.stdinW.Close()
		}
	}
	err := errTTYGone
	if sc.Err() != nil && errors.Is(sc.Err(), bufio.ErrTooLong) {
		err = fmt.Errorf("the client's terminal stream broke: a line over %d KiB", api.MaxTTYInput>>10)
	}
	t.end(err)
	t.stdinW.Close()
}

// setSize queues ws, replacing a size not yet applied.
func (t *ttyStream) setSize(ws sandbox.WinSize) {
	for {
		select {
		case t.resize <- ws:
			return
		default:
		}
		select {
		case <-t.resize:
		default:
		}
	}
}

// ttyCount counts the handlers of commands with a terminal, for shutdown
// to wait for; once it waits, no more are counted (they are refused).
type ttyCount struct {
	mu     sync.Mutex // guards closed, and orders add before the wait
	closed bool
	wg     sync.WaitGroup
}

func (c *ttyCount) add() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return false
	}
	c.wg.Add(1)
	return true
}

func (c *ttyCount) done() { c.wg.Done() }

func (c *ttyCount) closeAndWait() {
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	c.wg.Wait()
}
