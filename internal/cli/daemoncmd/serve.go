// Package daemoncmd holds the commands that only airlockd carries: serve,
// mcp, session, pool, audit, image, runs of a tool, a config file or an
// image, and the egress gateway helper of airlock run. They link the
// daemon, SQLite, the MCP SDK, the HTTP client, YAML, the image store and
// decoders, the egress gateway and the broker, whose start-up cost
// airlock's plain runs do not pay (see package cli).
package daemoncmd

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/airlockhq/airlock/internal/cli"
	"github.com/airlockhq/airlock/internal/config"
	"github.com/airlockhq/airlock/internal/daemon"
	"github.com/airlockhq/airlock/internal/gvisor"
	"github.com/airlockhq/airlock/internal/image"
	"github.com/airlockhq/airlock/internal/image/zstd"
	"github.com/airlockhq/airlock/internal/lazygw"
)

// Extra returns airlockd's commands for cli.Run, and gives the image store
// its zstd decoder.
func Extra() *cli.Extra {
	image.RegisterZstd(zstd.Open)
	return &cli.Extra{
		Commands: map[string]cli.Command{
			"serve": serveCmd, "front": frontCmd, "mcp": mcpCmd, "session": sessionCmd, "pool": poolCmd,
			"audit": auditCmd, "policy": policyCmd, "image": imageCmd, "config": configCmd, "doctor": doctorCmd, "ps": psCmd, "kill": killCmd, "snapshot": snapshotCmd, "volume": volumeCmd, "reload": reloadCmd, "console": consoleCmd, "help": helpCmd, lazygw.Command: gatewayCmd,
		},
		Run:  runFull,
		Bind: bindHere,
	}
}

// serveCmd is `airlock serve`: the daemon, until interrupted.
func serveCmd(ctx context.Context, args []string, stdio cli.IO) error {
	fs := flag.NewFlagSet("airlock serve", flag.ContinueOnError)
	fs.SetOutput(stdio.Stderr)
	var opts daemon.Options
	cfgPath := embedFlags(fs, &opts, "")
	fs.StringVar(&opts.Socket, "socket", "", "unix socket to serve the API on, mode 0660 (default: the config's server.socket, else "+daemon.DefaultSocket+")")
	fs.DurationVar(&opts.Grace, "grace", 30*time.Second, "how long running calls may finish on shutdown")
	fs.IntVar(&opts.MaxSessions, "max-sessions", 256, "sessions open at once, at most (each holds a sandbox)")
	fs.Usage = func() {
		fmt.Fprintln(stdio.Stderr, "Usage: airlock serve [flags]\n\nServes the HTTP API on a unix socket, keeping each tool's pool of sandboxes\nwarm, until SIGTERM or SIGINT; then lets running calls finish and destroys\nevery sandbox.\n\nFlags:")
		fs.PrintDefaults()
	}
	if done, err := cli.ParseNoArgs(fs, args, stdio); done {
		return err
	}
	var err error
	if opts.Config, err = config.Discover(*cfgPath); err != nil {
		return err
	}
	opts.Logger = slog.New(slog.NewTextHandler(stdio.Stderr, nil))
	opts.Version = cli.Version()
	cli.SignalsCaught(ctx) // before the pools make sandboxes
	d, err := daemon.New(ctx, opts)
	if err != nil {
		return err
	}
	// SIGHUP reloads the config (the systemd unit's ExecReload); how it
	// went is in the log and the audit log.
	cli.OnHangup(ctx, func() {
		if _, err := d.Reload(context.WithoutCancel(ctx), "signal:SIGHUP"); err != nil {
			opts.Logger.Error("reload on SIGHUP failed; the daemon goes on as it was", "err", err)
		}
	})
	return d.Serve(ctx)
}

// embedFlags adds the flags of the daemon's parts (config, audit log,
// state) to fs; when ends each help text (", when no daemon runs").
func embedFlags(fs *flag.FlagSet, opts *daemon.Options, when string) *string {
	cfgPath := fs.String("config", "", "config file"+when+" (default: $AIRLOCK_CONFIG, /etc/airlock/airlock.yaml)")
	fs.StringVar(&opts.AuditPath, "audit", "", "audit log database"+when+" (default: the config's audit.path, else "+config.DefaultAuditPath+")")
	fs.StringVar(&opts.ImageStore, "image-store", "", "image store tools' images are found in"+when+" (default: the config's images.store, else "+image.DefaultDir+")")
	fs.StringVar(&opts.Sandbox.StateDir, "state-dir", "/run/airlock", "state directory"+when+" (advanced)")
	fs.StringVar(&opts.Sandbox.CgroupParent, "cgroup-parent", "/airlock", "cgroup under which sandboxes are created (no leading slash: below airlock's own)"+when+" (advanced)")
	fs.StringVar(&opts.Sandbox.Runsc, "runsc", "", "gVisor's runsc, for tools with isolation: gvisor"+when+" (default: beside airlockd, then "+strings.Join(gvisor.Dirs, ", ")+")")
	return cfgPath
}
