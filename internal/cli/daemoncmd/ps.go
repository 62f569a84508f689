package daemoncmd

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/internal/cli"
	"github.com/airlockhq/airlock/internal/termtext"
	"github.com/airlockhq/airlock/internal/units"
)

// psCmd is `airlock ps`: what the daemon runs now.
func psCmd(ctx context.Context, args []string, stdio cli.IO) error {
	fs, tgt, asJSON := daemonFlags("airlock ps", stdio)
	fs.Usage = func() {
		fmt.Fprintln(stdio.Stderr, "Usage: airlock ps [flags]\n\nLists the daemon's runs and MCP servers in flight and its active sessions:\ntool, caller, age, use so far and ceilings. airlock kill ID ends one.\n\nFlags:")
		fs.PrintDefaults()
	}
	if done, err := cli.ParseNoArgs(fs, args, stdio); done {
		return err
	}
	c, err := tgt.client("airlock ps", stdio.Stderr)
	if err != nil {
		return err
	}
	a, err := c.PS(ctx)
	if err != nil {
		return err
	}
	if len(a.Unreached) > 0 {
		fmt.Fprintf(stdio.Stderr, "airlock ps: nodes not reached, so not listed: %s\n", termtext.String(strings.Join(a.Unreached, ", ")))
	}
	if *asJSON {
		return printJSON(stdio.Stdout, a)
	}
	return printPS(stdio.Stdout, a, time.Now())
}

// printPS prints a as a table. Runs and sessions alike show their age
// (a session's from its creation time, as of now).
func printPS(w io.Writer, a *api.Activity, now time.Time) error {
	// Through a cluster's front each item has its node: a column then.
	var nodes bool
	for _, r := range a.Runs {
		nodes = nodes || r.Node != ""
	}
	for _, s := range a.Sessions {
		nodes = nodes || s.Node != ""
	}
	node := func(n string) string {
		if nodes {
			return "\t" + termtext.String(n)
		}
		return ""
	}
	// What the daemon (or a front) lists was chosen by its callers: each
	// field is escaped for the terminal, a tab in it too (the columns').
	esc := termtext.String
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tKIND\tTOOL\tCLIENT\tAGE\tMEMORY\tPIDS\tCPU\tSANDBOX"+node("NODE"))
	for _, r := range a.Runs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s/%s\t%d/%d\t%s\t%s%s\n", esc(r.ID), esc(r.Kind), esc(r.Tool), esc(r.Client),
			age(r.AgeMillis), units.FormatSize(r.MemoryBytes), units.FormatSize(r.Limits.MemoryBytes), r.Pids, r.Limits.Pids,
			(time.Duration(r.CPUMillis) * time.Millisecond).String(), esc(r.SandboxID), node(r.Node))
	}
	for _, s := range a.Sessions {
		fmt.Fprintf(tw, "%s\tsession\t%s\t\t%s\t\t%d running\t\t%s%s\n", esc(s.ID), esc(s.Tool), sessionAge(s.Created, now), s.Running, esc(s.SandboxID), node(s.Node))
	}
	return tw.Flush()
}

// sessionAge is the age of a session created at created (RFC 3339), to
// the second; "" if created does not parse.
func sessionAge(created string, now time.Time) string {
	t, err := time.Parse(time.RFC3339Nano, created)
	if err != nil {
		return ""
	}
	return max(now.Sub(t), 0).Round(time.Second).String()
}

func age(ms int64) string {
	return (time.Duration(ms) * time.Millisecond).Round(time.Second / 10).String()
}

// killCmd is `airlock kill ID`: it ends a run, an MCP server or a
// session and destroys its sandbox.
func killCmd(ctx context.Context, args []string, stdio cli.IO) error {
	fs, tgt, _ := daemonFlags("airlock kill", stdio)
	fs.Usage = func() {
		fmt.Fprintln(stdio.Stderr, "Usage: airlock kill [flags] ID...\n\nEnds runs, MCP servers (r_...) or sessions (s_...) that airlock ps lists, and\ndestroys their sandboxes. Each kill is in the audit log with who asked.\n\nFlags:")
		fs.PrintDefaults()
	}
	if done, err := cli.ParseFlags(fs, args, stdio.Stderr); done {
		return err
	}
	if fs.NArg() == 0 {
		return cli.UsageError(stdio.Stderr, "airlock kill", "name at least one ID (see airlock ps)")
	}
	c, err := tgt.client("airlock kill", stdio.Stderr)
	if err != nil {
		return err
	}
	var failed bool
	for _, id := range fs.Args() {
		var err error
		if strings.HasPrefix(id, "s_") {
			err = c.DeleteSession(ctx, id)
		} else {
			err = c.KillRun(ctx, id)
		}
		if err != nil {
			fmt.Fprintf(stdio.Stderr, "airlock kill: %s: %s\n", termtext.String(id), termtext.String(err.Error()))
			failed = true
		}
	}
	if failed {
		return &cli.ExitError{Code: cli.ExitFailure}
	}
	return nil
}
