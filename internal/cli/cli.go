// Package cli is airlock's command line: it parses arguments, runs the
// subcommand and turns its outcome into an exit code. cmd/airlock and
// cmd/airlockd are its callers.
//
// The commands are split between two programs so that the common one
// starts fast. airlock links only what a plain run needs (the sandbox
// runtime; no HTTP, DNS, TLS, YAML or image code: see internal/deptest)
// and carries version, help and `run` without a tool, a config file or an
// image; a run's egress gateway, when the sandbox first uses the network,
// is a helper that airlock starts (internal/lazygw). Everything else —
// serve, mcp, session, pool, audit, image, and runs of a tool, a config or
// an image — is airlockd's (package cli/daemoncmd, given to Run as Extra);
// airlock hands those to airlockd by exec, arguments unchanged, so both
// programs take every command.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/airlockhq/airlock/internal/lazygw"
	"github.com/airlockhq/airlock/internal/runner"
	"github.com/airlockhq/airlock/internal/termtext"
	"github.com/airlockhq/airlock/sandbox"
)

// Exit codes of `airlock run` besides the command's own.
const (
	// ExitLimit: a ceiling was breached.
	ExitLimit = 124
	// ExitFailure: airlock itself failed (bad flags included).
	ExitFailure = 125
)

// ExitError carries an exit code chosen by a subcommand. Its message, if
// any, has already been printed.
type ExitError struct{ Code int }

func (e *ExitError) Error() string { return fmt.Sprintf("exit status %d", e.Code) }

// IO is where a subcommand reads and writes.
type IO struct {
	Stdin          io.Reader
	Stdout, Stderr io.Writer
}

// Command is one subcommand: its arguments after the command's name.
type Command func(ctx context.Context, args []string, stdio IO) error

// Extra is what airlockd adds to airlock's commands. A nil Extra
// (airlock) hands those commands to airlockd.
type Extra struct {
	// Commands are airlockd's own commands, by name: serve, mcp,
	// session, pool, audit and image (the names Handed lists), and the
	// gateway helper of airlock run (lazygw.Command).
	Commands map[string]Command
	// Run runs what is not plain of `run` (RunFlags.Plain): a tool, a
	// config file, an image.
	Run func(ctx context.Context, f *RunFlags, argv []string, stdio IO) error
	// Bind binds a plain run's network side (in this process); nil
	// starts the gateway on first use in a helper (lazygw).
	Bind func(f *RunFlags) Bind
}

// Handed are the commands airlock hands to airlockd.
var Handed = []string{"serve", "front", "mcp", "session", "pool", "audit", "policy", "image", "config", "doctor", "ps", "kill", "snapshot", "volume", "reload", "console"}

// Run runs the command line args (args[0] is the program name).
func Run(ctx context.Context, args []string, stdio IO, extra *Extra) error {
	if len(args) < 2 {
		usage(stdio.Stderr)
		return &ExitError{Code: ExitUsage}
	}
	cmd, rest := args[1], args[2:]
	switch cmd {
	case "version", "--version":
		fmt.Fprint(stdio.Stdout, versionText())
		return nil
	case "help", "-h", "--help":
		if cmd == "help" && len(rest) > 0 {
			// A topic: its text is airlockd's (docs/, embedded).
			if c, ok := extra.command("help"); ok {
				return c(ctx, rest, stdio)
			}
			return handOver(args)
		}
		usage(stdio.Stdout)
		return nil
	case "completion":
		return completion(rest, stdio)
	}
	if c, ok := extra.command(cmd); ok {
		ctx, stop := catchSignals(ctx)
		defer stop()
		return c(ctx, rest, stdio)
	}
	switch {
	case cmd == "run":
	case extra == nil && (slices.Contains(Handed, cmd) || cmd == lazygw.Command):
		return handOver(args)
	default:
		return UsageError(stdio.Stderr, "airlock", "unknown command %q", cmd)
	}
	f, argv, err := ParseRun(rest, stdio.Stderr)
	if err != nil {
		return err
	}
	if !f.Plain() {
		if extra == nil {
			return handOver(args)
		}
		ctx, stop := catchSignals(ctx)
		defer stop()
		return extra.Run(ctx, f, argv, stdio)
	}
	if err := f.Check(argv, stdio.Stderr); err != nil {
		return err
	}
	ctx, stop := catchSignals(ctx)
	defer stop()
	bind := lazyBind(f, stdio)
	if extra != nil && extra.Bind != nil {
		bind = extra.Bind(f)
	}
	r := RunOnce(ctx, f, sandbox.Spec{}, argv, stdio, bind)
	return Finish(ctx, r, f, stdio)
}

// command returns airlockd's command name, if e has it.
func (e *Extra) command(name string) (Command, bool) {
	if e == nil {
		return nil, false
	}
	c, ok := e.Commands[name]
	return c, ok
}

// lazyBind binds a plain run's network side in airlock: the gateway's
// listeners at once, the gateway itself in a helper (airlockd) when the
// sandbox first uses them.
func lazyBind(f *RunFlags, stdio IO) Bind {
	return func(ctx context.Context, sb *sandbox.Sandbox) (*runner.Binding, error) {
		b := runner.NewBinding(sb, nil, nil)
		gw, err := lazygw.Start(sb.NetNS(), findDaemonProgram, lazygw.Config{SandboxID: sb.ID(), Allow: f.AllowArgs, AllowPrivate: f.AllowPrivateArgs}, b.Egress, stdio.Stderr)
		if err != nil {
			return nil, err
		}
		b.Attach(gw)
		return b, nil
	}
}

// ExitCode maps Run's error to the process exit code, printing the error
// when it has not been printed yet.
func ExitCode(err error, stderr io.Writer) int {
	if err == nil {
		return 0
	}
	var ee *ExitError
	if errors.As(err, &ee) {
		return ee.Code
	}
	// An error may quote what a caller, a sandbox or a remote daemon
	// chose: escaped for the terminal. Joined errors keep a line each,
	// indented, so that no line of theirs passes for one of airlock's.
	lines := strings.Split(err.Error(), "\n")
	for i, l := range lines {
		lines[i] = termtext.String(l)
	}
	fmt.Fprintf(stderr, "airlock: %s\n", strings.Join(lines, "\n  "))
	return ExitFailure
}

// Version is the module version the binary was built from: the release
// (v1.2.3) when it was installed as a module, else the pseudo-version the
// go command stamps from the checkout's commit ("+dirty" with uncommitted
// changes); "(devel)" only for a build without VCS information.
func Version() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		return bi.Main.Version
	}
	return "(devel)"
}

// versionText is what `airlock version` prints: the version, the commit
// it was built from when known, and the Go toolchain, platform and
// kernel, which a bug report needs.
func versionText() string {
	var b strings.Builder
	fmt.Fprintf(&b, "airlock %s\n", Version())
	if bi, ok := debug.ReadBuildInfo(); ok {
		var rev, at, dirty string
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.time":
				at = s.Value
			case "vcs.modified":
				if s.Value == "true" {
					dirty = ", with uncommitted changes"
				}
			}
		}
		if rev != "" {
			fmt.Fprintf(&b, "commit %s (%s%s)\n", rev, at, dirty)
		}
	}
	fmt.Fprintf(&b, "built with %s for %s/%s\n", runtime.Version(), runtime.GOOS, runtime.GOARCH)
	var u unix.Utsname
	if unix.Uname(&u) == nil {
		fmt.Fprintf(&b, "kernel %s %s\n", unix.ByteSliceToString(u.Sysname[:]), unix.ByteSliceToString(u.Release[:]))
	}
	return b.String()
}

func usage(w io.Writer) {
	fmt.Fprint(w, strings.TrimLeft(`
airlock runs commands in disposable, isolated, bounded Linux sandboxes.

Usage:
  airlock run [flags] -- COMMAND [ARG...]   run one command in a fresh sandbox
  airlock serve [flags]                    serve the API on a unix socket, with warm pools
  airlock front [flags]                    serve a cluster's API: place work on its nodes (docs/cluster.md)
  airlock session create|ls|exec|cp|show|rm  work in a session of the daemon
  airlock session pause|resume|snapshot|fork  pause a session, keep its files as a snapshot, fork it
  airlock snapshot ls|show|rm              list and delete snapshots
  airlock volume create|ls|rm              named volumes that outlive sessions
  airlock pool ls                          show the daemon's pools
  airlock ps                               list the daemon's runs, MCP servers and sessions in flight
  airlock kill ID...                       end a run, MCP server or session; recorded in the audit log
  airlock reload                           have the daemon read its config again (as SIGHUP does)
  airlock console                          a one-time link into the daemon's web console
  airlock audit [--follow] [filters]       read the daemon's audit log
  airlock policy suggest TOOL [--since 7d]  the narrowest egress and broker config its runs needed, from the audit log
  airlock mcp                              serve the configured tools over MCP on stdio
  airlock image import|pull|ls|inspect|rm|gc  manage images: import (OCI, docker save, root file systems), pull from a registry
  airlock config check [--config PATH]     check the config and show what it resolves to
  airlock doctor                           check what airlock needs of this host, then make a sandbox
  airlock version                          print the version, commit, Go and kernel
  airlock help TOPIC                       `+strings.Join(HelpTopics, ", ")+`
  airlock completion bash|zsh|fish         print a shell completion script

Run "airlock COMMAND -h" for a command's flags.
`, "\n"))
}

// catchSignals makes SIGINT, SIGTERM and SIGHUP end ctx rather than the
// process (a second one then ends the process), and a reader that goes
// away (`airlock run -- yes | head -1`) make writes fail with EPIPE rather
// than kill airlock: a command then destroys its sandbox, ends its import
// or shuts its daemon down before it exits (and the command inside gets
// the broken pipe in turn).
//
// Taking over a signal costs a round trip, per signal, with a thread the
// Go runtime starts for the purpose, and the signal loop blocks a thread
// of its own: a quarter of a millisecond here. So it is done on another
// goroutine while the command goes on, and a command waits for it
// (SignalsCaught) only before it makes something that needs cleaning up;
// the commands that only print (version, help) do without.
func catchSignals(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(ctx)
	caught := make(chan struct{})
	ctx = context.WithValue(ctx, signalsKey{}, caught)
	hup := &hangup{}
	ctx = context.WithValue(ctx, hangupKey{}, hup)
	go func() {
		signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)
		c := make(chan os.Signal, 1)
		signal.Notify(c, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
		close(caught)
		defer signal.Stop(c)
		for {
			select {
			case s := <-c:
				if s == syscall.SIGHUP {
					if fn := hup.get(); fn != nil {
						go fn()
						continue
					}
				}
				cancel(&signalError{s.(syscall.Signal)})
				return
			case <-ctx.Done():
				return
			}
		}
	}()
	return ctx, func() { cancel(nil) }
}

type signalsKey struct{}

// hangup holds what a SIGHUP does instead of ending the command.
type hangup struct {
	mu sync.Mutex // guards fn
	fn func()
}

func (h *hangup) get() func() {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.fn
}

type hangupKey struct{}

// OnHangup makes a SIGHUP call fn (on a goroutine of its own) instead of
// ending a context Run made: a daemon's reload. Nothing for any other
// context.
func OnHangup(ctx context.Context, fn func()) {
	if h, ok := ctx.Value(hangupKey{}).(*hangup); ok {
		h.mu.Lock()
		h.fn = fn
		h.mu.Unlock()
	}
}

// signalError is the cause of a context catchSignals ended: the signal.
type signalError struct{ sig syscall.Signal }

func (e *signalError) Error() string { return e.sig.String() }

// SignalsCaught returns once catchSignals has taken over the signals of a
// context Run made (at once for any other context).
func SignalsCaught(ctx context.Context) {
	if c, ok := ctx.Value(signalsKey{}).(chan struct{}); ok {
		<-c
	}
}

// interrupted is the exit status and the message of a command whose
// context ended: 128 plus the signal that ended it, as a shell reports a
// program killed by it (130 for an interrupt, 143 for SIGTERM); 130 when
// it ended some other way.
func interrupted(ctx context.Context) (int, string) {
	var se *signalError
	if errors.As(context.Cause(ctx), &se) && se.sig != syscall.SIGINT {
		return 128 + int(se.sig), "ended by " + unix.SignalName(se.sig) + "; sandbox destroyed"
	}
	return 130, "interrupted; sandbox destroyed"
}
