package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/internal/config"
	"github.com/airlockhq/airlock/internal/egress"
	"github.com/airlockhq/airlock/internal/egress/policy"
	"github.com/airlockhq/airlock/internal/image"
	"github.com/airlockhq/airlock/internal/runner"
	"github.com/airlockhq/airlock/internal/units"
	"github.com/airlockhq/airlock/result"
	"github.com/airlockhq/airlock/sandbox"
)

// sizeFlag is a flag.Value for byte sizes ("64MiB").
type sizeFlag struct{ v *int64 }

func (f sizeFlag) String() string {
	if f.v == nil {
		return ""
	}
	return units.FormatSize(*f.v)
}

func (f sizeFlag) Set(s string) error {
	n, err := units.ParseSize(s)
	if err != nil {
		return err
	}
	*f.v = n
	return nil
}

// countFlag is a flag.Value for positive whole numbers.
type countFlag struct{ v *int64 }

func (f countFlag) String() string {
	if f.v == nil {
		return ""
	}
	return fmt.Sprint(*f.v)
}

func (f countFlag) Set(s string) error {
	var n int64
	if _, err := fmt.Sscan(s, &n); err != nil || fmt.Sprint(n) != strings.TrimSpace(s) || n <= 0 {
		return fmt.Errorf("invalid count %q: want a positive whole number", s)
	}
	*f.v = n
	return nil
}

// durationFlag is a flag.Value for durations ("30s", or plain seconds).
type durationFlag struct {
	v         *time.Duration
	allowZero bool
}

func (f durationFlag) String() string {
	if f.v == nil {
		return ""
	}
	return f.v.String()
}

func (f durationFlag) Set(s string) error {
	d, err := units.ParseDuration(s)
	if err != nil {
		return err
	}
	if d == 0 && !f.allowZero {
		return fmt.Errorf("invalid duration %q: must be positive", s)
	}
	*f.v = d
	return nil
}

// cpuFlag is a flag.Value for CPU bandwidth in cores.
type cpuFlag struct{ v *int64 }

func (f cpuFlag) String() string {
	if f.v == nil {
		return ""
	}
	return fmt.Sprintf("%g", float64(*f.v)/1000)
}

func (f cpuFlag) Set(s string) error {
	if s == "0" || s == "none" {
		*f.v = 0
		return nil
	}
	m, err := units.ParseCPU(s)
	if err != nil {
		return err
	}
	*f.v = m
	return nil
}

// envFlag is a repeatable flag.Value collecting KEY=VALUE pairs.
type envFlag struct{ v *[]string }

func (f envFlag) String() string { return "" }

func (f envFlag) Set(s string) error {
	k, _, ok := strings.Cut(s, "=")
	switch {
	case !ok:
		return fmt.Errorf("invalid %q: want KEY=VALUE", s)
	case k == "":
		return fmt.Errorf("invalid %q: empty name", s)
	case strings.ContainsRune(s, 0):
		return fmt.Errorf("invalid %q: contains a NUL byte", s)
	}
	*f.v = append(*f.v, s)
	return nil
}

// runFlags are the parsed flags of `airlock run`.
type runFlags struct {
	limits       sandbox.Limits
	mounts       []sandbox.Mount // the tool's
	env          []string
	workdir      string
	json, events bool
	sampleEvery  time.Duration
	opts         sandbox.Options
	// configPath and tool select a tool from the config file.
	configPath, tool string
	// egress are the allowed destinations (the tool's, then --allow's).
	egress  []policy.Destination
	network egress.Limits
	// services are the broker services of the tool, with the secrets
	// they name.
	services []*config.Service
	secrets  map[string]*config.Secret
	// socket is the daemon's; viaDaemon says the run goes through it.
	socket     string
	viaDaemon  bool
	workdirSet bool
	// image is the root file system ("" or "host": the host's); img is
	// it resolved in the store at imageStore.
	image, imageStore string
	img               *image.Image
	// cfg is the config file's, when one was read; the tool's settings
	// that shape the sandbox land in spec (image, user), writableRoot and
	// toolWorkdir (the tool gave a workdir).
	cfg          *config.Config
	spec         sandbox.Spec
	writableRoot bool
	toolWorkdir  bool
}

// shapingFlags change how the sandbox is built or what it may reach. A
// warm sandbox of the daemon was built from the tool's settings, so a run
// that gives any of them runs here instead.
var shapingFlags = []string{"image", "image-store", "memory", "pids", "disk", "fds", "output", "time", "cpu", "cpu-time", "allow", "config", "state-dir", "cgroup-parent", "sample-interval"}

func parseRun(args []string, stderr io.Writer) (*runFlags, []string, error) {
	rf := &runFlags{limits: sandbox.DefaultLimits(), sampleEvery: 250 * time.Millisecond}
	fs := flag.NewFlagSet("airlock run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	l := &rf.limits
	fs.Var(sizeFlag{&l.Memory}, "memory", "memory+swap ceiling of the whole sandbox (e.g. 512MiB)")
	fs.Var(countFlag{&l.Pids}, "pids", "ceiling on processes and threads")
	fs.Var(sizeFlag{&l.Disk}, "disk", "writable space of /workspace, /tmp and /dev/shm together; inodes are bounded too")
	fs.Var(countFlag{&l.FDs}, "fds", "open file descriptors per process")
	fs.Var(sizeFlag{&l.Output}, "output", "stdout+stderr ceiling")
	fs.Var(durationFlag{v: &l.Time}, "time", "wall-clock ceiling (e.g. 30s, 5m)")
	fs.Var(cpuFlag{&l.CPUMilli}, "cpu", "CPU bandwidth in cores (e.g. 0.5, 2); 0 for unthrottled")
	fs.Var(durationFlag{v: &l.CPUTime, allowZero: true}, "cpu-time", "CPU-time budget of the command (e.g. 10s); 0 for none")
	fs.Var(envFlag{&rf.env}, "env", "set KEY=VALUE in the command's environment (repeatable)")
	fs.StringVar(&rf.workdir, "workdir", sandbox.HomeDir, "working directory inside the sandbox")
	fs.BoolVar(&rf.json, "json", false, "capture output and print one JSON result object at the end")
	fs.BoolVar(&rf.events, "events", false, "print NDJSON events live (stdout, stderr, sample, egress, broker, result)")
	fs.Var(durationFlag{v: &rf.sampleEvery}, "sample-interval", "how often resource samples are taken")
	fs.StringVar(&rf.configPath, "config", "", "config file (default: $AIRLOCK_CONFIG, /etc/airlock/airlock.yaml)")
	fs.StringVar(&rf.socket, "socket", api.DefaultSocket, "the daemon's socket; with --tool, the run goes through the daemon when it is there")
	fs.StringVar(&rf.tool, "tool", "", "use the named tool's settings from the config file; flags override them")
	fs.StringVar(&rf.image, "image", "", "root file system: host (the default) or an imported image's name or digest")
	fs.StringVar(&rf.imageStore, "image-store", image.DefaultDir, "image store directory (default: the config's images.store, else this)")
	fs.Var(allowFlag{&rf.egress}, "allow", "allow egress to HOST[:PORT], *.DOMAIN[:PORT] or IP/CIDR:PORT (repeatable; port 443 if none)")
	fs.StringVar(&rf.opts.StateDir, "state-dir", "/run/airlock", "state directory (advanced)")
	fs.StringVar(&rf.opts.CgroupParent, "cgroup-parent", "/airlock", "cgroup under which sandboxes are created (advanced)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: airlock run [flags] -- COMMAND [ARG...]\n\nRuns COMMAND in a fresh sandbox that is destroyed afterwards.\nExit status: the command's own; 128+N if killed by signal N; 124 if a ceiling\nwas breached; 125 if airlock itself failed.\n\nFlags:")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, nil, &ExitError{Code: 0}
		}
		return nil, nil, &ExitError{Code: ExitFailure} // flag printed the error
	}
	argv := fs.Args()
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	rf.workdirSet = set["workdir"]
	rf.viaDaemon = rf.tool != "" && !slices.ContainsFunc(shapingFlags, func(f string) bool { return set[f] }) && DaemonListening(rf.socket)
	if rf.viaDaemon {
		// The daemon has the tool's settings; the local config is not read.
	} else if err := rf.applyTool(set); err != nil {
		fmt.Fprintf(stderr, "airlock run: %v\n", err)
		return nil, nil, &ExitError{Code: ExitFailure}
	}
	if !rf.viaDaemon {
		if err := rf.resolveImage(set); err != nil {
			fmt.Fprintf(stderr, "airlock run: %v\n", err)
			return nil, nil, &ExitError{Code: ExitFailure}
		}
		if len(argv) == 0 && rf.img != nil {
			argv = rf.img.Argv()
		}
	}
	if len(argv) == 0 {
		fmt.Fprintln(stderr, "airlock run: no command given; usage: airlock run [flags] -- COMMAND [ARG...]")
		return nil, nil, &ExitError{Code: ExitFailure}
	}
	if rf.json && rf.events {
		fmt.Fprintln(stderr, "airlock run: --json and --events are exclusive")
		return nil, nil, &ExitError{Code: ExitFailure}
	}
	if !filepath.IsAbs(rf.workdir) {
		fmt.Fprintf(stderr, "airlock run: invalid value %q for flag -workdir: must be an absolute path\n", rf.workdir)
		return nil, nil, &ExitError{Code: ExitFailure}
	}
	if err := rf.limits.Validate(); err != nil {
		fmt.Fprintf(stderr, "airlock run: %v\n", err)
		return nil, nil, &ExitError{Code: ExitFailure}
	}
	return rf, argv, nil
}

// resolveImage finds the image the run uses in the store and puts its
// defaults (environment, working directory, user) under the tool's and the
// flags'.
func (rf *runFlags) resolveImage(set map[string]bool) error {
	if rf.image == "" || rf.image == config.ImageHost {
		return nil
	}
	opts := image.Options{Dir: rf.imageStore}
	if !set["image-store"] {
		// The config's store, also when no tool was asked for.
		cfg := rf.cfg
		if cfg == nil {
			var err error
			if cfg, err = config.Discover(rf.configPath); err != nil {
				return err
			}
		}
		opts = cfg.Images.StoreOptions()
	}
	st, err := image.Open(opts)
	if err != nil {
		return err
	}
	if rf.img, err = st.Resolve(rf.image); err != nil {
		return err
	}
	// The run's settings (the tool's, then the flags') as a tool, for
	// the same merge the daemon makes.
	t := config.Tool{Env: rf.env, Workdir: rf.workdir, WorkdirSet: rf.workdirSet || rf.toolWorkdir, User: rf.spec.User, WritableRoot: rf.writableRoot}
	ir := t.WithImage(rf.img)
	rf.spec.Image, rf.spec.User, rf.env, rf.workdir = ir.Image, ir.User, ir.Env, ir.Workdir
	return nil
}

func runCmd(ctx context.Context, args []string, stdio IO) error {
	rf, argv, err := parseRun(args, stdio.Stderr)
	if err != nil {
		return err
	}
	var r *result.Result
	if rf.viaDaemon {
		r = runViaDaemon(ctx, rf, argv, stdio)
	} else {
		r = runOnce(ctx, rf, argv, stdio)
	}
	return finish(ctx, r, rf, stdio)
}

// syncWriter serialises writes of concurrent streams to one writer.
type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(b []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(b)
}

func (s *syncWriter) event(e result.Event) {
	b, err := json.Marshal(e)
	if err != nil {
		return
	}
	_, _ = s.Write(append(b, '\n'))
}

func runOnce(ctx context.Context, rf *runFlags, argv []string, stdio IO) *result.Result {
	// One short-lived sandbox: cloning from this small process is cheaper
	// than starting the spawner helper.
	rf.opts.CloneInProcess, rf.opts.OneShot = true, true
	if rf.opts.Logger == nil {
		// The runtime's warnings (no airlock-init beside airlock, say).
		rf.opts.Logger = slog.New(slog.NewTextHandler(stdio.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	rt, err := sandbox.New(ctx, rf.opts)
	if err != nil {
		return &result.Result{Outcome: result.Error, Error: err.Error()}
	}
	defer rt.Close()
	spec := rf.spec
	spec.Limits, spec.Mounts = rf.limits, rf.mounts
	// The egress gateway (and broker) attach to the sandbox's network
	// namespace while its init starts.
	var b *runner.Binding
	spec.OnStart = func(sb *sandbox.Sandbox) (err error) {
		b, err = runner.Bind(ctx, sb, rf.policy())
		return err
	}
	// Started, not created: the command goes to init while it sets the
	// sandbox up, and starts as soon as init is ready (a setup that fails
	// is the command's error).
	sb, err := rt.Start(ctx, spec)
	if err != nil {
		if b != nil {
			err = errors.Join(err, b.Close(ctx))
		}
		return &result.Result{Outcome: result.Error, Error: err.Error()}
	}
	// Until here an interrupt ends airlock as a crash would (init dies
	// with it, the next airlock sweeps what is left); from here it
	// destroys the sandbox.
	SignalsCaught(ctx)
	out := &syncWriter{w: stdio.Stdout}
	x := sandbox.ExecRequest{
		Argv:        argv,
		Env:         rf.env,
		Dir:         rf.workdir,
		Stdin:       stdio.Stdin,
		SampleEvery: rf.sampleEvery,
	}
	var explain io.Writer
	switch {
	case rf.json:
		x.Capture = true
	case rf.events:
		x.OnEvent = out.event
	default:
		x.Stdout, x.Stderr = stdio.Stdout, stdio.Stderr
		explain = stdio.Stderr
	}
	r, closeNet := b.RunCloseLater(ctx, x, explain)
	// A gateway that heard nothing closes alongside the destroy.
	netClosed := make(chan error, 1)
	go func() { netClosed <- closeNet(context.WithoutCancel(ctx)) }()
	err = errors.Join(sb.Destroy(ctx), <-netClosed)
	if err != nil && r.Outcome != result.Error {
		// The command's outcome stands; the caller still hears that
		// cleanup failed.
		fmt.Fprintf(stdio.Stderr, "airlock: %v\n", err)
	}
	if rf.events {
		out.event(result.Event{Type: result.EventResult, Millis: r.Usage.WallMillis, Result: r})
	}
	return r
}

// finish prints what the mode calls for and chooses the exit code.
func finish(ctx context.Context, r *result.Result, rf *runFlags, stdio IO) error {
	if rf.json {
		enc := json.NewEncoder(stdio.Stdout)
		if err := enc.Encode(r); err != nil {
			return fmt.Errorf("print result: %w", err)
		}
	}
	switch r.Outcome {
	case result.Exited:
		return exitCode(r.ExitCode)
	case result.Signaled:
		return exitCode(128 + r.Signal)
	case result.LimitExceeded:
		fmt.Fprintf(stdio.Stderr, "airlock: limit exceeded: %s\n", r.Limit)
		return &ExitError{Code: ExitLimit}
	default:
		if ctx.Err() != nil {
			fmt.Fprintln(stdio.Stderr, "airlock: interrupted; sandbox destroyed")
			return &ExitError{Code: 130}
		}
		fmt.Fprintf(stdio.Stderr, "airlock: %s\n", r.Error)
		return &ExitError{Code: ExitFailure}
	}
}

func exitCode(c int) error {
	if c == 0 {
		return nil
	}
	return &ExitError{Code: c}
}
