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
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	err := cli.Run(ctx, os.Args, cli.IO{Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr})
	stop()
	os.Exit(cli.ExitCode(err, os.Stderr))
}
