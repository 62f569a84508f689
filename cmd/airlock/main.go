// Command airlock is the command line's fast path: it runs commands in
// disposable, isolated, bounded Linux sandboxes. It carries version,
// help, completion and a plain run (no tool, config file or image) itself,
// and links only what those need (no HTTP, TLS, DNS, YAML, SQLite, MCP
// SDK or image code; see internal/deptest), so that it starts fast. Every
// other command (serve, front, mcp, session, pool, audit, image, config,
// doctor, ps, kill, help topics, and runs of a tool, a config or an image)
// it hands to airlockd by exec, arguments unchanged; airlockd is found
// beside it, then in /usr/local/libexec/airlock and /usr/libexec/airlock.
// A plain run's egress gateway is started in airlockd on the sandbox's
// first use of the network (internal/lazygw). See package internal/cli.
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
