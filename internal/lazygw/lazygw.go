// Package lazygw gives a sandbox its egress gateway on first use: it opens
// the gateway's listeners in the sandbox's network namespace at once (so
// the sandbox finds them there, and nothing of its can take their
// addresses first), and starts the gateway itself, in a helper process,
// only when something arrives on them.
//
// It serves airlock run, whose program is kept small so that it starts
// fast: it links no HTTP, DNS or TLS code. Most commands never use the
// network at all; one that does waits, once, for the helper to start
// (airlockd, the program beside airlock that carries the gateway; see
// internal/cli/daemoncmd) and is then served by the same gateway as any
// other sandbox, its decisions reaching the run's result as they are made.
//
// The helper is handed, as descriptors, the listeners, the namespace, a
// control pipe whose first line is its Config (JSON) and whose end tells it
// to close the gateway and exit, and a pipe for its decisions (one JSON
// result.EgressEvent per line). It dies with the thread that started it,
// and ends when the control pipe does.
package lazygw

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"

	"github.com/airlockhq/airlock/internal/egress/sockets"
	"github.com/airlockhq/airlock/result"
	"golang.org/x/sys/unix"
)

// Command is the helper's command line after its program: a command its
// program takes but does not list.
const Command = "__gateway"

// Config is what the helper needs besides its descriptors.
type Config struct {
	// Tool and SandboxID label the events.
	Tool      string `json:"tool,omitempty"`
	SandboxID string `json:"sandbox_id"`
	// Allow are the destinations the sandbox may reach, as airlock run's
	// --allow takes them.
	Allow []string `json:"allow,omitempty"`
	// AllowPrivate are those of --allow-private: they may be in private
	// ranges.
	AllowPrivate []string `json:"allow_private,omitempty"`
	// Connections, Bytes and DNSRate bound the sandbox's network; zero
	// takes the gateway's default.
	Connections int   `json:"connections,omitempty"`
	Bytes       int64 `json:"bytes,omitempty"`
	DNSRate     int   `json:"dns_rate,omitempty"`
}

// The helper's descriptors, as it finds them.
const (
	CtrlFD = 3 + iota
	EventsFD
	NetNSFD
	ProxyFD
	DNSUDPFD
	DNSTCPFD
)

// Gateway is a sandbox's gateway, started on first use. It is a
// runner.Net.
type Gateway struct {
	program func() (string, error)
	cfg     Config
	ns      *os.File
	set     *sockets.Set
	onEvent func(result.EgressEvent)
	warn    io.Writer

	// wake ends the watcher's wait; watched is closed when it returns.
	wakeR, wakeW *os.File
	watched      chan struct{}

	// mu guards started and closed. The watcher sets cmd, ctrl and
	// relayed under it too; Close reads them without it, once the
	// watcher has returned (watched).
	mu sync.Mutex
	// started says the helper was started (or tried); cmd and ctrl are
	// it and the write end of its control pipe, relayed closed once its
	// decisions have all arrived.
	started bool
	cmd     *exec.Cmd
	ctrl    *os.File
	relayed chan struct{}
	closed  bool
	// unset closes the listeners, once.
	unset sync.Once
}

// Start opens the gateway's listeners in ns and watches them; the first
// thing to arrive starts the helper, with cfg: the program that program
// names then (airlockd; an error says why there is none). Decisions go to
// onEvent (from one goroutine at a time); the helper's own diagnostics,
// and why it could not start, to warn. The caller keeps ns open until
// Close returns.
func Start(ns *os.File, program func() (string, error), cfg Config, onEvent func(result.EgressEvent), warn io.Writer) (*Gateway, error) {
	set, err := sockets.Open(ns)
	if err != nil {
		return nil, err
	}
	g := &Gateway{program: program, cfg: cfg, ns: ns, set: set, onEvent: onEvent, warn: warn, watched: make(chan struct{})}
	if g.wakeR, g.wakeW, err = os.Pipe(); err != nil {
		set.Close()
		return nil, err
	}
	go g.watch()
	return g, nil
}

// Env is what the gateway adds to a command's environment.
func (g *Gateway) Env() []string { return sockets.Env() }

// Quiet reports that nothing has arrived: the helper never started.
func (g *Gateway) Quiet() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return !g.started
}

// watch waits, on a thread of its own, until one of the listeners has
// something (a connection, a query) or Close wakes it, and starts the
// helper in the first case.
func (g *Gateway) watch() {
	defer close(g.watched)
	fds := []unix.PollFd{
		{Fd: int32(g.set.Proxy.Fd()), Events: unix.POLLIN},
		{Fd: int32(g.set.DNSUDP.Fd()), Events: unix.POLLIN},
		{Fd: int32(g.set.DNSTCP.Fd()), Events: unix.POLLIN},
		{Fd: int32(g.wakeR.Fd()), Events: unix.POLLIN},
	}
	for {
		_, err := unix.Poll(fds, -1)
		if err == unix.EINTR {
			continue
		}
		if err != nil || fds[3].Revents != 0 {
			return
		}
		break
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return
	}
	g.started = true
	if err := g.startHelper(); err != nil {
		fmt.Fprintf(g.warn, "airlock: the sandbox's egress gateway could not start: %v\n", err)
		// Nothing will serve the listeners: closed, they refuse at
		// once rather than leave the sandbox waiting.
		g.closeSet()
	}
}

// startHelper starts the helper; g.mu is held.
func (g *Gateway) startHelper() error {
	cfg, err := json.Marshal(g.cfg)
	if err != nil {
		return err
	}
	ctrlR, ctrlW, err := os.Pipe()
	if err != nil {
		return err
	}
	defer ctrlR.Close()
	evR, evW, err := os.Pipe()
	if err != nil {
		ctrlW.Close()
		return err
	}
	defer evW.Close()
	prog, err := g.program()
	if err != nil {
		ctrlW.Close()
		evR.Close()
		return err
	}
	cmd := exec.Command(prog, Command)
	cmd.ExtraFiles = []*os.File{ctrlR, evW, g.ns, g.set.Proxy, g.set.DNSUDP, g.set.DNSTCP}
	cmd.Stderr = g.warn
	// Its own process group, so that a terminal's ^C reaches airlock,
	// which closes the gateway in order; and it dies with airlock.
	cmd.SysProcAttr = &unix.SysProcAttr{Setpgid: true, Pdeathsig: unix.SIGKILL}
	if err := cmd.Start(); err != nil {
		ctrlW.Close()
		evR.Close()
		return err
	}
	// The config, then the pipe stays open until Close.
	if _, err := ctrlW.Write(append(cfg, '\n')); err != nil {
		ctrlW.Close()
		evR.Close()
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return fmt.Errorf("configure it: %w", err)
	}
	g.cmd, g.ctrl, g.relayed = cmd, ctrlW, make(chan struct{})
	go g.relay(evR)
	return nil
}

// relay passes the helper's decisions on until it closes its end (at its
// exit).
func (g *Gateway) relay(r *os.File) {
	defer close(g.relayed)
	defer r.Close()
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var ev result.EgressEvent
		if json.Unmarshal(sc.Bytes(), &ev) == nil && g.onEvent != nil {
			g.onEvent(ev)
		}
	}
}

// Close stops the watcher and, when the helper runs, has it close the
// gateway (its last decisions still arrive) and waits for it, bounded by
// ctx: past that it is killed. The listeners close last.
func (g *Gateway) Close(ctx context.Context) error {
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return nil
	}
	g.closed = true
	g.mu.Unlock()
	_, _ = g.wakeW.Write([]byte{0})
	<-g.watched
	g.wakeW.Close()
	g.wakeR.Close()
	var err error
	if g.cmd != nil {
		g.ctrl.Close()
		select {
		case <-g.relayed:
		case <-ctx.Done():
			_ = g.cmd.Process.Kill()
			<-g.relayed
			err = fmt.Errorf("egress gateway did not close in time: %w", ctx.Err())
		}
		if werr := g.cmd.Wait(); werr != nil && err == nil {
			var ee *exec.ExitError
			if !errors.As(werr, &ee) || !ee.Exited() || ee.ExitCode() != 0 {
				err = fmt.Errorf("egress gateway: %w", werr)
			}
		}
	}
	g.closeSet()
	return err
}

func (g *Gateway) closeSet() { g.unset.Do(func() { g.set.Close() }) }
