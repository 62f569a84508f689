// Command airlock runs commands in disposable, isolated, bounded Linux
// sandboxes.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/airlockhq/airlock/internal/cli"
	"github.com/airlockhq/airlock/sandbox"
)

func main() {
	// A sandbox's init and the spawner are this binary re-executed; they
	// must take over before anything else runs.
	if code, ok := sandbox.Child(); ok {
		os.Exit(code)
	}
	// A reader that goes away (`airlock run -- yes | head -1`) makes writes
	// fail with EPIPE instead of killing airlock before it has destroyed
	// the sandbox; the command then gets the broken pipe in turn.
	signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	err := cli.Run(ctx, os.Args, cli.IO{Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr})
	stop()
	os.Exit(cli.ExitCode(err, os.Stderr))
}
