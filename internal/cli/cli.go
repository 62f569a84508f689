// Package cli is airlock's command line: it parses arguments, runs the
// subcommand and turns its outcome into an exit code. cmd/airlock/main is
// the only caller.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"strings"
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

// Run runs the command line args (args[0] is the program name).
func Run(ctx context.Context, args []string, stdio IO) error {
	if len(args) < 2 {
		usage(stdio.Stderr)
		return &ExitError{Code: 2}
	}
	switch cmd, rest := args[1], args[2:]; cmd {
	case "run":
		return runCmd(ctx, rest, stdio)
	case "serve":
		return serveCmd(ctx, rest, stdio)
	case "session":
		return sessionCmd(ctx, rest, stdio)
	case "pool":
		return poolCmd(ctx, rest, stdio)
	case "audit":
		return auditCmd(ctx, rest, stdio)
	case "mcp":
		return mcpCmd(ctx, rest, stdio)
	case "image":
		return imageCmd(ctx, rest, stdio)
	case "version", "--version":
		fmt.Fprintln(stdio.Stdout, "airlock", Version())
		return nil
	case "help", "-h", "--help":
		usage(stdio.Stdout)
		return nil
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

// isTerminal is replaced in tests.
var isTerminal = func(f *os.File) bool {
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
