package daemoncmd

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/client"
	"github.com/airlockhq/airlock/internal/cli"
	"github.com/airlockhq/airlock/internal/termtext"
	"github.com/airlockhq/airlock/result"
)

// daemonFlags parses the flags every daemon-client command shares: where
// the daemon is (see target) and --json.
func daemonFlags(name string, stdio cli.IO) (*flag.FlagSet, *target, *bool) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stdio.Stderr)
	t := targetFlags(fs)
	asJSON := fs.Bool("json", false, "print JSON")
	return fs, t, asJSON
}

// printJSON prints v indented, escaped for the terminal (termtext): what
// the daemon lists was chosen by its callers.
func printJSON(w io.Writer, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	_, err = w.Write(append(termtext.JSON(b), '\n'))
	return err
}

// sessionUsage is each session subcommand's synopsis.
var sessionUsage = map[string]string{
	"create":   "create (--tool NAME | --snapshot ID) [--volume NAME:/PATH]... [--idle-timeout D] [--max-lifetime D]",
	"ls":       "ls",
	"show":     "show ID",
	"rm":       "rm ID",
	"pause":    "pause ID",
	"resume":   "resume [--max-lifetime D] [--files] ID",
	"snapshot": "snapshot [--name NAME] ID",
	"fork":     "fork [-n COUNT] [--max-lifetime D] ID",
	"exec":     "exec [-t] ID -- CMD [ARG...]",
	"cp":       "cp ID:PATH LOCAL | LOCAL ID:PATH   (\"-\" for stdin or stdout)",
}

// sessionCmd is `airlock session create|ls|exec|cp|rm|show|pause|resume|snapshot|fork`.
func sessionCmd(ctx context.Context, args []string, stdio cli.IO) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" {
		fmt.Fprintln(stdio.Stderr, "Usage: airlock session create|ls|exec|cp|show|rm|pause|resume|snapshot|fork ...; airlock session SUBCOMMAND -h for each")
		if len(args) == 0 {
			return &cli.ExitError{Code: cli.ExitUsage}
		}
		return nil
	}
	sub, rest := args[0], args[1:]
	synopsis, ok := sessionUsage[sub]
	if !ok {
		return cli.UsageError(stdio.Stderr, "airlock session", "unknown subcommand %q (create, ls, exec, cp, show, rm, pause, resume, snapshot, fork)", sub)
	}
	name := "airlock session " + sub
	fs, tgt, asJSON := daemonFlags(name, stdio)
	var tool, idle, life, snap, snapName *string
	var tty, files *bool
	var count *int
	var vols volumeFlags
	if sub == "exec" {
		tty = fs.Bool("t", false, "give the command a terminal of its own in the sandbox, for an interactive shell (needs a terminal on stdin)")
		fs.BoolVar(tty, "tty", false, "same as -t")
	}
	if sub == "create" {
		tool = fs.String("tool", "", "tool of the session (required)")
		idle = fs.String("idle-timeout", "", "end the session after this long unused, e.g. 10m")
		life = fs.String("max-lifetime", "", "end the session this long after it began, e.g. 1h")
		snap = fs.String("snapshot", "", "start from a snapshot's files (its id or name); its tool is the session's")
		fs.Var(&vols, "volume", "attach a volume of yours, NAME:/PATH (repeatable)")
	}
	if sub == "resume" {
		life = fs.String("max-lifetime", "", "the least lifetime the session has from now, e.g. 30m (default: what it had left when paused)")
		files = fs.Bool("files", false, "resume a session whose processes did not survive a restart of the daemon from its files, in a fresh sandbox")
	}
	if sub == "snapshot" {
		snapName = fs.String("name", "", "name the snapshot (letters, digits, - _ .)")
	}
	if sub == "fork" {
		count = fs.Int("n", 1, "how many sessions to make (1 to 100)")
		life = fs.String("max-lifetime", "", "each new session's lifetime, e.g. 1h")
	}
	fs.Usage = func() {
		fmt.Fprintf(stdio.Stderr, "Usage: %s [flags] %s\n\nFlags:\n", "airlock session", synopsis)
		fs.PrintDefaults()
	}
	if done, err := cli.ParseFlags(fs, rest, stdio.Stderr); done {
		return err
	}
	bad := func(format string, a ...any) error { return cli.UsageError(stdio.Stderr, name, format, a...) }
	c, err := tgt.client(name, stdio.Stderr)
	if err != nil {
		return err
	}
	pos := fs.Args()
	switch sub {
	case "create":
		if *tool == "" && *snap == "" {
			return bad("--tool or --snapshot is required")
		}
		if len(pos) != 0 {
			return bad("unexpected argument %q", pos[0])
		}
		s, err := c.CreateSession(ctx, api.SessionRequest{Tool: *tool, Snapshot: *snap, Volumes: vols, IdleTimeout: *idle, MaxLifetime: *life})
		if err != nil {
			return err
		}
		if *asJSON {
			return printJSON(stdio.Stdout, s)
		}
		fmt.Fprintln(stdio.Stdout, termtext.String(s.ID))
		return nil
	case "ls":
		if len(pos) != 0 {
			return bad("unexpected argument %q", pos[0])
		}
		ss, err := c.Sessions(ctx)
		if err != nil {
			return err
		}
		if *asJSON {
			return printJSON(stdio.Stdout, ss)
		}
		tw := tabwriter.NewWriter(stdio.Stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tTOOL\tSTATE\tRUNNING\tCREATED\tEXPIRES")
		for _, s := range ss {
			state := s.State
			if s.EndReason != "" {
				state += " (" + s.EndReason + ")"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\n", termtext.String(s.ID), termtext.String(s.Tool), termtext.String(state), s.Running, s.Created, s.Expires)
		}
		return tw.Flush()
	case "show":
		if len(pos) != 1 {
			return bad("want one session ID, got %d arguments", len(pos))
		}
		s, err := c.Session(ctx, pos[0])
		if err != nil {
			return err
		}
		return printJSON(stdio.Stdout, s)
	case "rm":
		if len(pos) != 1 {
			return bad("want one session ID, got %d arguments", len(pos))
		}
		return c.DeleteSession(ctx, pos[0])
	case "pause", "resume":
		if len(pos) != 1 {
			return bad("want one session ID, got %d arguments", len(pos))
		}
		var s *api.Session
		if sub == "pause" {
			s, err = c.PauseSession(ctx, pos[0])
		} else {
			s, err = c.ResumeSession(ctx, pos[0], &api.ResumeRequest{MaxLifetime: *life, Files: *files})
		}
		if err != nil {
			return err
		}
		if *asJSON {
			return printJSON(stdio.Stdout, s)
		}
		fmt.Fprintf(stdio.Stdout, "%s %s, expires %s\n", termtext.String(s.ID), termtext.String(s.State), termtext.String(s.Expires))
		return nil
	case "snapshot":
		if len(pos) != 1 {
			return bad("want one session ID, got %d arguments", len(pos))
		}
		m, err := c.Snapshot(ctx, pos[0], *snapName)
		if err != nil {
			return err
		}
		if *asJSON {
			return printJSON(stdio.Stdout, m)
		}
		fmt.Fprintln(stdio.Stdout, termtext.String(m.ID))
		return nil
	case "fork":
		if len(pos) != 1 {
			return bad("want one session ID, got %d arguments", len(pos))
		}
		fs, err := c.Fork(ctx, pos[0], api.ForkRequest{Count: *count, MaxLifetime: *life})
		if err != nil {
			return err
		}
		if *asJSON {
			return printJSON(stdio.Stdout, fs)
		}
		failed := 0
		for _, f := range fs {
			if f.Session != nil {
				fmt.Fprintln(stdio.Stdout, termtext.String(f.Session.ID))
			} else if f.Error != nil {
				failed++
				fmt.Fprintf(stdio.Stderr, "airlock session fork: one fork failed: %s\n", termtext.String(f.Error.Message))
			}
		}
		if failed > 0 {
			return &cli.ExitError{Code: 1}
		}
		return nil
	case "exec":
		if len(pos) > 1 && pos[1] == "--" {
			pos = append(pos[:1], pos[2:]...)
		}
		if len(pos) < 2 {
			return bad("want a session ID and a command")
		}
		if *tty {
			if *asJSON {
				return bad("--tty shows the command's terminal; it cannot go with --json")
			}
			cli.SignalsCaught(ctx)
			r := onTerminal(stdio, func(t client.TTY) (*result.Result, error) {
				return c.ExecTTY(ctx, pos[0], api.ExecRequest{Argv: pos[1:]}, t)
			})
			return cli.Finish(ctx, r, &cli.RunFlags{}, stdio)
		}
		r, err := c.Exec(ctx, pos[0], api.ExecRequest{Argv: pos[1:]})
		if err != nil {
			return err
		}
		if *asJSON {
			if err := printJSON(stdio.Stdout, r); err != nil {
				return err
			}
		} else {
			stdio.Stdout.Write(r.Stdout)
			stdio.Stderr.Write(r.Stderr)
		}
		return cli.Finish(ctx, r, &cli.RunFlags{JSON: true}, cli.IO{Stdout: io.Discard, Stderr: stdio.Stderr})
	case "cp":
		// cp ID:PATH LOCAL or LOCAL ID:PATH ("-" is stdin/stdout).
		if len(pos) != 2 {
			return bad("want a source and a destination, one of them ID:PATH")
		}
		if id, p, ok := strings.Cut(pos[0], ":"); ok && !strings.Contains(id, "/") {
			b, err := c.GetFile(ctx, id, p)
			if err != nil {
				return err
			}
			if pos[1] == "-" {
				_, err = stdio.Stdout.Write(b)
				return err
			}
			return os.WriteFile(pos[1], b, 0o644)
		}
		id, p, ok := strings.Cut(pos[1], ":")
		if !ok {
			return bad("one side must be ID:PATH")
		}
		var src io.Reader = stdio.Stdin
		if pos[0] != "-" {
			f, err := os.Open(pos[0])
			if err != nil {
				return err
			}
			defer f.Close()
			if fi, err := f.Stat(); err == nil && !fi.Mode().IsRegular() {
				what := "not a regular file"
				if fi.IsDir() {
					what = "a directory"
				}
				return fmt.Errorf("%s is %s: session cp copies one file (for a tree: tar -C %s -c . | airlock session cp - %s:tree.tar, then tar -xf tree.tar in the session)", pos[0], what, pos[0], id)
			}
			src = f
		}
		return c.PutFile(ctx, id, p, src)
	}
	return bad("unknown subcommand")
}

// poolCmd is `airlock pool ls`.
func poolCmd(ctx context.Context, args []string, stdio cli.IO) error {
	if len(args) == 0 || args[0] != "ls" {
		return cli.UsageError(stdio.Stderr, "airlock pool", "the one subcommand is ls: airlock pool ls [--json] [--socket PATH]")
	}
	fs, tgt, asJSON := daemonFlags("airlock pool ls", stdio)
	if done, err := cli.ParseNoArgs(fs, args[1:], stdio); done {
		return err
	}
	c, err := tgt.client("airlock pool ls", stdio.Stderr)
	if err != nil {
		return err
	}
	ps, err := c.Pools(ctx)
	if err != nil {
		return err
	}
	if *asJSON {
		return printJSON(stdio.Stdout, ps)
	}
	tw := tabwriter.NewWriter(stdio.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TOOL\tWARM\tIDLE\tHITS\tMISSES\tCREATED\tFAILURES\tWHY")
	for _, p := range ps {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%s\n", termtext.String(p.Name), p.Warm, p.Idle, p.Hits, p.Misses, p.Created, p.CreateFailures, termtext.String(p.Reason))
	}
	return tw.Flush()
}
