// Command airlock runs commands in disposable, isolated, bounded Linux
// sandboxes. It hands serve, mcp and image import to airlockd, found
// beside it (see package internal/cli).
package main

import (
	"context"
	"os"

	"github.com/airlockhq/airlock/internal/cli"
	"github.com/airlockhq/airlock/sandbox"
)

func main() {
	// Without airlock-init installed, sandboxes start from this binary:
	// as their init or the spawner, it takes over before anything else.
	if code, ok := sandbox.Child(); ok {
		os.Exit(code)
	}
	err := cli.Run(context.Background(), os.Args, cli.IO{Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr}, nil)
	os.Exit(cli.ExitCode(err, os.Stderr))
}
