package daemoncmd

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/airlockhq/airlock/internal/cli"
	"github.com/airlockhq/airlock/internal/egress/policy"
	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/image"
	"github.com/airlockhq/airlock/internal/imagebuild"
	"github.com/airlockhq/airlock/internal/runner"
	"github.com/airlockhq/airlock/internal/runner/attach"
	"github.com/airlockhq/airlock/internal/units"
	"github.com/airlockhq/airlock/sandbox"
)

// buildFlags are `airlock image build`'s own.
type buildFlags struct {
	file                string
	args                map[string]string
	memory, disk        int64
	pids                int64
	stepTime            time.Duration
	stateDir, cgroupDir string
	cacheMax            int64
	noCache             bool
	// allow are the destinations the RUN steps may reach (--allow,
	// --allow-private); none: nothing.
	allow    []policy.Destination
	allowRaw []string
}

func (b *buildFlags) add(fs *flag.FlagSet, name *string) {
	b.args = map[string]string{}
	d := imagebuild.DefaultLimits()
	b.memory, b.disk, b.pids, b.stepTime = d.Memory, d.Disk, d.Pids, d.Time
	fs.StringVar(&b.file, "f", "", "the Dockerfile (default: CONTEXT/Dockerfile)")
	fs.StringVar(name, "name", "", "name for the image built")
	fs.Func("build-arg", "K=V: a value for the Dockerfile's ARG K (repeatable)", func(v string) error {
		k, val, ok := strings.Cut(v, "=")
		if !ok || k == "" {
			return errors.New("want K=V")
		}
		b.args[k] = val
		return nil
	})
	size := func(dst *int64) func(string) error {
		return func(v string) error {
			n, err := units.ParseSize(v)
			if err == nil {
				*dst = n
			}
			return err
		}
	}
	b.cacheMax = image.DefaultBuildCacheMax
	fs.BoolVar(&b.noCache, "no-cache", false, "run every step again rather than take it from the cache (the new images are cached)")
	fs.Func("cache-max", "ceiling of the build cache: the step images no name holds, least recently used trimmed after the build (default 10GiB)", size(&b.cacheMax))
	fs.Func("memory", "memory ceiling of each RUN step's sandbox (default 2GiB)", size(&b.memory))
	fs.Func("disk", "disk ceiling of each RUN step's sandbox: what it may write (default 4GiB)", size(&b.disk))
	fs.Int64Var(&b.pids, "pids", d.Pids, "process ceiling of each RUN step's sandbox")
	fs.Func("time", "time ceiling of each RUN step (default 30m)", func(v string) error {
		d, err := units.ParseDuration(v)
		if err == nil {
			b.stepTime = d
		}
		return err
	})
	fs.Var(cli.AllowFlag(&b.allow, &b.allowRaw, false), "allow", "let RUN steps reach HOST[:PORT], *.DOMAIN[:PORT] or IP/CIDR:PORT through airlock's egress gateway (repeatable; port 443 if none; default: no network)")
	fs.Var(cli.AllowFlag(&b.allow, &b.allowRaw, true), "allow-private", "as --allow, for a destination in a private range (a mirror on the local network)")
	fs.StringVar(&b.stateDir, "state-dir", sandbox.DefaultStateDir, "state directory (advanced)")
	fs.StringVar(&b.cgroupDir, "cgroup-parent", sandbox.DefaultCgroupParent, "cgroup under which the steps' sandboxes are created (no leading slash: below airlock's own) (advanced)")
}

func (b *buildFlags) run(ctx context.Context, st *image.Store, dir, name string, stdio cli.IO) error {
	file := b.file
	if file == "" {
		file = filepath.Join(dir, "Dockerfile")
	}
	src, err := readBounded(file)
	if err != nil {
		return err
	}
	lim := sandbox.DefaultLimits()
	lim.Memory, lim.Disk, lim.Pids, lim.Time = b.memory, b.disk, b.pids, b.stepTime
	if err := lim.Validate(); err != nil {
		return errdefs.Errorf(errdefs.ErrInvalid, "%v", err)
	}
	rt, err := sandbox.New(ctx, sandbox.Options{StateDir: b.stateDir, CgroupParent: b.cgroupDir, CloneInProcess: true, OneShot: true,
		Logger: slog.New(slog.NewTextHandler(stdio.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if err != nil {
		return err
	}
	defer rt.Close()
	cli.SignalsCaught(ctx) // an interrupted build destroys its step's sandbox
	start := time.Now()
	o := imagebuild.Options{Store: st, Runtime: rt, Limits: lim, Args: b.args, Name: name, Progress: stdio.Stderr}
	if b.noCache {
		o.NoCacheFrom = 1
	}
	// Bound to the gateway even with nothing allowed: a step's
	// attempt is refused and explained there, as a run's is.
	pol := attach.Policy{Tool: "image-build", Egress: b.allow}
	o.Bind = func(ctx context.Context, sb *sandbox.Sandbox) (*runner.Binding, error) {
		return attach.Bind(ctx, sb, pol)
	}
	res, err := imagebuild.Build(ctx, o, src, dir)
	if _, _, terr := st.TrimCache(b.cacheMax); terr != nil {
		fmt.Fprintf(stdio.Stderr, "airlock image build: the build cache was not trimmed: %v\n", terr)
	}
	if err != nil {
		return err
	}
	label := res.Image.Digest
	if name != "" {
		label = name + " " + label
	}
	fmt.Fprintf(stdio.Stdout, "%s (%d steps, %d cached, %.1fs)\n", label, res.Steps, res.Cached, time.Since(start).Seconds())
	return nil
}

// readBounded reads a Dockerfile, refusing one past the parser's bound
// before reading it whole.
func readBounded(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, errdefs.Errorf(errdefs.ErrInvalid, "the Dockerfile: %v", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, errdefs.Errorf(errdefs.ErrInvalid, "the Dockerfile %s is not a regular file", path)
	}
	b, err := io.ReadAll(io.LimitReader(f, 1<<20+1))
	if err != nil {
		return nil, err
	}
	if len(b) > 1<<20 {
		return nil, errdefs.Errorf(errdefs.ErrInvalid, "the Dockerfile %s is over 1 MiB", path)
	}
	return b, nil
}
