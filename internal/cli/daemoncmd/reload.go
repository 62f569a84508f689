package daemoncmd

import (
	"context"
	"fmt"
	"strings"

	"github.com/airlockhq/airlock/internal/cli"
	"github.com/airlockhq/airlock/internal/termtext"
)

// reloadCmd is `airlock reload`: the daemon reads its config file again
// and applies it (as SIGHUP does), and says what changed.
func reloadCmd(ctx context.Context, args []string, stdio cli.IO) error {
	fs, tgt, asJSON := daemonFlags("airlock reload", stdio)
	fs.Usage = func() {
		fmt.Fprintln(stdio.Stderr, "Usage: airlock reload [flags]\n\nHas the daemon read its config file again and apply it: tokens, and\ntools (each image name resolved again). A new or changed tool gets a fresh\npool, a removed or changed one's pool drains, an unchanged one keeps its\nready sandboxes; runs and sessions in flight keep what they started with.\nA config that does not load changes nothing and says why. The same as\nSIGHUP to the daemon (systemctl reload airlock). On the unix socket only.\n\nFlags:")
		fs.PrintDefaults()
	}
	if done, err := cli.ParseNoArgs(fs, args, stdio); done {
		return err
	}
	c, err := tgt.client("airlock reload", stdio.Stderr)
	if err != nil {
		return err
	}
	rep, err := c.Reload(ctx)
	if err != nil {
		return err
	}
	if *asJSON {
		return printJSON(stdio.Stdout, rep)
	}
	from := rep.Config
	if from == "" {
		from = "the embedded defaults"
	}
	fmt.Fprintf(stdio.Stdout, "reloaded %s\n", termtext.String(from))
	for _, l := range []struct {
		what  string
		names []string
	}{{"added", rep.Added}, {"changed", rep.Changed}, {"removed", rep.Removed}, {"kept", rep.Kept}} {
		if len(l.names) > 0 {
			fmt.Fprintf(stdio.Stdout, "  %-8s %s\n", l.what, termtext.String(strings.Join(l.names, ", ")))
		}
	}
	if len(rep.Restart) > 0 {
		fmt.Fprintf(stdio.Stdout, "  changed, but only a restart applies: %s\n", termtext.String(strings.Join(rep.Restart, ", ")))
	}
	return nil
}
