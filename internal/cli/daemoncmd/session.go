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
)

// daemonFlags parses the flags every daemon-client command shares.
func daemonFlags(name string, stdio cli.IO) (*flag.FlagSet, *string, *bool) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stdio.Stderr)
	sock := fs.String("socket", api.DefaultSocket, "the daemon's socket")
	asJSON := fs.Bool("json", false, "print JSON")
	return fs, sock, asJSON
}

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// sessionCmd is `airlock session create|ls|exec|cp|rm|show`.
func sessionCmd(ctx context.Context, args []string, stdio cli.IO) error {
	usage := "usage: airlock session create --tool NAME | ls | exec ID -- CMD [ARG...] | cp SRC DST | show ID | rm ID"
	if len(args) == 0 {
		fmt.Fprintln(stdio.Stderr, usage)
		return &cli.ExitError{Code: 2}
	}
	sub, rest := args[0], args[1:]
	fs, sock, asJSON := daemonFlags("airlock session "+sub, stdio)
	tool := fs.String("tool", "", "tool of the session (create)")
	idle := fs.String("idle-timeout", "", "end the session after this long unused, e.g. 10m (create)")
	life := fs.String("max-lifetime", "", "end the session this long after it began, e.g. 1h (create)")
	if err := fs.Parse(rest); err != nil {
		return &cli.ExitError{Code: 2}
	}
	c := client.New(*sock)
	pos := fs.Args()
	switch sub {
	case "create":
		if *tool == "" {
			fmt.Fprintln(stdio.Stderr, "airlock session create: --tool is required")
			return &cli.ExitError{Code: 2}
		}
		s, err := c.CreateSession(ctx, api.SessionRequest{Tool: *tool, IdleTimeout: *idle, MaxLifetime: *life})
		if err != nil {
			return err
		}
		if *asJSON {
			return printJSON(stdio.Stdout, s)
		}
		fmt.Fprintln(stdio.Stdout, s.ID)
		return nil
	case "ls":
		if len(pos) != 0 {
			fmt.Fprintln(stdio.Stderr, usage)
			return &cli.ExitError{Code: 2}
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
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\n", s.ID, s.Tool, state, s.Running, s.Created, s.Expires)
		}
		return tw.Flush()
	case "show":
		if len(pos) != 1 {
			fmt.Fprintln(stdio.Stderr, usage)
			return &cli.ExitError{Code: 2}
		}
		s, err := c.Session(ctx, pos[0])
		if err != nil {
			return err
		}
		return printJSON(stdio.Stdout, s)
	case "rm":
		if len(pos) != 1 {
			fmt.Fprintln(stdio.Stderr, usage)
			return &cli.ExitError{Code: 2}
		}
		return c.DeleteSession(ctx, pos[0])
	case "exec":
		if len(pos) > 1 && pos[1] == "--" {
			pos = append(pos[:1], pos[2:]...)
		}
		if len(pos) < 2 {
			fmt.Fprintln(stdio.Stderr, usage)
			return &cli.ExitError{Code: 2}
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
			fmt.Fprintln(stdio.Stderr, "usage: airlock session cp ID:PATH LOCAL | LOCAL ID:PATH  (\"-\" for stdin/stdout)")
			return &cli.ExitError{Code: 2}
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
			fmt.Fprintln(stdio.Stderr, "airlock session cp: one side must be ID:PATH")
			return &cli.ExitError{Code: 2}
		}
		var src io.Reader = stdio.Stdin
		if pos[0] != "-" {
			f, err := os.Open(pos[0])
			if err != nil {
				return err
			}
			defer f.Close()
			src = f
		}
		return c.PutFile(ctx, id, p, src)
	}
	fmt.Fprintln(stdio.Stderr, usage)
	return &cli.ExitError{Code: 2}
}

// poolCmd is `airlock pool ls`.
func poolCmd(ctx context.Context, args []string, stdio cli.IO) error {
	if len(args) == 0 || args[0] != "ls" {
		fmt.Fprintln(stdio.Stderr, "usage: airlock pool ls [--json] [--socket PATH]")
		return &cli.ExitError{Code: 2}
	}
	fs, sock, asJSON := daemonFlags("airlock pool ls", stdio)
	if err := fs.Parse(args[1:]); err != nil {
		return &cli.ExitError{Code: 2}
	}
	ps, err := client.New(*sock).Pools(ctx)
	if err != nil {
		return err
	}
	if *asJSON {
		return printJSON(stdio.Stdout, ps)
	}
	tw := tabwriter.NewWriter(stdio.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TOOL\tWARM\tIDLE\tHITS\tMISSES\tCREATED\tFAILURES")
	for _, p := range ps {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\n", p.Name, p.Warm, p.Idle, p.Hits, p.Misses, p.Created, p.CreateFailures)
	}
	return tw.Flush()
}
