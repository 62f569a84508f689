package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlockhq/airlock/internal/config"
	"github.com/airlockhq/airlock/internal/mcpserver"
	"github.com/airlockhq/airlock/internal/runner"
	"github.com/airlockhq/airlock/result"
	"github.com/airlockhq/airlock/sandbox"
)

// Gateway bounds.
const (
	// serverStart bounds an MCP server's start: the sandbox, the process
	// and the MCP handshake.
	serverStart = 30 * time.Second
	// serverCallDefault bounds one tools/call relayed to an MCP server.
	serverCallDefault = 2 * time.Minute
)

// serverCall is serverCallDefault; tests shorten it.
var serverCall = serverCallDefault

// instance is one third-party MCP server running in a sandbox of its own
// for one client session; it is destroyed with the session and never
// used by another.
type instance struct {
	name  string
	sb    *sandbox.Sandbox
	bind  *runner.Binding
	stdin *io.PipeWriter
	tail  *tailWriter
	done  chan struct{} // closed when the server's process has ended
	close sync.Once     // stop runs once

	// mu guards up and ended. The instance is listed for a shutdown's
	// stopAll before its handshake sets up.
	mu    sync.Mutex
	up    *mcp.ClientSession
	ended error // why it ended, once it has
}

// endedErr says why the server is gone, or nil while it runs. A call
// can see the server's pipe close before its end is known, so it waits a
// moment for that.
func (i *instance) endedErr() error {
	select {
	case <-i.done:
	case <-time.After(2 * time.Second):
		return nil
	}
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.ended
}

// stop ends the server and destroys its sandbox.
func (i *instance) stop() {
	i.close.Do(func() {
		i.mu.Lock()
		up := i.up
		i.mu.Unlock()
		if up != nil {
			_ = up.Close()
		}
		_ = i.stdin.Close()
		// Destroy first: it ends the process (and so the exec) at once.
		_ = i.sb.Destroy(context.Background())
		<-i.done
		_ = i.bind.Close(context.Background())
	})
}

// startServer starts one MCP server for a client: a sandbox of its
// profile with its policy bound, the command on pipes, the handshake.
// The server is one of the daemon's MaxSessions, and of c's token's
// concurrency, until it ends.
func (d *Daemon) startServer(ctx context.Context, t *config.Tool, c *caller, client string) (_ *instance, err error) {
	release, err := d.hold(c, true)
	if err != nil {
		return nil, err
	}
	scope := &runScope{tool: t.Name, run: newRunID(), client: client}
	dir := workdir("", t)
	if err := d.recordStart(ctx, *scope, t.Argv(), nil, dir); err != nil {
		release()
		return nil, err
	}
	sb, bind, err := d.claimBound(ctx, t, scope, nil)
	if err != nil {
		release()
		d.finishRun(ctx, *scope, &result.Result{Outcome: result.Error, Error: err.Error()})
		return nil, err
	}
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	i := &instance{name: t.Name, sb: sb, bind: bind, stdin: inW, tail: &tailWriter{max: 2048}, done: make(chan struct{})}
	d.instances.add(i)
	dropLive := d.live.add(&liveRun{id: scope.run, kind: "server", tool: t.Name, client: client, owner: c.name, sb: sb, started: time.Now(), kill: func(string) { i.stop() }})
	go func() {
		defer dropLive()
		// The server lives past the request that started it: until its
		// session ends, its ceilings hit, or the daemon stops.
		res := bind.Exec(context.Background(), sandbox.ExecRequest{
			Argv: t.Argv(), Env: t.Env, Dir: dir, Stdin: inR, Stdout: outW, Stderr: i.tail,
		}, nil)
		_ = outW.CloseWithError(io.EOF)
		_ = inR.Close()
		i.mu.Lock()
		i.ended = serverEnd(res, i.tail.String())
		i.mu.Unlock()
		close(i.done)
		d.finishRun(context.Background(), *scope, res)
		d.instances.remove(i)
		release()
	}()
	defer func() {
		if err != nil {
			i.stop()
		}
	}()
	cctx, cancel := context.WithTimeout(ctx, serverStart)
	defer cancel()
	up, err := mcp.NewClient(&mcp.Implementation{Name: "airlock-gateway", Version: d.opts.Version}, nil).
		Connect(cctx, &mcp.IOTransport{Reader: outR, Writer: inW}, nil)
	i.mu.Lock()
	i.up = up
	i.mu.Unlock()
	if err != nil {
		if e := i.endedErr(); e != nil {
			return nil, fmt.Errorf("MCP server %s did not start: %w", t.Name, e)
		}
		return nil, fmt.Errorf("MCP server %s did not complete the MCP handshake within %s", t.Name, serverStart)
	}
	return i, nil
}

// serverEnd describes how a server's process ended, for the errors of
// calls it can no longer answer.
func serverEnd(r *result.Result, stderr string) error {
	var msg string
	switch r.Outcome {
	case result.LimitExceeded:
		msg = "limit exceeded: " + r.Limit.String()
	case result.Signaled:
		msg = fmt.Sprintf("killed by signal %d", r.Signal)
	case result.Exited:
		msg = fmt.Sprintf("exited with code %d", r.ExitCode)
	default:
		msg = "airlock error: " + r.Error
	}
	if s := strings.TrimSpace(stderr); s != "" {
		msg += "; its last output on stderr: " + s
	}
	return errors.New(msg)
}

// addServers starts the MCP servers the caller may use and mirrors their
// tools into s, prefixed with the server's name. It returns the function
// that stops them.
func (d *Daemon) addServers(ctx context.Context, s *mcp.Server, c *caller, client string) (stop func(), err error) {
	var started []*instance
	stop = func() {
		for _, i := range started {
			i.stop()
		}
	}
	relay := mcpserver.NewRelay()
	for _, name := range d.opts.Config.MCPServerOrder {
		if !c.allows(name) {
			continue
		}
		i, err := d.startServer(ctx, d.opts.Config.MCPServers[name], c, client)
		if err != nil {
			stop()
			return nil, err
		}
		started = append(started, i)
		err = relay.Mirror(ctx, s, mcpserver.Upstream{
			Session: i.up,
			Prefix:  name + ".",
			Timeout: serverCall,
			Hung:    i.stop,
			Ended:   i.endedErr,
			OnCall:  d.recordCall(client),
		})
		if err != nil {
			stop()
			return nil, fmt.Errorf("MCP server %s: %w", name, err)
		}
	}
	return stop, nil
}

// instances are the MCP servers running now, destroyed at shutdown.
type instances struct {
	mu  sync.Mutex // guards all
	all map[*instance]struct{}
}

func (s *instances) add(i *instance) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.all == nil {
		s.all = map[*instance]struct{}{}
	}
	s.all[i] = struct{}{}
}

func (s *instances) remove(i *instance) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.all, i)
}

// stopAll stops every server, for shutdown.
func (s *instances) stopAll() {
	s.mu.Lock()
	all := make([]*instance, 0, len(s.all))
	for i := range s.all {
		all = append(all, i)
	}
	s.mu.Unlock()
	var wg sync.WaitGroup
	for _, i := range all {
		wg.Add(1)
		go func() {
			defer wg.Done()
			i.stop()
		}()
	}
	wg.Wait()
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

// count is how many servers run now.
func (s *instances) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.all)
}
