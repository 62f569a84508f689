package mcpedge

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlockhq/airlock/internal/config"
	"github.com/airlockhq/airlock/internal/mcpserver"
	"github.com/airlockhq/airlock/internal/node"
	"github.com/airlockhq/airlock/result"
)

// Gateway bounds.
const (
	// serverStart bounds an MCP server's start: the sandbox, the process
	// and the MCP handshake.
	serverStart = 30 * time.Second
	// serverCallDefault bounds one tools/call relayed to an MCP server.
	serverCallDefault = 2 * time.Minute
)

// ServerCall bounds one tools/call relayed to an MCP server
// (serverCallDefault); a variable for tests.
var ServerCall = serverCallDefault

// instance is one third-party MCP server running in a sandbox of its own
// for one client session; it is destroyed with the session and never
// used by another.
type instance struct {
	name  string
	proc  *node.Process
	close sync.Once // stop runs once

	// mu guards up. The instance is listed for a shutdown's stopAll
	// before its handshake sets up.
	mu sync.Mutex
	up *mcp.ClientSession
}

// endedErr says why the server is gone, or nil while it runs. A call
// can see the server's pipe close before its end is known, so it waits a
// moment for that.
func (i *instance) endedErr() error {
	select {
	case <-i.proc.Done():
	case <-time.After(2 * time.Second):
		return nil
	}
	return serverEnd(i.proc.Result(), i.proc.Stderr())
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
		i.proc.Stop()
	})
}

// startServer starts one MCP server for a client: a sandbox of its
// profile with its policy bound, the command on pipes, the handshake.
// The server is one of the daemon's MaxSessions, and of c's token's
// concurrency, until it ends.
func (d *Server) startServer(ctx context.Context, t *config.Tool, c *node.Caller, client string) (_ *instance, err error) {
	p, err := d.StartProcess(ctx, t, c, client)
	if err != nil {
		return nil, err
	}
	i := &instance{name: t.Name, proc: p}
	d.instances.add(i)
	go func() {
		<-p.Done()
		d.instances.remove(i)
	}()
	defer func() {
		if err != nil {
			i.stop()
		}
	}()
	cctx, cancel := context.WithTimeout(ctx, serverStart)
	defer cancel()
	up, err := mcp.NewClient(&mcp.Implementation{Name: "airlock-gateway", Version: d.opts.Version}, nil).
		Connect(cctx, &mcp.IOTransport{Reader: p.Stdout, Writer: p.Stdin}, nil)
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
func (d *Server) addServers(ctx context.Context, s *mcp.Server, c *node.Caller, client string) (stop func(), err error) {
	var started []*instance
	stop = func() {
		for _, i := range started {
			i.stop()
		}
	}
	relay := mcpserver.NewRelay()
	for _, name := range d.tools().MCPServerOrder {
		if !c.Allows(name) {
			continue
		}
		i, err := d.startServer(ctx, d.tools().MCPServers[name], c, client)
		if err != nil {
			stop()
			return nil, err
		}
		started = append(started, i)
		err = relay.Mirror(ctx, s, mcpserver.Upstream{
			Session: i.up,
			Prefix:  name + ".",
			Timeout: ServerCall,
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

// count is how many servers run now.
func (s *instances) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.all)
}
