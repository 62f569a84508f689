// Command airlockd carries every airlock command, and is the one that
// links the heavy parts: the daemon (internal/daemon: warm pools,
// sessions, the HTTP API on a unix socket and TCP, MCP, the E2B API, a
// node's cluster lease), a cluster's front (internal/front), SQLite, the
// MCP SDK, YAML, the HTTP client, the image store and decoders, the egress
// gateway and the broker. airlock hands it every command but version,
// help, completion and a plain run, by exec with the same arguments, and
// starts it as the helper that serves a plain run's egress gateway. A
// service may start it directly (airlockd serve, airlockd front).
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
