package daemoncmd

import (
	"context"
	"fmt"

	"github.com/airlockhq/airlock/internal/cli"
	"github.com/airlockhq/airlock/internal/termtext"
)

// consoleCmd is `airlock console`: a one-time link that logs a browser on
// this host into the daemon's web console with the local socket's
// rights, as Jupyter's.
func consoleCmd(ctx context.Context, args []string, stdio cli.IO) error {
	fs, tgt, _ := daemonFlags("airlock console", stdio)
	fs.Usage = func() {
		fmt.Fprintln(stdio.Stderr, "Usage: airlock console [flags]\n\nPrints a one-time link into the daemon's web console (served on\nserver.tcp), good for two minutes: opened in a browser on this host, it\nlogs in with the local socket's rights (everything, read-only but for\nkilling a run). A token's holder logs in on the console's page with the\ntoken instead, and sees what the token may.\n\nFlags:")
		fs.PrintDefaults()
	}
	if done, err := cli.ParseNoArgs(fs, args, stdio); done {
		return err
	}
	if tgt.remote() {
		return cli.UsageError(stdio.Stderr, "airlock console", "a login link is the local socket's; with --host, log in on the console's page with your token")
	}
	c, err := tgt.client("airlock console", stdio.Stderr)
	if err != nil {
		return err
	}
	u, err := c.ConsoleLogin(ctx)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdio.Stdout, "%s\n", termtext.String(u))
	fmt.Fprintln(stdio.Stderr, "open it in a browser on this host within two minutes; it works once")
	return nil
}
