// Package cli is airlock's command line: it parses arguments, runs the
// subcommand and turns its outcome into an exit code. cmd/airlock and
// cmd/airlockd are its callers.
//
// The commands are split between two programs so that the common ones
// start fast. airlock carries run, session, pool, audit, image (but
// import), version and help. The commands that need the daemon, SQLite,
// the MCP SDK or the image decoders — serve, mcp and image import — are
// Extra commands that only airlockd links (package cli/daemoncmd);
// airlock hands them to airlockd by exec, arguments unchanged, so both
// programs take every command.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"syscall"
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

// Extra is what airlockd adds to airlock's commands. A nil Extra (airlock)
// hands those commands to airlockd.
type Extra struct {
	Serve, MCP Command
	// ImportsImages: image import runs here (the program has registered
	// the zstd decoder with the image store).
	ImportsImages bool
}

// Run runs the command line args (args[0] is the program name).
func Run(ctx context.Context, args []string, stdio IO, extra *Extra) error {
	if len(args) < 2 {
		usage(stdio.Stderr)
		return &ExitError{Code: 2}
	}
	if extra == nil {
		extra = &Extra{}
	}
	cmd, rest := args[1], args[2:]
	switch {
	case cmd == "serve" && extra.Serve == nil,
		cmd == "mcp" && extra.MCP == nil,
		cmd == "image" && len(rest) > 0 && rest[0] == "import" && !extra.ImportsImages:
		return handOver(args)
	}
	switch cmd {
	case "version", "--version":
		fmt.Fprintln(stdio.Stdout, "airlock", Version())
		return nil
	case "help", "-h", "--help":
		usage(stdio.Stdout)
		return nil
	}
	ctx, stop := catchSignals(ctx)
	defer stop()
	switch cmd {
	case "run":
		return runCmd(ctx, rest, stdio)
	case "serve":
		return extra.Serve(ctx, rest, stdio)
	case "session":
		return sessionCmd(ctx, rest, stdio)
	case "pool":
		return poolCmd(ctx, rest, stdio)
	case "audit":
		return auditCmd(ctx, rest, stdio)
	case "mcp":
		return extra.MCP(ctx, rest, stdio)
	case "image":
		return imageCmd(ctx, rest, stdio)
	default:
		usage(stdio.Stderr)
		return fmt.Errorf("unknown command %q", cmd)
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
	fmt.Fprintf(stderr, "airlock: %v\n", err)
	return ExitFailure
}

// Version is the module version the binary was built from.
func Version() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		return bi.Main.Version
	}
	return "(devel)"
}

func usage(w io.Writer) {
	fmt.Fprint(w, strings.TrimLeft(`
airlock runs commands in disposable, isolated, bounded Linux sandboxes.

Usage:
  airlock run [flags] -- COMMAND [ARG...]   run one command in a fresh sandbox
  airlock serve [flags]                    serve the API on a unix socket, with warm pools
  airlock session create|ls|exec|cp|show|rm  work in a session of the daemon
  airlock pool ls                          show the daemon's pools
  airlock audit [--follow] [filters]       read the daemon's audit log
  airlock mcp                              serve the configured tools over MCP on stdio
  airlock image import|ls|inspect|rm|gc     manage imported images (OCI, docker save, root file systems)
  airlock version                          print the version

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
	ctx, cancel := context.WithCancel(ctx)
	caught := make(chan struct{})
	ctx = context.WithValue(ctx, signalsKey{}, caught)
	go func() {
		signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)
		c := make(chan os.Signal, 1)
		signal.Notify(c, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
		close(caught)
		select {
		case <-c:
			cancel()
		case <-ctx.Done():
		}
		signal.Stop(c)
	}()
	return ctx, cancel
}

type signalsKey struct{}

// SignalsCaught returns once catchSignals has taken over the signals of a
// context Run made (at once for any other context).
func SignalsCaught(ctx context.Context) {
	if c, ok := ctx.Value(signalsKey{}).(chan struct{}); ok {
		<-c
	}
}

// isTerminal is replaced in tests.
var isTerminal = func(f *os.File) bool {
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
