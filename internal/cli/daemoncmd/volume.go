package daemoncmd

import (
	"context"
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/internal/cli"
	"github.com/airlockhq/airlock/internal/termtext"
	"github.com/airlockhq/airlock/internal/units"
)

// volumeFlags collects --volume NAME:/PATH.
type volumeFlags []api.VolumeMount

func (v *volumeFlags) String() string { return "" }

func (v *volumeFlags) Set(s string) error {
	name, path, ok := strings.Cut(s, ":")
	if !ok || name == "" || !strings.HasPrefix(path, "/") {
		return fmt.Errorf("%q: want NAME:/PATH", s)
	}
	*v = append(*v, api.VolumeMount{Volume: name, Path: path})
	return nil
}

// volumeCmd is `airlock volume create|ls|rm`.
func volumeCmd(ctx context.Context, args []string, stdio cli.IO) error {
	usage := "airlock volume create NAME [--size SIZE] | ls | rm NAME"
	if len(args) == 0 {
		return cli.UsageError(stdio.Stderr, "airlock volume", "want a subcommand: %s", usage)
	}
	sub, rest := args[0], args[1:]
	name := "airlock volume " + sub
	fs, tgt, asJSON := daemonFlags(name, stdio)
	var size *string
	switch sub {
	case "create":
		size = fs.String("size", "", "its size, e.g. 1GiB (default 1GiB; 16MiB to 1TiB)")
	case "ls", "rm":
	default:
		return cli.UsageError(stdio.Stderr, "airlock volume", "unknown subcommand %q: %s", sub, usage)
	}
	if done, err := cli.ParseFlags(fs, rest, stdio.Stderr); done {
		return err
	}
	c, err := tgt.client(name, stdio.Stderr)
	if err != nil {
		return err
	}
	pos := fs.Args()
	bad := func(format string, a ...any) error { return cli.UsageError(stdio.Stderr, name, format, a...) }
	switch sub {
	case "create":
		if len(pos) != 1 {
			return bad("want a name")
		}
		v, err := c.CreateVolume(ctx, api.VolumeRequest{Name: pos[0], Size: *size})
		if err != nil {
			return err
		}
		if *asJSON {
			return printJSON(stdio.Stdout, v)
		}
		fmt.Fprintln(stdio.Stdout, termtext.String(v.ID))
		return nil
	case "rm":
		if len(pos) != 1 {
			return bad("want a volume's name or id")
		}
		return c.DeleteVolume(ctx, pos[0])
	}
	if len(pos) != 0 {
		return bad("unexpected argument %q", pos[0])
	}
	vs, err := c.Volumes(ctx)
	if err != nil {
		return err
	}
	if *asJSON {
		return printJSON(stdio.Stdout, vs)
	}
	tw := tabwriter.NewWriter(stdio.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tNAME\tSIZE\tCREATED")
	for _, v := range vs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", termtext.String(v.ID), termtext.String(v.Name), units.FormatSize(v.Size), v.Created)
	}
	return tw.Flush()
}

// snapshotCmd is `airlock snapshot ls|show|rm`.
func snapshotCmd(ctx context.Context, args []string, stdio cli.IO) error {
	usage := "airlock snapshot ls | show ID | rm ID (airlock session snapshot ID takes one)"
	if len(args) == 0 {
		return cli.UsageError(stdio.Stderr, "airlock snapshot", "want a subcommand: %s", usage)
	}
	sub, rest := args[0], args[1:]
	switch sub {
	case "ls", "show", "rm":
	default:
		return cli.UsageError(stdio.Stderr, "airlock snapshot", "unknown subcommand %q: %s", sub, usage)
	}
	name := "airlock snapshot " + sub
	fs, tgt, asJSON := daemonFlags(name, stdio)
	if done, err := cli.ParseFlags(fs, rest, stdio.Stderr); done {
		return err
	}
	c, err := tgt.client(name, stdio.Stderr)
	if err != nil {
		return err
	}
	pos := fs.Args()
	bad := func(format string, a ...any) error { return cli.UsageError(stdio.Stderr, name, format, a...) }
	switch sub {
	case "show":
		if len(pos) != 1 {
			return bad("want a snapshot's id or name")
		}
		m, err := c.GetSnapshot(ctx, pos[0])
		if err != nil {
			return err
		}
		return printJSON(stdio.Stdout, m)
	case "rm":
		if len(pos) != 1 {
			return bad("want a snapshot's id or name")
		}
		return c.DeleteSnapshot(ctx, pos[0])
	}
	if len(pos) != 0 {
		return bad("unexpected argument %q", pos[0])
	}
	ms, err := c.Snapshots(ctx)
	if err != nil {
		return err
	}
	if *asJSON {
		return printJSON(stdio.Stdout, ms)
	}
	tw := tabwriter.NewWriter(stdio.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tNAME\tTOOL\tSIZE\tFILES\tSOURCE\tCREATED")
	for _, m := range ms {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\n", termtext.String(m.ID), termtext.String(m.Name), termtext.String(m.Tool), units.FormatSize(m.Size), m.Files, termtext.String(m.Source), m.Created)
	}
	return tw.Flush()
}
