package daemoncmd

import (
	"context"
	"fmt"
	"slices"

	"github.com/airlockhq/airlock/internal/broker/brokerspec"
	"github.com/airlockhq/airlock/internal/cli"
	"github.com/airlockhq/airlock/internal/config"
	"github.com/airlockhq/airlock/internal/egress"
	"github.com/airlockhq/airlock/internal/egress/policy"
	"github.com/airlockhq/airlock/internal/image"
	"github.com/airlockhq/airlock/internal/runner"
	"github.com/airlockhq/airlock/internal/runner/attach"
	"github.com/airlockhq/airlock/internal/sbspec"
	"github.com/airlockhq/airlock/result"
	"github.com/airlockhq/airlock/sandbox"
)

// shapingFlags change how the sandbox is built or what it may reach. A
// warm sandbox of the daemon was built from the tool's settings, so a run
// that gives any of them runs here instead.
var shapingFlags = []string{"image", "image-store", "memory", "pids", "disk", "fds", "output", "time", "cpu", "cpu-time", "allow", "config", "state-dir", "cgroup-parent", "sample-interval"}

// fullRun is a run with what airlock hands over: a tool, a config file,
// an image; through the daemon when it can.
type fullRun struct {
	*cli.RunFlags
	// mounts are the tool's.
	mounts []sandbox.Mount
	// egress are the allowed destinations (the tool's, then --allow's).
	egress  []policy.Destination
	network egress.Limits
	// services are the broker services of the tool, with the secrets
	// they name.
	services []*brokerspec.Service
	secrets  map[string]*config.Secret
	// cfg is the config file's, when one was read; the tool's settings
	// that shape the sandbox land in spec (image, user), user (the
	// tool's, as the file gave it), writableRoot and toolWorkdir (the
	// tool gave a workdir).
	cfg          *config.Config
	spec         sandbox.Spec
	user         *sbspec.User
	writableRoot bool
	toolWorkdir  bool
	img          *image.Image
}

// runFull is `airlock run` with a tool, a config file or an image.
func runFull(ctx context.Context, f *cli.RunFlags, argv []string, stdio cli.IO) error {
	fr := &fullRun{RunFlags: f, egress: f.Allow}
	viaDaemon := f.Tool != "" && !slices.ContainsFunc(shapingFlags, func(n string) bool { return f.Set[n] }) && DaemonListening(f.Socket)
	if !viaDaemon {
		if err := fr.applyTool(); err != nil {
			fmt.Fprintf(stdio.Stderr, "airlock run: %v\n", err)
			return &cli.ExitError{Code: cli.ExitFailure}
		}
		if err := fr.resolveImage(); err != nil {
			fmt.Fprintf(stdio.Stderr, "airlock run: %v\n", err)
			return &cli.ExitError{Code: cli.ExitFailure}
		}
		if len(argv) == 0 && fr.img != nil {
			argv = fr.img.Argv()
		}
	}
	if err := f.Check(argv, stdio.Stderr); err != nil {
		return err
	}
	var r *result.Result
	if viaDaemon {
		r = runViaDaemon(ctx, f, argv, stdio)
	} else {
		spec := fr.spec
		spec.Mounts = fr.mounts
		r = cli.RunOnce(ctx, f, spec, argv, stdio, func(ctx context.Context, sb *sandbox.Sandbox) (*runner.Binding, error) {
			return attach.Bind(ctx, sb, fr.policy())
		})
	}
	return cli.Finish(ctx, r, f, stdio)
}

// bindHere binds a plain run's gateway in this process, which links it.
func bindHere(f *cli.RunFlags) cli.Bind {
	return func(ctx context.Context, sb *sandbox.Sandbox) (*runner.Binding, error) {
		return attach.Bind(ctx, sb, attach.Policy{Egress: f.Allow})
	}
}

// applyTool loads the config (when --config or --tool asks for it) and
// puts the tool's settings under the flags: a flag given on the command
// line always wins over the tool's value.
func (fr *fullRun) applyTool() error {
	if fr.ConfigPath == "" && fr.Tool == "" {
		return nil
	}
	cfg, err := config.Discover(fr.ConfigPath)
	if err != nil {
		return err
	}
	fr.cfg = cfg
	if fr.Tool == "" {
		return nil
	}
	t, err := cfg.Tool(fr.Tool)
	if err != nil {
		return err
	}
	limits := attach.Limits(t.Limits)
	flagged := map[string]func(){
		"memory":   func() { limits.Memory = fr.Limits.Memory },
		"pids":     func() { limits.Pids = fr.Limits.Pids },
		"disk":     func() { limits.Disk = fr.Limits.Disk },
		"fds":      func() { limits.FDs = fr.Limits.FDs },
		"output":   func() { limits.Output = fr.Limits.Output },
		"time":     func() { limits.Time = fr.Limits.Time },
		"cpu":      func() { limits.CPUMilli = fr.Limits.CPUMilli },
		"cpu-time": func() { limits.CPUTime = fr.Limits.CPUTime },
	}
	for name, apply := range flagged {
		if fr.Set[name] {
			apply()
		}
	}
	fr.Limits = limits
	fr.mounts = attach.Mounts(t.Mounts)
	if !fr.Set["image"] {
		fr.Image = t.Image
	}
	fr.user, fr.writableRoot, fr.toolWorkdir = t.User, t.WritableRoot, t.WorkdirSet
	fr.spec.User = attach.User(t.User)
	fr.Env = append(append([]string(nil), t.Env...), fr.Env...)
	if !fr.Set["workdir"] && t.Workdir != "" {
		fr.Workdir = t.Workdir
	}
	fr.egress = append(append([]policy.Destination(nil), t.Egress...), fr.Allow...)
	fr.network = attach.NetworkLimits(t.Network)
	for _, name := range t.Services {
		s, err := cfg.Service(name)
		if err != nil {
			return err
		}
		fr.services = append(fr.services, s)
	}
	fr.secrets = cfg.Secrets
	return nil
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
	if fr.img, err = st.Resolve(fr.Image); err != nil {
		return err
	}
	// The run's settings (the tool's, then the flags') as a tool, for
	// the same merge the daemon makes.
	t := config.Tool{Env: fr.Env, Workdir: fr.Workdir, WorkdirSet: fr.Set["workdir"] || fr.toolWorkdir, User: fr.user, WritableRoot: fr.writableRoot}
	ir := attach.WithImage(&t, fr.img)
	fr.spec.Image, fr.spec.User, fr.Env, fr.Workdir = ir.Image, ir.User, ir.Env, ir.Workdir
	return nil
}

// policy is what binds to the run's sandbox.
func (fr *fullRun) policy() attach.Policy {
	return attach.Policy{
		Tool:     fr.Tool,
		Egress:   fr.egress,
		Network:  fr.network,
		Services: fr.services,
		Secrets:  fr.secrets,
	}
}
