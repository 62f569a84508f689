package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/linux/cgroup"
	"github.com/airlockhq/airlock/internal/linux/forkexec"
	"github.com/airlockhq/airlock/internal/linux/netns"
	"github.com/airlockhq/airlock/internal/linux/seccomp"
	"github.com/airlockhq/airlock/internal/linux/timerslack"
	"github.com/airlockhq/airlock/internal/sbinit"
)

// Options configure a Runtime. Zero values take the documented defaults.
type Options struct {
	// StateDir holds the empty directory new roots are mounted over and
	// the scratch directories. Default /run/airlock.
	StateDir string
	// CgroupParent is the cgroup under which each sandbox gets its own,
	// relative to the cgroup root(s); without a leading slash, below this
	// process's own cgroup (cgroup v2 only; cgroup.ResolveParent).
	// Default /airlock.
	CgroupParent string
	// IDLockDir holds one lock file per host uid range slot ever claimed;
	// a range is in use while its file is locked (flock). It must be the
	// same for every airlock process on the host. Default /run/airlock/ids.
	IDLockDir string
	// GroupLockDir holds one lock per sandbox cgroup, in a directory per
	// cgroup parent: a sweep takes a cgroup whose lock is free for a
	// leftover, so every process that shares a cgroup parent must see the
	// same locks, whatever its StateDir. It must be the same for every
	// airlock process on the host. Default /run/airlock/groups.
	GroupLockDir string
	// UIDBase is the first host uid (and gid) of the sandbox ranges;
	// slot n maps ids 0..65535 onto UIDBase+n*65536... Default 1<<30.
	UIDBase uint32
	// ImageIDBase is the first host id of the range image files are
	// stored owned by (id n of an image is host id ImageIDBase+n). No
	// sandbox is ever given it. It must be the image store's
	// (image.Options.IDBase). Default DefaultImageIDBase.
	ImageIDBase uint32
	// UIDSlots is how many ranges exist, the most live sandboxes on the
	// host. Default 4096.
	UIDSlots int
	// InitPath is the init program (cmd/airlock-init): every sandbox's
	// PID 1, and the runtime's spawner. Default: InitName beside the
	// running executable, then in InitDirs; failing those, the running
	// binary itself if it calls Child first thing (slower: every sandbox
	// then starts all of that binary; New logs a warning). It must be
	// root's, in directories only root can change.
	InitPath string
	// Runsc is gVisor's runsc, for sandboxes with isolation gvisor.
	// Default: runsc beside the running executable, then in gvisor.Dirs
	// (found at the first such sandbox). It must be root's, in
	// directories only root can change.
	Runsc string
	// Logger receives the runtime's own diagnostics. Default: discard.
	Logger *slog.Logger
	// CloneInProcess clones each init from this process even where a
	// clone copies this process's memory (race builds, architectures
	// other than amd64; see forkexec.SharesMemory), after which this
	// process takes a page fault for every page it writes: right for a
	// short-lived process with a small heap, wrong for a daemon. Where a
	// clone shares the memory, every runtime clones in process; elsewhere,
	// without this, the spawner helper clones.
	CloneInProcess bool
	// OneShot tunes the runtime for a process that creates one sandbox
	// (the CLI's run): its network namespace and the host's part of
	// init's setup are made on other threads while New and the Create go
	// on, and nothing is made ahead after it.
	OneShot bool
	// spawner makes the runtime clone through the spawner even where a
	// clone in process shares memory (the tests of the spawner's path).
	spawner bool
	// Budget bounds what the runtime's live sandboxes reserve together
	// (see Budget); the zero value bounds nothing. Its memory and pids
	// also become the cgroup parent's own ceilings (cgroup SetCeiling),
	// which hold every sandbox under the parent together, those of other
	// airlock processes too; the last runtime to start sets them.
	Budget Budget
	// Observe, if set, is told of every sandbox created and destroyed by
	// this runtime and of every leftover it sweeps (the daemon's audit
	// log). It must not block for long.
	Observe func(Lifecycle)
}

// Default id ranges: sandboxes from host id 2^30 up, and the image range
// just below them.
const (
	DefaultUIDBase     = 1 << 30
	DefaultImageIDBase = DefaultUIDBase - idRangeSize
)

// Lifecycle events.
const (
	Created   = "created"
	Destroyed = "destroyed"
	Swept     = "swept"
)

// Lifecycle is one sandbox lifecycle event.
type Lifecycle struct {
	// Event is Created (its init runs; a Create that fails after that
	// is followed by Destroyed with Err), Destroyed or Swept.
	Event string
	ID    string
	// Label is the Spec's label ("" for swept leftovers).
	Label string
	// Err is set when a destroy or sweep did not finish cleanly, or a
	// Create failed once init ran.
	Err error
}

func (rt *Runtime) observe(ev Lifecycle) {
	if rt.opts.Observe != nil {
		rt.opts.Observe(ev)
	}
}

// DefaultStateDir is the state directory unless Options names another.
const DefaultStateDir = "/run/airlock"

// DefaultCgroupParent is the cgroup parent of sandboxes unless Options
// names another.
const DefaultCgroupParent = "/airlock"

func (o *Options) defaults() {
	if o.StateDir == "" {
		o.StateDir = DefaultStateDir
	}
	if o.CgroupParent == "" {
		o.CgroupParent = DefaultCgroupParent
	}
	if o.IDLockDir == "" {
		o.IDLockDir = "/run/airlock/ids"
	}
	if o.GroupLockDir == "" {
		o.GroupLockDir = "/run/airlock/groups"
	}
	if o.UIDBase == 0 {
		o.UIDBase = DefaultUIDBase
	}
	if o.ImageIDBase == 0 {
		o.ImageIDBase = DefaultImageIDBase
	}
	if o.UIDSlots == 0 {
		o.UIDSlots = 4096
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
}

// Runtime creates sandboxes. One Runtime serves a whole process; it is safe
// for concurrent use.
type Runtime struct {
	opts Options
	// idSlots are the uid range slots this runtime's sandboxes hold.
	idSlots heldSlots
	ledger  ledger
	cg      *cgroup.Parent
	// sockets is the socket buffer memory all sandboxes may hold
	// together, and sockBudget what a sandbox's memory ceiling is a part
	// of when its share of it is set (see sockets.go); 0 for none.
	sockets, sockBudget int64
	// sockdiagFailed says once that the sandboxes' unaccepted
	// connections cannot be read (sockets.go).
	sockdiagFailed sync.Once
	// base is what every init's setup carries from the host: loaded once,
	// by New, or (OneShot) on another goroutine while New and the Create
	// go on, so that the work overlaps them and the start of init.
	base    func() (hostBase, error)
	spawner *spawnerClient
	// hostNet is this process's network namespace and initFile the init
	// program, open with O_PATH, when inits are cloned in process (else
	// both nil).
	hostNet  *os.File
	initFile *os.File
	// nets supplies network namespaces made ahead of demand.
	nets *netnsSupply
	// initEnv is init's environment: the package's, and the processors
	// this process runs on (sbinit.CPUsEnv), which init, born on one,
	// gives the commands.
	initEnv []string
	// groups are sandbox cgroups made ahead of demand; nil in a one-shot
	// runtime.
	groups *groupSupply
	// rootDir and scratchDir are the empty directories init mounts the
	// new root and the scratch tmpfs over, in its own mount namespace.
	rootDir    string
	scratchDir string
	lockDir    string
	imageNS    imageNS
	// volumeNS holds the user namespaces that shift volumes (ids from
	// 0 on disk) onto each id range.
	volumeNS imageNS
	// sweepOnce, for a OneShot runtime, starts its sweep (sweepSoon);
	// sweeping counts a sweep running.
	sweepOnce *sync.Once
	sweeping  sync.WaitGroup
	// programs are the setup programs compiled for this runtime's
	// sandboxes, by setup.
	programs programCache
	// kmsg follows the kernel's log, for the post-mortems of memory
	// breaches.
	kmsg *kmsgLog
	// runscMu guards runscPath, the runsc found for gVisor sandboxes
	// ("" until one is).
	runscMu   sync.Mutex
	runscPath string
	// goferNS is the empty network namespace every gVisor sandbox's gofer
	// runs in (see goferNetNS), made with the first; guarded by
	// runscMu.
	goferNS *os.File
	// gvisorMu is held by GVisor; gvisorOK says a gVisor sandbox was
	// made and ran a command.
	gvisorMu sync.Mutex
	gvisorOK bool
	// roots are the roots this runtime's gVisor sandboxes share.
	roots gvisorRoots
}

// ErrInvalid marks bad input from a caller. It belongs to
// errdefs.ErrInvalid.
var ErrInvalid = errdefs.New(errdefs.ErrInvalid, "invalid")

// New prepares the state directory and cgroup parent and sweeps leftovers
// of airlock processes that died without cleaning up.
func New(ctx context.Context, opts Options) (_ *Runtime, err error) {
	opts.defaults()
	if os.Geteuid() != 0 {
		return nil, errors.New("airlock needs root to create sandboxes (user namespaces with a private uid range, cgroups, network namespaces)")
	}
	if opts.CgroupParent, err = cgroup.ResolveParent(opts.CgroupParent); err != nil {
		return nil, fmt.Errorf("%w: %w", err, ErrInvalid)
	}
	if opts.InitPath == "" {
		p, self, err := findInit()
		if err != nil {
			return nil, err
		}
		if self {
			opts.Logger.Warn("airlock-init not found beside this program or in " + strings.Join(InitDirs, ", ") +
				"; sandboxes start from this program instead, which is slower: install airlock-init beside it")
		}
		opts.InitPath = p
	} else if err := checkInit(opts.InitPath); err != nil {
		return nil, err
	}
	if uint64(opts.UIDBase)+uint64(opts.UIDSlots)*idRangeSize > 1<<32-1 {
		return nil, fmt.Errorf("uid base %d with %d slots overflows the uid space: %w", opts.UIDBase, opts.UIDSlots, ErrInvalid)
	}
	if opts.UIDBase < 2*idRangeSize {
		return nil, fmt.Errorf("uid base %d overlaps ordinary host users: %w", opts.UIDBase, ErrInvalid)
	}
	if opts.ImageIDBase < idRangeSize || uint64(opts.ImageIDBase)+idRangeSize > uint64(opts.UIDBase) &&
		uint64(opts.ImageIDBase) < uint64(opts.UIDBase)+uint64(opts.UIDSlots)*idRangeSize {
		return nil, fmt.Errorf("image id base %d overlaps ordinary host users or the sandbox ranges: %w", opts.ImageIDBase, ErrInvalid)
	}
	if opts.Budget.Sandboxes < 0 || opts.Budget.Memory < 0 || opts.Budget.Pids < 0 {
		return nil, fmt.Errorf("negative budget %+v: %w", opts.Budget, ErrInvalid)
	}
	rt := &Runtime{
		ledger:     ledger{b: opts.Budget},
		opts:       opts,
		rootDir:    filepath.Join(opts.StateDir, "root"),
		scratchDir: filepath.Join(opts.StateDir, "scratch"),
		lockDir:    groupLockDir(opts.GroupLockDir, opts.CgroupParent),
		initEnv:    initEnv,
		kmsg:       openKmsg(),
	}
	var cpus unix.CPUSet
	if err := unix.SchedGetaffinity(0, &cpus); err == nil {
		rt.initEnv = append(slices.Clip(initEnv), sbinit.CPUsEnv+"="+sbinit.FormatCPUs(&cpus))
	}
	// What New has opened is closed again if it fails.
	defer func() {
		if err == nil {
			return
		}
		if rt.nets != nil {
			rt.nets.close()
		}
		for _, f := range []*os.File{rt.hostNet, rt.initFile} {
			if f != nil {
				f.Close()
			}
		}
		if rt.cg != nil {
			rt.cg.Close()
		}
		rt.kmsg.close()
	}()
	if opts.OneShot {
		// A one-shot process creates one sandbox: its namespace is made
		// meanwhile, on another thread.
		rt.nets = newNetnsOne()
	}
	// The state dir must be traversable by the sandbox's init, which runs
	// as an unmapped uid and mounts the new root over rootDir.
	for _, d := range []struct {
		path string
		mode os.FileMode
	}{{opts.StateDir, 0o711}, {rt.rootDir, 0o755}, {rt.scratchDir, 0o755}, {opts.GroupLockDir, 0o700}, {rt.lockDir, 0o700}, {opts.IDLockDir, 0o700}} {
		// Parents made on the way are traversable: the host-wide lock
		// directories (/run/airlock/ids) are made by runtimes of any
		// state directory, and made 0700 their parent became an
		// unusable default state directory (/run/airlock) on a fresh
		// host.
		if err := os.MkdirAll(filepath.Dir(d.path), 0o711); err != nil {
			return nil, fmt.Errorf("state directory: %w", err)
		}
		if err := os.MkdirAll(d.path, d.mode); err != nil {
			return nil, fmt.Errorf("state directory: %w", err)
		}
		if err := os.Chmod(d.path, d.mode); err != nil {
			return nil, fmt.Errorf("state directory: %w", err)
		}
	}
	if err := CheckStateDir(opts.StateDir); err != nil {
		return nil, err
	}
	rt.base = sync.OnceValues(loadBase)
	if !opts.OneShot {
		if _, err := rt.base(); err != nil {
			return nil, err
		}
	} else {
		// Loaded on another goroutine meanwhile; the Create waits for it
		// only once its init is cloned.
		go rt.base()
	}
	if opts.CloneInProcess || forkexec.SharesMemory() && !opts.spawner {
		if rt.hostNet, err = os.Open("/proc/self/ns/net"); err != nil {
			return nil, err
		}
		fd, err := unix.Open(opts.InitPath, unix.O_PATH|unix.O_CLOEXEC, 0)
		if err != nil {
			return nil, fmt.Errorf("init program: %w", err)
		}
		rt.initFile = os.NewFile(uintptr(fd), opts.InitPath)
	}
	cg, err := cgroup.Open(opts.CgroupParent)
	if err != nil {
		return nil, err
	}
	if !opts.OneShot {
		slowMonitorOnce.Do(func() { slowMonitor(opts.Logger) })
	}
	rt.spawner = &spawnerClient{initPath: opts.InitPath, cg: cg}
	if m := cg.Moved(); m != "" {
		opts.Logger.Info("moved this process into a cgroup of its own, so that the cgroup it was in can hand controllers to sandboxes (cgroup v2 keeps processes out of groups with children)", "cgroup", m, "parent", opts.CgroupParent)
	}
	rt.cg = cg
	if b := opts.Budget; b.Memory > 0 || b.Pids > 0 {
		// The kernel's backstop behind the ledger, which sees only this
		// runtime's sandboxes: every sandbox under the parent, of any
		// airlock process, is held to the budget together.
		if err := cg.SetCeiling(b.Memory, b.Pids); err != nil {
			opts.Logger.Warn("the cgroup parent's own ceiling could not be set; admission still bounds this process's sandboxes", "err", err)
		}
	}
	rt.sockets, rt.sockBudget = rt.setSocketCeiling(), rt.socketDenominator()
	if opts.OneShot {
		// Swept while its sandbox's command runs (see sweepSoon), off
		// the way to it.
		rt.sweepOnce = &sync.Once{}
	} else if n, err := rt.Sweep(ctx); err != nil {
		return nil, fmt.Errorf("sweep leftovers: %w", err)
	} else if n > 0 {
		opts.Logger.Info("removed leftovers of a previous airlock process", "sandboxes", n)
	}
	if rt.nets == nil {
		// Each sandbox's namespace gets a TCP table of its own (see
		// netns.ChildEhashEntries): its sockets are read every 50-100
		// ms while it holds any, and a reading walks the whole table.
		if _, err := netns.UseTemplate(); err != nil {
			opts.Logger.Warn("sandboxes' network namespaces share the host's TCP tables: each reading of a sandbox's sockets walks all of the host's", "err", err)
		}
		rt.nets = newNetnsSupply(prepNetns)
	}
	if !opts.OneShot {
		// After the sweep: it would leave the supply's groups alone
		// anyway (their locks are held), but has nothing to look at.
		rt.groups = newGroupSupply(rt.lockDir, rt.cg, prepGroups)
	}
	return rt, nil
}

// hostBase is the host's part of every init's setup.
type hostBase struct {
	image *hostImage
	// seccomp is the compiled filter every init installs.
	seccomp []byte
}

func loadBase() (hostBase, error) {
	img, err := loadHostImage()
	if err != nil {
		return hostBase{}, err
	}
	filter, err := seccomp.DefaultFilter()
	if err != nil {
		return hostBase{}, err
	}
	return hostBase{image: img, seccomp: filter}, nil
}

// groupLockDir is where the locks of the sandbox cgroups under parent
// live: one directory per cgroup parent, named by the parent's path with
// its slashes escaped ("/airlock" is "airlock", "/a/b" is "a%2Fb").
func groupLockDir(root, parent string) string {
	name := strings.Trim(filepath.Clean(parent), "/")
	if name == "" {
		name = "/" // the cgroup root itself: escaped, never the root dir
	}
	return filepath.Join(root, escapeSlashes(name))
}

// escapeSlashes makes a path one file name: "%" becomes "%25" and "/"
// "%2F", so that two different paths never share a name.
func escapeSlashes(p string) string {
	return strings.ReplaceAll(strings.ReplaceAll(p, "%", "%25"), "/", "%2F")
}

// isSandboxID reports whether a cgroup name is one of ours (newID's form).
func isSandboxID(s string) bool {
	if len(s) == 0 || len(s) > 32 {
		return false
	}
	for _, c := range s {
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') {
			return false
		}
	}
	return true
}

// sweepSoon sweeps leftovers in the background, once, for a OneShot
// runtime: a leftover holds nothing a new sandbox needs (ids and lock
// files are taken over from dead holders anyway), so a one-shot process
// sweeps while its command runs rather than before it starts. A failure
// is logged: the run is not the leftovers'.
func (rt *Runtime) sweepSoon(ctx context.Context) {
	if rt.sweepOnce == nil {
		return
	}
	rt.sweepOnce.Do(func() {
		rt.sweeping.Add(1)
		go func() {
			defer rt.sweeping.Done()
			if n, err := rt.Sweep(context.WithoutCancel(ctx)); err != nil {
				rt.opts.Logger.Warn("sweep leftovers", "err", err)
			} else if n > 0 {
				rt.opts.Logger.Info("removed leftovers of a previous airlock process", "sandboxes", n)
			}
		}()
	})
}

// Sweep destroys sandboxes whose owning airlock process is gone: their
// lock file is free (or missing) while their cgroup remains. Sandboxes of
// live processes sharing this state directory are untouched. It returns how
// many it removed.
func (rt *Runtime) Sweep(ctx context.Context) (int, error) {
	ids, err := rt.cg.Children()
	if err != nil {
		return 0, err
	}
	var errs []error
	n := 0
	for _, id := range ids {
		if !isSandboxID(id) {
			continue // not ours
		}
		l, err := tryLock(filepath.Join(rt.lockDir, id))
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if l == nil {
			continue // alive
		}
		g, err := rt.cg.Load(id)
		if errors.Is(err, fs.ErrNotExist) {
			// Its owner removed it between our listing and our lock: a
			// live teardown, not a leftover (the owner removes the
			// cgroup before it lets go of the lock).
			errs = append(errs, l.release())
			continue
		}
		if err == nil {
			kctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			err = errors.Join(g.Kill(kctx), g.Delete(kctx))
			cancel()
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("sandbox %s: %w", id, err))
		} else {
			n++
		}
		rt.observe(Lifecycle{Event: Swept, ID: id, Err: err})
		errs = append(errs, l.release())
	}
	// The bundles of gVisor sandboxes whose cgroups were swept above, or
	// whose holder died before it made one.
	if _, err := rt.sweepBundles(); err != nil {
		errs = append(errs, err)
	}
	// Lock files of dead holders with no cgroup left (the holder died
	// between creating the two). A uid range's lock file stays (see
	// idRange.release): its holder's death freed the range.
	ents, _ := os.ReadDir(rt.lockDir)
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".") {
			continue
		}
		l, err := tryLock(filepath.Join(rt.lockDir, e.Name()))
		if err == nil && l != nil {
			errs = append(errs, l.release())
		}
	}
	return n, errors.Join(errs...)
}

// CgroupVersion reports which cgroup hierarchy the runtime uses (1 or 2).
func (rt *Runtime) CgroupVersion() int {
	if rt.cg.Version() == cgroup.V2 {
		return 2
	}
	return 1
}

// Close releases what the runtime holds. Sandboxes must be destroyed first;
// the runtime does not track them (a pool or daemon does).
func (rt *Runtime) Close() error {
	rt.sweeping.Wait()
	rt.spawner.Close()
	rt.nets.close()
	if rt.groups != nil {
		rt.groups.close()
	}
	rt.imageNS.close()
	rt.volumeNS.close()
	if rt.hostNet != nil {
		rt.hostNet.Close()
	}
	if rt.initFile != nil {
		rt.initFile.Close()
	}
	rt.runscMu.Lock()
	if rt.goferNS != nil {
		rt.goferNS.Close()
	}
	rt.runscMu.Unlock()
	rt.kmsg.close()
	return errors.Join(rt.closeRoots(), rt.cg.Close())
}

// monitorSlack is the timer slack of the Go runtime's monitor thread in a
// process that creates many sandboxes (see package timerslack): its
// wake-ups every 20 µs, and the hand-offs of processors they cause
// whenever a clone, unshare or cgroup call blocks for longer, cost a
// 4-worker create → run → destroy loop 10 % of its CPU.
const monitorSlack = time.Millisecond

var slowMonitorOnce sync.Once

// slowMonitor gives this process's runtime monitor its slack, once per
// process. A one-shot process creates one sandbox and does not look for
// it; where it cannot be set, the process only runs as before.
func slowMonitor(log *slog.Logger) {
	if tid, err := timerslack.SetMonitor(monitorSlack); err != nil {
		log.Debug("the Go runtime's monitor thread keeps its timer slack", "err", err)
	} else {
		log.Debug("the Go runtime's monitor thread has a timer slack of its own", "tid", tid, "slack", monitorSlack)
	}
}
