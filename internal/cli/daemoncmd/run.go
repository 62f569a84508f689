package daemoncmd

import (
	"context"
	"fmt"
	"strings"

	"github.com/airlockhq/airlock/client"
	"github.com/airlockhq/airlock/internal/cli"
	"github.com/airlockhq/airlock/internal/config"
	"github.com/airlockhq/airlock/internal/image"
	"github.com/airlockhq/airlock/internal/runner"
	"github.com/airlockhq/airlock/internal/runner/attach"
	"github.com/airlockhq/airlock/result"
	"github.com/airlockhq/airlock/sandbox"
)

// shapingFlags change how the sandbox is built or what it may reach. A
// warm sandbox of the daemon was built from the tool's settings, so a run
// that gives any of them runs here instead.
var shapingFlags = []string{"image", "image-store", "disk", "fds", "cpu", "allow", "allow-private", "config", "state-dir", "cgroup-parent", "sample-interval"}

// lowerFlags are the ceilings a run through a daemon may lower under its
// tool's (api.RunLimits): the daemon refuses a value above the tool's.
// Without a daemon they apply here, as any flag does.
var lowerFlags = []string{"memory", "pids", "output", "time", "cpu-time"}

// fullRun is a run with what airlock hands over: a tool, a config file,
// an image; through the daemon when it can.
type fullRun struct {
	*cli.RunFlags
	// cfg is the config file's, when one was read; tool is the tool
	// asked for, or an empty one.
	cfg  *config.Config
	tool *config.Tool
	img  *image.Image
}

// runFull is `airlock run` with a tool, a config file or an image.
func runFull(ctx context.Context, f *cli.RunFlags, argv []string, stdio cli.IO) error {
	fr := &fullRun{RunFlags: f, tool: &config.Tool{}}
	var shaping []string
	for _, n := range shapingFlags {
		if f.Set[n] {
			shaping = append(shaping, "--"+n)
		}
	}
	if f.Host != "" {
		return runRemote(ctx, f, shaping, argv, stdio)
	}
	listening := f.Tool != "" && DaemonListening(f.Socket)
	viaDaemon := listening && len(shaping) == 0
	var plan attach.Plan
	if listening && !viaDaemon {
		// The two paths differ (the config file read here may not be
		// the daemon's): say which one this run takes, and why.
		fmt.Fprintf(stdio.Stderr, "airlock run: %s %s how the sandbox is built, so this run is made here from the config file, not by the daemon on %s\n",
			strings.Join(shaping, ", "), plural(len(shaping), "changes", "change"), f.Socket)
	}
	if !viaDaemon {
		var err error
		if plan, err = fr.plan(); err != nil {
			fmt.Fprintf(stdio.Stderr, "airlock run: %v\n", err)
			return &cli.ExitError{Code: cli.ExitFailure}
		}
		if len(argv) == 0 {
			argv = plan.Argv
		}
	}
	if err := f.Check(argv, stdio.Stderr); err != nil {
		return err
	}
	var r *result.Result
	if viaDaemon {
		f.ViaDaemon = true
		r = runViaDaemon(ctx, client.New(f.Socket), f, argv, stdio)
	} else {
		rec, err := recordRun(ctx, fr.cfg, f.Tool, argv, f.Workdir)
		if err != nil {
			fmt.Fprintf(stdio.Stderr, "airlock run: %v\n", err)
			return &cli.ExitError{Code: cli.ExitFailure}
		}
		r = cli.RunOnce(ctx, f, plan.Spec, argv, stdio, func(ctx context.Context, sb *sandbox.Sandbox) (*runner.Binding, error) {
			return attach.Bind(ctx, sb, plan.Policy)
		})
		if err := rec.finish(ctx, r); err != nil {
			fmt.Fprintf(stdio.Stderr, "airlock run: the run's outcome could not be recorded in the audit log: %v\n", err)
		}
	}
	return cli.Finish(ctx, r, f, stdio)
}

// runRemote is a run of a tool on a remote daemon or a cluster's front
// (--host): always there, never here instead, and only as that daemon's
// config builds the tool's sandbox.
func runRemote(ctx context.Context, f *cli.RunFlags, shaping, argv []string, stdio cli.IO) error {
	const cmd = "airlock run"
	switch {
	case f.Tool == "":
		return cli.UsageError(stdio.Stderr, cmd, "--host (or $%s) runs a tool of the daemon there: name it with --tool (a run without a tool is made here, without --host)", envHost)
	case len(shaping) > 0:
		return cli.UsageError(stdio.Stderr, cmd, "%s %s how the sandbox is built, which the daemon at %s does from its own config: %s cannot go with --host",
			strings.Join(shaping, ", "), plural(len(shaping), "changes", "change"), f.Host, plural(len(shaping), "it", "they"))
	}
	t := &target{socket: f.Socket, host: f.Host, tokenFile: f.TokenFile, given: func(name string) bool { return f.Set[name] }}
	c, err := t.client(cmd, stdio.Stderr)
	if err != nil {
		return err
	}
	if err := f.Check(argv, stdio.Stderr); err != nil {
		return err
	}
	f.ViaDaemon = true
	return cli.Finish(ctx, runViaDaemon(ctx, c, f, argv, stdio), f, stdio)
}

// bindHere binds a plain run's gateway in this process, which links it.
func bindHere(f *cli.RunFlags) cli.Bind {
	return func(ctx context.Context, sb *sandbox.Sandbox) (*runner.Binding, error) {
		p, err := attach.For(nil, &config.Tool{}, attach.Overrides{Egress: f.Allow})
		if err != nil {
			return nil, err
		}
		return attach.Bind(ctx, sb, p.Policy)
	}
}

// plan loads the config (when --config or --tool asks for it), finds
// the run's image and translates the tool with the flags over it
// (attach.For, as the daemon does): a flag given on the command line
// always wins over the tool's value. The flags end up holding what the
// run uses.
func (fr *fullRun) plan() (attach.Plan, error) {
	if fr.ConfigPath != "" || fr.Tool != "" {
		cfg, err := config.Discover(fr.ConfigPath)
		if err != nil {
			return attach.Plan{}, err
		}
		fr.cfg = cfg
		if fr.Tool != "" {
			if fr.tool, err = cfg.Tool(fr.Tool); err != nil {
				return attach.Plan{}, err
			}
		}
	}
	if !fr.Set["image"] && fr.Tool != "" {
		fr.Image = fr.tool.Image
	}
	if err := fr.resolveImage(); err != nil {
		return attach.Plan{}, err
	}
	o := attach.Overrides{Image: fr.img, Egress: fr.Allow, Env: fr.Env, Workdir: fr.Workdir, WorkdirSet: fr.Set["workdir"]}
	o.Limits = func(l *sandbox.Limits) {
		flagged := map[string]func(){
			"memory":   func() { l.Memory = fr.Limits.Memory },
			"pids":     func() { l.Pids = fr.Limits.Pids },
			"disk":     func() { l.Disk = fr.Limits.Disk },
			"fds":      func() { l.FDs = fr.Limits.FDs },
			"output":   func() { l.Output = fr.Limits.Output },
			"time":     func() { l.Time = fr.Limits.Time },
			"cpu":      func() { l.CPUMilli = fr.Limits.CPUMilli },
			"cpu-time": func() { l.CPUTime = fr.Limits.CPUTime },
		}
		for name, apply := range flagged {
			if fr.Set[name] {
				apply()
			}
		}
	}
	p, err := attach.For(fr.cfg, fr.tool, o)
	if err != nil {
		return attach.Plan{}, err
	}
	p.Spec.Label = "" // a one-shot run's sandbox is no pool's
	fr.Limits, fr.Env = p.Spec.Limits, p.Env
	if p.Workdir != "" {
		fr.Workdir = p.Workdir
	}
	return p, nil
}

// resolveImage finds the image the run uses in the store and puts its
// defaults (environment, working directory, user) under the tool's and the
// flags'.
func (fr *fullRun) resolveImage() error {
	if fr.Image == "" || fr.Image == config.ImageHost {
		return nil
	}
	opts := image.Options{Dir: fr.ImageStore}
	if !fr.Set["image-store"] {
		// The config's store, also when no tool was asked for.
		cfg := fr.cfg
		if cfg == nil {
			var err error
			if cfg, err = config.Discover(fr.ConfigPath); err != nil {
				return err
			}
		}
		opts = attach.StoreOptions(cfg.Images)
	}
	st, err := image.Open(opts)
	if err != nil {
		return err
	}
	fr.img, err = st.Resolve(fr.Image)
	return err
}
