// Package imagebuild builds images from Dockerfiles, each RUN step in an
// airlock sandbox of the image so far (issue 38;
// docs/decisions/0033-image-builds.md): the steps' images are made by the
// image store (Derive) from what each changed (image.Capture).
package imagebuild

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/image"
	"github.com/airlockhq/airlock/internal/image/dockerfile"
	"github.com/airlockhq/airlock/internal/image/unpack"
	"github.com/airlockhq/airlock/internal/runner"
	"github.com/airlockhq/airlock/result"
	"github.com/airlockhq/airlock/sandbox"
)

// Options configure a build.
type Options struct {
	Store   *image.Store
	Runtime *sandbox.Runtime
	// Limits are each RUN step's sandbox's ceilings.
	Limits sandbox.Limits
	// Args are the build arguments (--build-arg).
	Args map[string]string
	// Name names the image built; "" leaves it unnamed.
	Name string
	// Progress receives a line per step and the output of RUN steps;
	// nil discards them.
	Progress io.Writer
	// Bind, when set, binds each RUN step's sandbox to the build's
	// egress policy (attach.Bind: the gateway, resolver and audit of
	// runs); its denials are explained on Progress. Without it a step
	// has no network at all.
	Bind func(context.Context, *sandbox.Sandbox) (*runner.Binding, error)
	// OnStep, when set, is called with each step's index before it
	// runs (a log that tags its lines by step).
	OnStep func(int)
	// NoCacheFrom, when above 0, is the first step (1-based) whose
	// image is made again rather than taken from the cache, and so every
	// step after it (E2B's force).
	NoCacheFrom int
	// CacheScope keeps builds of different owners (an E2B API key's)
	// from each other's cache: it is part of every step's key.
	CacheScope string
}

// DefaultLimits are a RUN step's ceilings unless the caller says
// otherwise: room for a package manager.
func DefaultLimits() sandbox.Limits {
	l := sandbox.DefaultLimits()
	l.Memory, l.Disk, l.Pids, l.Time = 2<<30, 4<<30, 512, 30*time.Minute
	return l
}

// Result is a finished build.
type Result struct {
	Image *image.Image
	// Steps are the file's steps; Cached those taken from the cache.
	Steps, Cached int
}

// StepError is a step that failed: which, and how.
type StepError struct {
	Step  int // 1-based
	Line  int // in the Dockerfile; 0 for steps of no file (E2B's)
	Text  string
	Cause error
}

func (e *StepError) Error() string {
	if e.Line == 0 {
		return fmt.Sprintf("step %d (%s): %v", e.Step, clip(e.Text), e.Cause)
	}
	return fmt.Sprintf("step %d (Dockerfile line %d, %s): %v", e.Step, e.Line, clip(e.Text), e.Cause)
}

func (e *StepError) Unwrap() error { return e.Cause }

func clip(s string) string {
	if len(s) > 80 {
		return s[:77] + "..."
	}
	return s
}

// Build builds the Dockerfile src with the files of dir as its context.
func Build(ctx context.Context, o Options, src []byte, dir string) (*Result, error) {
	f, err := dockerfile.Parse(src, o.Args)
	if err != nil {
		return nil, err
	}
	base, err := o.Store.Resolve(f.From)
	if err != nil {
		return nil, fmt.Errorf("FROM %s (line %d): %w (import or pull it first)", f.From, f.FromLine, err)
	}
	return BuildSteps(ctx, o, base, f.Steps, func(int) (string, error) { return dir, nil })
}

// BuildSteps builds steps on the image base; contextOf gives a COPY
// step (by index) the directory its sources are read from.
func BuildSteps(ctx context.Context, o Options, base *image.Image, steps []dockerfile.Step, contextOf func(int) (string, error)) (*Result, error) {
	if o.Progress == nil {
		o.Progress = io.Discard
	}
	b := &builder{o: o, contextOf: contextOf, img: base, cfg: base.Config, args: map[string]string{}}
	b.cfg.Env = slices.Clone(b.cfg.Env)
	res := &Result{Steps: len(steps)}
	// The last step that makes a layer gets the file's final config, so
	// that trailing CMD, LABEL and the like make no step of their own.
	last := -1
	for i, st := range steps {
		if st.Kind == dockerfile.Run || st.Kind == dockerfile.Copy || st.Kind == dockerfile.Add || st.Kind == dockerfile.Workdir {
			last = i
		}
	}
	final := b.finalConfig(steps)
	for i, st := range steps {
		if o.OnStep != nil {
			o.OnStep(i)
		}
		fmt.Fprintf(o.Progress, "step %d/%d: %s\n", i+1, len(steps), clip(st.Text))
		cfgFor := b.cfg
		if i == last {
			cfgFor = final
		}
		b.index = i
		cached, err := b.step(ctx, st, cfgFor)
		if err != nil {
			return nil, &StepError{Step: i + 1, Line: st.Line, Text: st.Text, Cause: err}
		}
		if cached {
			res.Cached++
			fmt.Fprintf(o.Progress, "  cached\n")
		}
	}
	if last < 0 {
		// No step made a layer: the base with the file's config.
		if _, err := b.derive(ctx, "config", emptyLayer(), final); err != nil {
			return nil, err
		}
	}
	if o.Name != "" {
		if err := o.Store.Tag(o.Name, b.img.Digest); err != nil {
			return nil, err
		}
		b.img.Names = append(b.img.Names, o.Name)
	}
	res.Image = b.img
	return res, nil
}

type builder struct {
	o         Options
	contextOf func(int) (string, error)
	index     int // the step running
	// made are the directories the layer being written has made
	// (parents), each written once.
	made map[string]bool
	img  *image.Image
	cfg  image.Config
	// args are the ARGs in effect: in RUN's environment, not the image's.
	args map[string]string
}

// finalConfig is the config after every step, as the image will have it.
func (b *builder) finalConfig(steps []dockerfile.Step) image.Config {
	save, saveArgs := b.cfg, maps.Clone(b.args)
	b.cfg.Env = slices.Clone(b.cfg.Env)
	for _, st := range steps {
		b.apply(st)
	}
	out := b.cfg
	b.cfg, b.args = save, saveArgs
	b.cfg.Env = slices.Clone(b.cfg.Env)
	return out
}

// apply makes a step's change to the config (ENV, WORKDIR, USER, CMD,
// ENTRYPOINT, LABEL, ARG).
func (b *builder) apply(st dockerfile.Step) {
	switch st.Kind {
	case dockerfile.Env:
		for _, kv := range st.Pairs {
			b.cfg.Env = setEnv(b.cfg.Env, kv.Key, kv.Value)
		}
	case dockerfile.Arg:
		if kv := st.Pairs[0]; kv.HasValue {
			b.args[kv.Key] = kv.Value
		}
	case dockerfile.Workdir:
		b.cfg.WorkingDir = b.workdir(st.Value)
	case dockerfile.User:
		b.cfg.User, b.cfg.UID, b.cfg.GID = st.Value, nil, nil
	case dockerfile.Cmd:
		b.cfg.Cmd = slices.Clone(st.Args)
	case dockerfile.Entrypoint:
		b.cfg.Entrypoint, b.cfg.Cmd = slices.Clone(st.Args), nil
	case dockerfile.Label:
		labels := maps.Clone(b.cfg.Labels)
		if labels == nil {
			labels = map[string]string{}
		}
		for _, kv := range st.Pairs {
			labels[kv.Key] = kv.Value
		}
		b.cfg.Labels = labels
	}
}

func (b *builder) workdir(v string) string {
	if path.IsAbs(v) {
		return path.Clean(v)
	}
	cur := b.cfg.WorkingDir
	if cur == "" {
		cur = "/"
	}
	return path.Join(cur, v)
}

func setEnv(env []string, k, v string) []string {
	out := slices.DeleteFunc(slices.Clone(env), func(e string) bool { return strings.HasPrefix(e, k+"=") })
	return append(out, k+"="+v)
}

// step runs one step; cached says the cache had its image.
func (b *builder) step(ctx context.Context, st dockerfile.Step, cfgFor image.Config) (bool, error) {
	switch st.Kind {
	case dockerfile.Run:
		return b.run(ctx, st, cfgFor)
	case dockerfile.Copy, dockerfile.Add:
		layer, err := b.copyLayer(st)
		if err != nil {
			return false, err
		}
		defer layer.Close()
		return b.derive(ctx, "copy", layer, cfgFor)
	case dockerfile.Workdir:
		b.apply(st)
		layer, err := b.dirLayer(b.cfg.WorkingDir)
		if err != nil {
			return false, err
		}
		defer layer.Close()
		return b.derive(ctx, "workdir", layer, cfgFor)
	}
	b.apply(st)
	return false, nil
}

// derive makes the next image from the current one and layer, through
// the cache: the key is the parent, what the step is, its layer's
// content and the config it gets.
func (b *builder) derive(ctx context.Context, what string, layer io.ReadSeeker, cfg image.Config) (bool, error) {
	h := sha256.New()
	if _, err := io.Copy(h, layer); err != nil {
		return false, err
	}
	if _, err := layer.Seek(0, io.SeekStart); err != nil {
		return false, err
	}
	return b.cached(b.key(what, hex.EncodeToString(h.Sum(nil)), cfg), func() (*image.Image, error) {
		return b.o.Store.Derive(ctx, b.img, layer, cfg, "")
	})
}

func (b *builder) key(parts ...any) string {
	h := sha256.New()
	fmt.Fprintf(h, "airlock build step\n%q\n%s\n", b.o.CacheScope, b.img.Digest)
	for _, p := range parts {
		j, _ := json.Marshal(p)
		h.Write(j)
		h.Write([]byte{'\n'})
	}
	return hex.EncodeToString(h.Sum(nil))
}

// cached takes the image key names from the cache, or makes it.
func (b *builder) cached(key string, mk func() (*image.Image, error)) (bool, error) {
	if b.o.NoCacheFrom <= 0 || b.index+1 < b.o.NoCacheFrom {
		if img, ok := b.o.Store.Cached(key); ok {
			b.img = img
			return true, nil
		}
	}
	img, err := mk()
	if err != nil {
		return false, err
	}
	if err := b.o.Store.Cache(key, img.Digest); err != nil {
		return false, err
	}
	b.img = img
	return false, nil
}

// run runs a RUN step in a sandbox of the current image, its root
// writable, and makes the next image of what it changed.
func (b *builder) run(ctx context.Context, st dockerfile.Step, cfgFor image.Config) (bool, error) {
	env := slices.Clone(b.cfg.Env)
	for _, k := range slices.Sorted(maps.Keys(b.args)) {
		if !slices.ContainsFunc(env, func(e string) bool { return strings.HasPrefix(e, k+"=") }) {
			env = append(env, k+"="+b.args[k])
		}
	}
	who := b.cfg.User
	if st.User != "" {
		who = st.User
	}
	user, err := b.user(who)
	if err != nil {
		return false, err
	}
	dir := b.cfg.WorkingDir
	if dir == "" {
		dir = "/"
	}
	key := b.key("run", st.Args, env, dir, user, cfgFor)
	return b.cached(key, func() (*image.Image, error) {
		layer, err := b.runStep(ctx, st, env, dir, user)
		if err != nil {
			return nil, err
		}
		defer layer.Close()
		return b.o.Store.Derive(ctx, b.img, layer, cfgFor, "")
	})
}

// user is who RUN runs as: the step's own user or else the config's
// USER (who), resolved in the current image (numbers as they are), else
// root, as Docker's default.
func (b *builder) user(who string) (*sandbox.User, error) {
	if who == "" {
		return &sandbox.User{}, nil
	}
	if b.img.Config.User == who && b.img.Config.UID != nil {
		u := &sandbox.User{UID: *b.img.Config.UID}
		if b.img.Config.GID != nil {
			u.GID = *b.img.Config.GID
		}
		return u, nil
	}
	uid, gid, err := image.ResolveUser(b.img.Root, who)
	if err != nil {
		return nil, fmt.Errorf("USER %s: %w", who, err)
	}
	return &sandbox.User{UID: uid, GID: gid}, nil
}

func (b *builder) runStep(ctx context.Context, st dockerfile.Step, env []string, dir string, user *sandbox.User) (*os.File, error) {
	spec := sandbox.Spec{Limits: b.o.Limits, Image: &sandbox.Image{Root: b.img.Root, Lock: b.img.Lock, Writable: true}, User: user}
	sb, err := b.o.Runtime.Create(ctx, spec)
	if err != nil {
		return nil, fmt.Errorf("a sandbox for the step: %w", err)
	}
	defer sb.Destroy(context.WithoutCancel(ctx))
	time.Sleep(image.SettleTime)
	since := image.Since()
	x := sandbox.ExecRequest{Argv: st.Args, Env: env, Dir: dir, Stdout: b.o.Progress, Stderr: b.o.Progress, KeepAlive: true}
	var r *result.Result
	if b.o.Bind != nil {
		bind, err := b.o.Bind(ctx, sb)
		if err != nil {
			return nil, fmt.Errorf("the step's network: %w", err)
		}
		r = bind.Exec(ctx, x, b.o.Progress)
		if err := bind.Close(ctx); err != nil {
			fmt.Fprintf(b.o.Progress, "  the step's network did not close cleanly: %v\n", err)
		}
	} else {
		r = sb.Exec(ctx, x)
	}
	switch {
	case r.Outcome == result.LimitExceeded && r.Limit != nil:
		return nil, fmt.Errorf("breached its %s limit (ceiling %d %s, observed %d)", r.Limit.Name, r.Limit.Ceiling, r.Limit.Unit, r.Limit.Observed)
	case r.Outcome == result.Signaled:
		return nil, fmt.Errorf("ended by signal %d (%s)", r.Signal, unix.SignalName(syscall.Signal(r.Signal)))
	case r.Outcome != result.Exited:
		return nil, fmt.Errorf("%s: %s", r.Outcome, r.Error)
	case r.ExitCode != 0:
		return nil, fmt.Errorf("exit code %d", r.ExitCode)
	}
	merged, err := os.Open(fmt.Sprintf("/proc/%d/root", sb.InitPid()))
	if err != nil {
		return nil, err
	}
	defer merged.Close()
	parent, err := os.Open(b.img.Root)
	if err != nil {
		return nil, err
	}
	defer parent.Close()
	layer, err := b.tempFile()
	if err != nil {
		return nil, err
	}
	ch, err := image.Capture(layer, merged, parent, since, sb.HostIDBase())
	if err == nil {
		_, err = layer.Seek(0, io.SeekStart)
	}
	if err != nil {
		layer.Close()
		return nil, fmt.Errorf("reading what the step changed: %w", err)
	}
	fmt.Fprintf(b.o.Progress, "  %d added, %d changed, %d removed (%d bytes)\n", ch.Added, ch.Changed, ch.Removed, ch.Bytes)
	return layer, nil
}

// tempFile is an unnamed file in the store's file system.
func (b *builder) tempFile() (*os.File, error) {
	fd, err := unix.Open(b.o.Store.Dir(), unix.O_TMPFILE|unix.O_RDWR|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("a temporary file in the image store: %w", err)
	}
	return os.NewFile(uintptr(fd), "layer"), nil
}

func emptyLayer() io.ReadSeeker {
	var b strings.Builder
	tw := tar.NewWriter(&b)
	tw.Close()
	return strings.NewReader(b.String())
}

// dirLayer makes the directories of p the image does not have (WORKDIR).
func (b *builder) dirLayer(p string) (*os.File, error) {
	layer, err := b.tempFile()
	if err != nil {
		return nil, err
	}
	tw := tar.NewWriter(layer)
	b.made = map[string]bool{}
	if err := b.parents(tw, strings.TrimPrefix(path.Clean(p), "/"), true); err != nil {
		layer.Close()
		return nil, err
	}
	if err := finish(tw, layer); err != nil {
		return nil, err
	}
	return layer, nil
}

func finish(tw *tar.Writer, f *os.File) error {
	err := tw.Close()
	if err == nil {
		_, err = f.Seek(0, io.SeekStart)
	}
	if err != nil {
		f.Close()
	}
	return err
}

// parents writes a directory entry (root's, 0755) for each component of
// rel (all but the last, unless self) that the current image lacks; a
// component that is not a directory there is refused.
func (b *builder) parents(tw *tar.Writer, rel string, self bool) error {
	if rel == "" || rel == "." {
		return nil
	}
	parts := strings.Split(rel, "/")
	if !self {
		parts = parts[:len(parts)-1]
	}
	fd, err := unix.Open(b.img.Root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	missing := false
	for i, part := range parts {
		if !missing {
			var st unix.Stat_t
			err := unix.Fstatat(fd, part, &st, unix.AT_SYMLINK_NOFOLLOW)
			switch {
			case err == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR:
				next, err := unix.Openat(fd, part, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
				unix.Close(fd)
				if err != nil {
					return err
				}
				fd = next
				continue
			case err == nil:
				unix.Close(fd)
				return errdefs.Errorf(errdefs.ErrInvalid, "/%s is not a directory in the image (a symlink is not followed)", strings.Join(parts[:i+1], "/"))
			case errors.Is(err, unix.ENOENT):
				missing = true
				unix.Close(fd)
			default:
				unix.Close(fd)
				return err
			}
		}
		name := strings.Join(parts[:i+1], "/") + "/"
		if b.made[name] {
			continue // made for an earlier source of the same layer
		}
		if err := tw.WriteHeader(&tar.Header{Name: name, Typeflag: tar.TypeDir, Mode: 0o755, Format: tar.FormatPAX}); err != nil {
			return err
		}
		b.made[name] = true
	}
	if !missing {
		unix.Close(fd)
	}
	return nil
}

// copyLayer makes COPY's (and ADD's) layer from the context: each source
// read without following a symlink (one in a copied directory is copied
// as a symlink), none outside the context.
func (b *builder) copyLayer(st dockerfile.Step) (*os.File, error) {
	uid, gid := 0, 0
	if st.Chown != "" {
		u, g, err := image.ResolveUser(b.img.Root, st.Chown)
		if err != nil {
			return nil, fmt.Errorf("--chown=%s: %w", st.Chown, err)
		}
		uid, gid = int(u), int(g)
	}
	var mode int64 = -1
	if st.Chmod != "" {
		m, _ := strconv.ParseUint(st.Chmod, 8, 32)
		mode = int64(m)
	}
	dest := st.Dest
	if !path.IsAbs(dest) {
		wd := b.cfg.WorkingDir
		if wd == "" {
			wd = "/"
		}
		dest = path.Join(wd, dest) + map[bool]string{true: "/", false: ""}[strings.HasSuffix(st.Dest, "/")]
	}
	intoDir := strings.HasSuffix(dest, "/") || len(st.Sources) > 1
	destRel := strings.TrimPrefix(path.Clean(dest), "/")
	layer, err := b.tempFile()
	if err != nil {
		return nil, err
	}
	tw := tar.NewWriter(layer)
	b.made = map[string]bool{}
	fail := func(err error) (*os.File, error) {
		layer.Close()
		return nil, err
	}
	w := &ctxWriter{tw: tw, uid: uid, gid: gid, mode: mode, made: b.made}
	dir, err := b.contextOf(b.index)
	if err != nil {
		return fail(err)
	}
	ctxDir, err := os.Open(dir)
	if err != nil {
		return fail(errdefs.Errorf(errdefs.ErrInvalid, "the build's context: %v", err))
	}
	defer ctxDir.Close()
	var sources []string
	for _, src := range st.Sources {
		if slices.Contains(strings.Split(src, "/"), "..") {
			return fail(errdefs.Errorf(errdefs.ErrInvalid, "%s %s: the source is outside the build's context", st.Kind, src))
		}
		rel := path.Clean("/" + src)[1:]
		if !strings.ContainsAny(src, "*?[") {
			sources = append(sources, rel)
			continue
		}
		matches, err := globInContext(ctxDir, rel)
		if err != nil {
			return fail(errdefs.Errorf(errdefs.ErrInvalid, "%s %s: %v", st.Kind, src, err))
		}
		if len(matches) == 0 {
			return fail(errdefs.Errorf(errdefs.ErrInvalid, "%s %s: no file of the build's context matches", st.Kind, src))
		}
		sources = append(sources, matches...)
	}
	intoDir = intoDir || len(sources) > 1
	for _, rel := range sources {
		src := rel
		fd, isDir, err := openInContext(ctxDir, rel)
		if err != nil {
			return fail(errdefs.Errorf(errdefs.ErrInvalid, "%s %s: %v", st.Kind, src, err))
		}
		target, dir := destRel, destRel
		if !isDir {
			if intoDir {
				target = path.Join(destRel, path.Base(rel))
			}
			dir = path.Dir(target)
		}
		// The directories it goes into: made (root's, 0755) where the
		// image has none, left as they are where it has.
		if err := b.parents(tw, dir, true); err != nil {
			unix.Close(fd)
			return fail(err)
		}
		err = w.copy(fd, isDir, target)
		unix.Close(fd)
		if err != nil {
			return fail(fmt.Errorf("%s %s: %w", st.Kind, src, err))
		}
	}
	if err := finish(tw, layer); err != nil {
		return nil, err
	}
	return layer, nil
}

// maxMatches bounds the files one wildcard source may match.
const maxMatches = 10000

// globInContext is what pattern (a path of the context, with
// path.Match's wildcards in any component) matches, sorted: each
// directory read without following a symlink, a symlink never gone
// through (a match that is one is refused when it is opened).
func globInContext(ctxDir *os.File, pattern string) ([]string, error) {
	parts := strings.Split(pattern, "/")
	for _, p := range parts {
		if _, err := path.Match(p, ""); err != nil {
			return nil, fmt.Errorf("a malformed wildcard: %w", err)
		}
	}
	var out []string
	var walk func(dir string, i int) error
	walk = func(dir string, i int) error {
		fd, isDir, err := openInContext(ctxDir, dir)
		if err != nil || !isDir {
			if fd >= 0 {
				unix.Close(fd)
			}
			return nil // not a directory to look in: no match here
		}
		names, err := unpack.ReadNames(fd)
		unix.Close(fd)
		if err != nil {
			return err
		}
		slices.Sort(names)
		for _, n := range names {
			if ok, _ := path.Match(parts[i], n); !ok {
				continue
			}
			p := path.Join(dir, n)
			if i == len(parts)-1 {
				if len(out) == maxMatches {
					return fmt.Errorf("matches over %d files", maxMatches)
				}
				out = append(out, p)
				continue
			}
			if err := walk(p, i+1); err != nil {
				return err
			}
		}
		return nil
	}
	return out, walk("", 0)
}

// openInContext opens rel under the context directory, every component
// without following a symlink.
func openInContext(ctxDir *os.File, rel string) (fd int, isDir bool, err error) {
	fd, err = unix.Dup(int(ctxDir.Fd()))
	if err != nil {
		return -1, false, err
	}
	if rel == "" || rel == "." {
		return fd, true, nil
	}
	parts := strings.Split(rel, "/")
	for i, p := range parts {
		next, err := unix.Openat(fd, p, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
		unix.Close(fd)
		if errors.Is(err, unix.ELOOP) {
			return -1, false, fmt.Errorf("/%s is a symlink, which a source does not follow", strings.Join(parts[:i+1], "/"))
		}
		if err != nil {
			return -1, false, fmt.Errorf("not in the build's context: %w", err)
		}
		fd = next
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			unix.Close(fd)
			return -1, false, err
		}
		last := i == len(parts)-1
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFDIR:
			if last {
				return fd, true, nil
			}
		case unix.S_IFREG:
			if last {
				return fd, false, nil
			}
			unix.Close(fd)
			return -1, false, fmt.Errorf("/%s is not a directory", strings.Join(parts[:i+1], "/"))
		default:
			unix.Close(fd)
			return -1, false, fmt.Errorf("/%s is neither a file nor a directory", strings.Join(parts[:i+1], "/"))
		}
	}
	return fd, false, nil
}

// maxDepth bounds the directories nested in a COPY's source.
const maxDepth = 256

// ctxWriter writes context files into a layer, owned and moded as COPY
// says.
type ctxWriter struct {
	tw       *tar.Writer
	uid, gid int
	mode     int64 // -1: the file's own
	depth    int
	// made are the layer's directories written so far (shared with the
	// builder's parents): two sources' same directory is one entry.
	made map[string]bool
}

func (w *ctxWriter) header(st *unix.Stat_t, name string) *tar.Header {
	m := int64(st.Mode & 0o7777)
	if w.mode >= 0 {
		m = w.mode
	}
	return &tar.Header{Name: name, Mode: m, Uid: w.uid, Gid: w.gid, ModTime: time.Unix(st.Mtim.Sec, st.Mtim.Nsec).UTC(), Format: tar.FormatPAX}
}

// copy writes what fd is (a file, or a directory's contents) at name.
func (w *ctxWriter) copy(fd int, isDir bool, name string) error {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return err
	}
	if !isDir {
		h := w.header(&st, name)
		h.Typeflag, h.Size = tar.TypeReg, st.Size
		if err := w.tw.WriteHeader(h); err != nil {
			return err
		}
		n, err := io.Copy(w.tw, io.LimitReader(fdReader(fd), st.Size))
		if err == nil && n != st.Size {
			err = errors.New("changed while being read")
		}
		return err
	}
	if w.depth > maxDepth {
		return fmt.Errorf("%s: directories nested more than %d deep", name, maxDepth)
	}
	if w.depth > 0 && !w.made[name+"/"] {
		// A directory below the source's: the source's own are its
		// destination's, made above. Another source's of the same
		// name is this one.
		w.made[name+"/"] = true
		h := w.header(&st, name+"/")
		// A directory's time is when a name in it last changed (an
		// E2B upload's, when it was unpacked): not part of the layer,
		// or no copy of a directory would ever be a cache hit.
		h.Typeflag, h.ModTime = tar.TypeDir, time.Unix(0, 0).UTC()
		if err := w.tw.WriteHeader(h); err != nil {
			return err
		}
	}
	names, err := unpack.ReadNames(fd)
	if err != nil {
		return err
	}
	slices.Sort(names)
	for _, n := range names {
		child := path.Join(name, n)
		var cst unix.Stat_t
		if err := unix.Fstatat(fd, n, &cst, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return err
		}
		switch cst.Mode & unix.S_IFMT {
		case unix.S_IFLNK:
			buf := make([]byte, 4096)
			k, err := unix.Readlinkat(fd, n, buf)
			if err != nil {
				return err
			}
			h := w.header(&cst, child)
			h.Typeflag, h.Linkname, h.Mode = tar.TypeSymlink, string(buf[:k]), 0o777
			if err := w.tw.WriteHeader(h); err != nil {
				return err
			}
		case unix.S_IFREG, unix.S_IFDIR:
			cfd, err := unix.Openat(fd, n, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
			if err != nil {
				return err
			}
			w.depth++
			err = w.copy(cfd, cst.Mode&unix.S_IFMT == unix.S_IFDIR, child)
			w.depth--
			unix.Close(cfd)
			if err != nil {
				return err
			}
		}
	}
	return nil
}

// fdReader reads a descriptor it does not own.
type fdReader int

func (fd fdReader) Read(p []byte) (int, error) {
	n, err := unix.Read(int(fd), p)
	if n < 0 {
		n = 0
	}
	if n == 0 && err == nil && len(p) > 0 {
		return 0, io.EOF
	}
	return n, err
}
