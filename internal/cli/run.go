package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/internal/egress/policy"
	"github.com/airlockhq/airlock/internal/runner"
	"github.com/airlockhq/airlock/internal/termtext"
	"github.com/airlockhq/airlock/result"
	"github.com/airlockhq/airlock/sandbox"
)

// DefaultImageStore is the image store's default directory
// (internal/image.DefaultDir, which this package does not link).
const DefaultImageStore = "/var/lib/airlock/images"

// RunFlags are the parsed flags of `airlock run`.
type RunFlags struct {
	Limits sandbox.Limits
	// ViaDaemon is set once the run went to a daemon (this host's, or
	// --host): its tool's ceilings are the daemon's config's, which the
	// run's flags may lower but never raise.
	ViaDaemon bool
	// Env are --env's KEY=VALUE pairs, in order.
	Env          []string
	Workdir      string
	JSON, Events bool
	// TTY gives the command a terminal of its own (-t).
	TTY         bool
	SampleEvery time.Duration
	// Opts are the runtime's: --state-dir and --cgroup-parent.
	Opts sandbox.Options
	// ConfigPath and Tool select a tool from the config file.
	ConfigPath, Tool string
	// Socket is the local daemon's; Host, when set, a remote daemon's or
	// a cluster front's address (--host, $AIRLOCK_HOST), with the token
	// in TokenFile or $AIRLOCK_TOKEN.
	Socket, Host, TokenFile string
	// Isolation is the backend of a run without a tool (--isolation):
	// "", "namespaces" or "gvisor". A tool's is its config's.
	Isolation string
	// Image is the root file system ("" or "host": the host's) and
	// ImageStore the store it is found in.
	Image, ImageStore string
	// Allow are the destinations --allow and --allow-private named, and
	// AllowArgs and AllowPrivateArgs the same as they were given.
	Allow            []policy.Destination
	AllowArgs        []string
	AllowPrivateArgs []string
	// Set holds the name of every flag given.
	Set map[string]bool
}

// Plain reports whether the run needs nothing but what airlock itself
// links: no tool, no config file and no image. Any other run is airlockd's
// (see Extra.Run).
func (f *RunFlags) Plain() bool {
	return f.Tool == "" && f.ConfigPath == "" && (f.Image == "" || f.Image == "host") && !f.Set["image-store"] && f.Host == ""
}

// ParseRun parses run's flags and returns them with the command line.
// A bad flag is printed and returned as an *ExitError.
func ParseRun(args []string, stderr io.Writer) (*RunFlags, []string, error) {
	f := &RunFlags{Limits: sandbox.DefaultLimits(), SampleEvery: 250 * time.Millisecond, Set: map[string]bool{}}
	fs := flag.NewFlagSet("airlock run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	l := &f.Limits
	fs.Var(sizeFlag{&l.Memory}, "memory", "memory+swap ceiling of the whole sandbox (e.g. 512MiB)")
	fs.Var(countFlag{&l.Pids}, "pids", "ceiling on processes and threads")
	fs.Var(sizeFlag{&l.Disk}, "disk", "writable space of /workspace, /tmp and /dev/shm together; inodes are bounded too")
	fs.Var(countFlag{&l.FDs}, "fds", "open file descriptors per process")
	fs.Var(sizeFlag{&l.Output}, "output", "stdout+stderr ceiling")
	fs.Var(durationFlag{v: &l.Time}, "time", "wall-clock ceiling (e.g. 30s, 5m)")
	fs.Var(cpuFlag{&l.CPUMilli}, "cpu", "CPU bandwidth in cores (e.g. 0.5, 2); 0 for unthrottled")
	fs.Var(durationFlag{v: &l.CPUTime, allowZero: true}, "cpu-time", "CPU-time budget of the command (e.g. 10s); 0 for none")
	fs.Var(envFlag{&f.Env}, "env", "set KEY=VALUE in the command's environment (repeatable)")
	fs.StringVar(&f.Workdir, "workdir", sandbox.HomeDir, "working directory inside the sandbox")
	fs.BoolVar(&f.TTY, "t", false, "give the command a terminal of its own in the sandbox, for an interactive shell (needs a terminal on stdin)")
	fs.BoolVar(&f.TTY, "tty", false, "same as -t")
	fs.BoolVar(&f.TTY, "it", false, "same as -t (standard input is always passed on: -i is implied)")
	var interactive bool
	fs.BoolVar(&interactive, "i", false, "accepted for familiarity: standard input is always passed on")
	fs.BoolVar(&f.JSON, "json", false, "capture output and print one JSON result object at the end")
	fs.BoolVar(&f.Events, "events", false, "print NDJSON events live (stdout, stderr, sample, egress, broker, result)")
	fs.Var(durationFlag{v: &f.SampleEvery}, "sample-interval", "how often resource samples are taken")
	fs.StringVar(&f.ConfigPath, "config", "", "config file (default: $AIRLOCK_CONFIG, /etc/airlock/airlock.yaml)")
	fs.StringVar(&f.Socket, "socket", api.DefaultSocket, "the daemon's socket; with --tool, the run goes through the daemon when it is there")
	fs.StringVar(&f.Host, "host", os.Getenv("AIRLOCK_HOST"), "run the --tool on a remote daemon or a cluster's front: http://HOST:PORT or https://HOST[:PORT] (default $AIRLOCK_HOST); the token comes from --token-file or $AIRLOCK_TOKEN")
	fs.StringVar(&f.TokenFile, "token-file", os.Getenv("AIRLOCK_TOKEN_FILE"), "a file holding the token for --host (default $AIRLOCK_TOKEN_FILE, else the token is $AIRLOCK_TOKEN)")
	fs.StringVar(&f.Tool, "tool", "", "use the named tool's settings from the config file; flags override them")
	fs.StringVar(&f.Image, "image", "", "root file system: host (the default) or an imported image's name or digest")
	fs.StringVar(&f.ImageStore, "image-store", DefaultImageStore, "image store directory (default: the config's images.store, else this)")
	fs.Var(allowFlag{v: &f.Allow, raw: &f.AllowArgs}, "allow", "allow egress to HOST[:PORT], *.DOMAIN[:PORT] or IP/CIDR:PORT (repeatable; port 443 if none)")
	fs.Var(allowFlag{v: &f.Allow, raw: &f.AllowPrivateArgs, private: true}, "allow-private", "as --allow, for a destination in a private range (10/8, 192.168/16, loopback, ...; never metadata or link-local), as private: true in the config")
	fs.StringVar(&f.Isolation, "isolation", "", "sandbox backend of a run without --tool: namespaces (the default) or gvisor (gVisor's application kernel; needs runsc)")
	fs.StringVar(&f.Opts.Runsc, "runsc", "", "gVisor's runsc, for --isolation gvisor (default: beside airlock, then /usr/local/libexec/airlock, /usr/local/bin, /usr/bin)")
	fs.StringVar(&f.Opts.StateDir, "state-dir", "/run/airlock", "state directory (advanced)")
	fs.StringVar(&f.Opts.CgroupParent, "cgroup-parent", "/airlock", "cgroup under which sandboxes are created (no leading slash: below airlock's own) (advanced)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: airlock run [flags] -- COMMAND [ARG...]\n\nRuns COMMAND in a fresh sandbox that is destroyed afterwards.\nExit status: the command's own; 128+N if killed by signal N; 124 if a ceiling\nwas breached; 125 if airlock itself failed.\n\nFlags:")
		fs.PrintDefaults()
	}
	if done, err := ParseFlags(fs, args, stderr); done {
		if err == nil {
			err = &ExitError{Code: 0}
		}
		return nil, nil, err
	}
	fs.Visit(func(fl *flag.Flag) { f.Set[fl.Name] = true })
	return f, fs.Args(), nil
}

// Check refuses what no run can do, whoever runs it: no command, --json
// with --events, a relative working directory, limits out of range. It
// prints why.
func (f *RunFlags) Check(argv []string, stderr io.Writer) error {
	switch {
	case len(argv) == 0:
		fmt.Fprintln(stderr, "airlock run: no command given; usage: airlock run [flags] -- COMMAND [ARG...]")
	case f.JSON && f.Events:
		fmt.Fprintln(stderr, "airlock run: --json and --events are exclusive")
	case f.TTY && (f.JSON || f.Events):
		fmt.Fprintln(stderr, "airlock run: --tty shows the command's terminal; it cannot go with --json or --events")
	case f.Set["token-file"] && f.Host == "":
		fmt.Fprintln(stderr, "airlock run: --token-file is for --host: a run here or through the local socket needs no token")
	case f.Set["isolation"] && (f.Tool != "" || f.Host != ""):
		fmt.Fprintln(stderr, "airlock run: --isolation is for a run without --tool: a tool's isolation is its config's, and no run may choose another")
	case sandbox.ValidIsolation(f.Isolation) != nil:
		fmt.Fprintf(stderr, "airlock run: --%v\n", sandbox.ValidIsolation(f.Isolation))
	case !filepath.IsAbs(f.Workdir):
		fmt.Fprintf(stderr, "airlock run: invalid value %q for flag -workdir: must be an absolute path\n", f.Workdir)
	default:
		if err := f.Limits.Validate(); err != nil {
			fmt.Fprintf(stderr, "airlock run: %v\n", err)
			break
		}
		return nil
	}
	return &ExitError{Code: ExitFailure}
}

// SyncWriter serialises writes of concurrent streams to one writer.
type SyncWriter struct {
	mu sync.Mutex // held across each write to W
	W  io.Writer
}

func (s *SyncWriter) Write(b []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.W.Write(b)
}

// Event writes e as one NDJSON line, escaped for the terminal
// (termtext): an egress event's destination is the sandbox's choice.
func (s *SyncWriter) Event(e result.Event) {
	b, err := json.Marshal(e)
	if err != nil {
		return
	}
	_, _ = s.Write(append(termtext.JSON(b), '\n'))
}

// Bind binds a run's network side to its sandbox, while its init starts.
type Bind func(ctx context.Context, sb *sandbox.Sandbox) (*runner.Binding, error)

// RunOnce runs argv in a sandbox made from spec (its limits are f's) and
// destroyed afterwards, with bind's network side, in f's output mode.
func RunOnce(ctx context.Context, f *RunFlags, spec sandbox.Spec, argv []string, stdio IO, bind Bind) *result.Result {
	// One short-lived sandbox: cloning from this small process is cheaper
	// than starting the spawner helper.
	var term *Terminal
	if f.TTY {
		var err error
		if term, err = OpenTerminal(stdio.Stdin); err != nil {
			return &result.Result{Outcome: result.Error, Error: err.Error()}
		}
	}
	opts := f.Opts
	opts.CloneInProcess, opts.OneShot = true, true
	if opts.Logger == nil {
		// The runtime's warnings (no airlock-init beside airlock, say).
		opts.Logger = slog.New(slog.NewTextHandler(stdio.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	rt, err := sandbox.New(ctx, opts)
	if err != nil {
		return &result.Result{Outcome: result.Error, Error: err.Error()}
	}
	defer rt.Close()
	spec.Limits = f.Limits
	// One command, then destroyed: under gVisor it runs as the
	// container's process (Spec.OneCommand); a terminal needs init.
	spec.OneCommand = !f.TTY
	if spec.Isolation == "" {
		spec.Isolation = f.Isolation
	}
	// The network side attaches to the sandbox's network namespace while
	// its init starts.
	var b *runner.Binding
	spec.OnStart = func(sb *sandbox.Sandbox) (err error) {
		b, err = bind(ctx, sb)
		return err
	}
	// Started, not created: the command goes to init while the sandbox is
	// built, and starts as soon as init is ready (a setup that fails is
	// the command's error).
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
	out := &SyncWriter{W: stdio.Stdout}
	x := sandbox.ExecRequest{
		Argv:        argv,
		Env:         f.Env,
		Dir:         f.Workdir,
		Stdin:       stdio.Stdin,
		SampleEvery: f.SampleEvery,
	}
	var explain io.Writer
	switch {
	case f.JSON:
		x.Capture = true
	case f.Events:
		x.OnEvent = out.Event
	default:
		x.Stdout, x.Stderr = stdio.Stdout, stdio.Stderr
		explain = stdio.Stderr
	}
	if term != nil {
		resize := make(chan sandbox.WinSize, 1)
		x.TTY, x.Resize = &sandbox.WinSize{Rows: term.Rows, Cols: term.Cols}, resize
		if err := term.Raw(func(rows, cols uint16) { SendLatest(resize, sandbox.WinSize{Rows: rows, Cols: cols}) }); err != nil {
			fmt.Fprintf(stdio.Stderr, "airlock: the terminal: %v\n", err)
		}
		defer term.Restore()
		explain = CRLF{stdio.Stderr}
	}
	r, closeNet := b.RunCloseLater(ctx, x, explain)
	if term != nil {
		term.Restore()
	}
	// A gateway that heard nothing closes alongside the destroy.
	netClosed := make(chan error, 1)
	go func() { netClosed <- closeNet(context.WithoutCancel(ctx)) }()
	err = errors.Join(sb.Destroy(ctx), <-netClosed)
	if err != nil && r.Outcome != result.Error {
		// The command's outcome stands; the caller still hears that
		// cleanup failed.
		fmt.Fprintf(stdio.Stderr, "airlock: %v\n", err)
	}
	if f.Events {
		out.Event(result.Event{Type: result.EventResult, Millis: r.Usage.WallMillis, Result: r})
	}
	return r
}

// Finish prints what the mode calls for and chooses the exit code.
func Finish(ctx context.Context, r *result.Result, f *RunFlags, stdio IO) error {
	if f.JSON {
		b, err := json.Marshal(r)
		if err != nil {
			return fmt.Errorf("print result: %w", err)
		}
		if _, err := stdio.Stdout.Write(append(termtext.JSON(b), '\n')); err != nil {
			return fmt.Errorf("print result: %w", err)
		}
	}
	switch r.Outcome {
	case result.Exited:
		return exitCode(r.ExitCode)
	case result.Signaled:
		if r.Error != "" {
			// Not the command's doing: say whose (airlock kill).
			fmt.Fprintf(stdio.Stderr, "airlock: %s\n", termtext.String(r.Error))
		}
		return exitCode(128 + r.Signal)
	case result.LimitExceeded:
		fmt.Fprintf(stdio.Stderr, "airlock: %s\n", termtext.String(LimitMessage(r.Limit, f.Tool, f.ViaDaemon)))
		if pm := r.PostMortem.Summary(); pm != "" {
			fmt.Fprintf(stdio.Stderr, "airlock: post-mortem: %s\n", termtext.String(pm))
		}
		return &ExitError{Code: ExitLimit}
	default:
		if ctx.Err() != nil {
			code, msg := interrupted(ctx)
			fmt.Fprintf(stdio.Stderr, "airlock: %s\n", msg)
			return &ExitError{Code: code}
		}
		// The error may quote the command (its argv[0] not found) or,
		// through --host, be a remote daemon's words.
		fmt.Fprintf(stdio.Stderr, "airlock: %s\n", termtext.String(r.Error))
		return &ExitError{Code: ExitFailure}
	}
}

func exitCode(c int) error {
	if c == 0 {
		return nil
	}
	return &ExitError{Code: c}
}

// SendLatest queues v on c (of capacity 1), replacing a value not yet
// taken: a window size that was never applied is no longer of interest.
func SendLatest[T any](c chan T, v T) {
	for {
		select {
		case c <- v:
			return
		default:
		}
		select {
		case <-c:
		default:
		}
	}
}
