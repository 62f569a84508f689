// Command airlock runs commands in disposable, isolated, bounded Linux
// sandboxes. It hands serve, mcp and image import to airlockd, found
// beside it (see package internal/cli).
package main

import (
	"context"
	"os"
	"runtime"

	"github.com/airlockhq/airlock/internal/cli"
	"github.com/airlockhq/airlock/sandbox"
)

func main() {
	// Without airlock-init installed, sandboxes start from this binary:
	// as their init or the spawner, it takes over before anything else.
	if code, ok := sandbox.Child(); ok {
		os.Exit(code)
	}
	// A one-shot run is one sandbox and one command, and this process
	// mostly waits on them: with one processor the Go scheduler stops
	// handing its goroutines between threads, and the other core is the
	// sandbox's (0.15-0.25 ms of a 7 ms run on two cores, measured
	// against the default). GOMAXPROCS in the environment still wins.
	if len(os.Args) > 1 && os.Args[1] == "run" && os.Getenv("GOMAXPROCS") == "" {
		runtime.GOMAXPROCS(1)
	}
	err := cli.Run(context.Background(), os.Args, cli.IO{Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr}, nil)
	os.Exit(cli.ExitCode(err, os.Stderr))
}
