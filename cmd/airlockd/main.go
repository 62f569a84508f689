// Command airlockd carries airlock's commands that link the daemon, SQLite,
// the MCP SDK and the image decoders: `airlock serve`, `airlock mcp` and
// `airlock image import` hand over to it by exec. It takes every airlock
// command, so a service may also start it directly (airlockd serve).
package main

import (
	"context"
	"os"

	"github.com/airlockhq/airlock/internal/cli"
	"github.com/airlockhq/airlock/internal/cli/daemoncmd"
	"github.com/airlockhq/airlock/sandbox"
)

func main() {
	// Without airlock-init installed, sandboxes start from this binary.
	if code, ok := sandbox.Child(); ok {
		os.Exit(code)
	}
	err := cli.Run(context.Background(), os.Args, cli.IO{Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr}, daemoncmd.Extra())
	os.Exit(cli.ExitCode(err, os.Stderr))
}
