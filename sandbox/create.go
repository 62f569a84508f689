package sandbox

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlockhq/airlock/internal/initproto"
	"github.com/airlockhq/airlock/internal/linux/cgroup"
	"github.com/airlockhq/airlock/internal/linux/forkexec"
	"github.com/airlockhq/airlock/internal/sbinit"
	"github.com/airlockhq/airlock/internal/spawner"
)

// Spec describes a sandbox to create.
type Spec struct {
	Limits Limits
	// Hostname inside the sandbox. Default "sandbox".
	Hostname string
	// Label names the sandbox's profile in lifecycle events (the tool).
	Label string
	// Mounts are host paths bound read-only into the sandbox.
	Mounts []Mount
	// Volumes are host directories (the roots of volumes' file
	// systems) attached writable into the sandbox, their owners shifted
	// onto its ids (volumes.go).
	Volumes []Volume
	// Image, when set, is the root file system; nil is the embedded
	// default, the host's own system directories.
	Image *Image
	// Seed, when set, is what /workspace and /tmp start with (seed.go);
	// Runtime.Seeds says whether this host can.
	Seed *Seed
	// User, when set, is who commands run as (default 1000:1000).
	User *User
	// OnStart, when set, is called by Create once init has been cloned
	// into its namespaces and given its setup, before Create waits for it
	// to be ready, with the sandbox. Only its ID and NetNS may be used
	// then. Work done there (attaching the egress gateway and broker to
	// the namespace) overlaps init's start; an error fails the Create,
	// and what OnStart made is the caller's to undo.
	OnStart func(*Sandbox) error
	// Isolation is the backend: "" or IsolationNamespaces, or
	// IsolationGVisor.
	Isolation string
	// OneCommand says the sandbox will run one command, not kept alive,
	// and then be destroyed (airlock run). Under gVisor its runsc then
	// starts when that command comes, with the command as the container's
	// first process and no init (gvisor_direct.go): a start of a process
	// fewer in the guest. A sandbox asked for before its command
	// (AwaitStart), or given a command that needs init (a terminal, say),
	// starts with init as any other. The other backend ignores it.
	OneCommand bool
	// Diagnostic switches; never set by the CLI.
	NoSeccomp, NoLandlock bool
}

// validHostname accepts what the kernel takes as a host name (at most 64
// bytes) and what /etc/hosts and /etc/hostname can hold as one name:
// letters, digits, hyphens and dots, so that no name adds a line to them.
func validHostname(h string) error {
	if len(h) > 64 {
		return fmt.Errorf("hostname %.16q... is longer than 64 bytes", h)
	}
	for _, c := range h {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '.') {
			return fmt.Errorf("hostname %q: only letters, digits, '-' and '.' are allowed", h)
		}
	}
	return nil
}

// initEnv is init's environment: settings of its Go runtime, read before
// any of init's code runs. One processor keeps its threads few, and so its
// start-up cost, its all-thread calls and its footprint small. No memory
// profiling, which nothing in init reads: the runtime otherwise samples
// its first allocations, recording each sample's stack in a hash table of
// its own, and gives each thread two buffers for profiled stacks (6 page
// faults fewer per sandbox, 0.4 ms of CPU on a VM where a fault costs
// 13 µs). No names on its anonymous mappings: the runtime otherwise
// names each (a prctl per mapping, 21 at init's start), which under
// gVisor is 21 trips to its kernel.
var initEnv = []string{"GOMAXPROCS=1", "GODEBUG=memprofilerate=0,profstackdepth=0,decoratemappings=0"}

// readyTimeout bounds how long init may take to build the sandbox.
const readyTimeout = 30 * time.Second

// Sandbox is one created sandbox. Its methods are safe for concurrent use.
type Sandbox struct {
	id    string
	label string
	rt    *Runtime
	// limits are the ceilings the sandbox was built with, and booked in
	// the runtime's ledger; lowered, once set (Lower), are those of what
	// runs in it from then on.
	limits  Limits
	lowered atomic.Pointer[Limits]
	lowerMu sync.Mutex // held by Lower
	// unheld is the most socket buffer memory its connections that no
	// process holds (not accepted yet) may take, 0 for no bound (see
	// sockets.go).
	unheld int64
	// allSockets is the most all its TCP sockets may hold, where only
	// the readings bound them (v2): its share of the host's TCP memory;
	// 0 for none.
	allSockets int64

	// gv is the gVisor backend's state; nil for the namespace backend.
	gv *gvisorState

	// rootRW says the root is writable (an image's, with an upper
	// layer on the disk tmpfs): OpenDir opens "/" too.
	rootRW bool

	pid     int
	pidfd   *os.File      // init's pidfd; init is the spawner's child
	exited  chan struct{} // closed when init has exited (its pid namespace is empty)
	gone    chan struct{} // closed when Destroy has finished
	conn    *initproto.Conn
	group   *cgroup.Group
	netns   *os.File
	scratch int // O_PATH descriptor of the scratch tmpfs, for statfs
	// upper is an O_PATH descriptor of a writable root's upper layer,
	// for a disk breach's post-mortem, or -1.
	upper int
	// volumes are the attached volumes, for statfs (volumes.go).
	volumes []volumeFD
	// opened says scratch and volumes are set (finishStart), for what
	// reads them outside an exec.
	opened atomic.Bool
	// volumeSpec is what to open them from, once init is ready.
	volumeSpec []Volume
	// booked says the sandbox holds its ceilings in the runtime's
	// ledger, until its teardown gives them back.
	booked bool
	ids    *idRange
	// idBase is ids' base, kept after the teardown releases ids: read
	// by a call still finishing on a destroyed sandbox, it is never nil
	// and never written again.
	idBase uint32
	lock   *lockFile
	// execd says how the clone's program and init's exec went (see
	// spawner.CloneLater); initExecd asks it once.
	execd     func() error
	execdOnce sync.Once
	execdErr  error
	initLog   *os.File
	// imageLock holds the image's lock shared while the sandbox lives.
	imageLock *os.File
	// seedLock holds the seed's lock shared while the sandbox lives.
	seedLock *os.File
	// ready is the wait for init to be ready, done once (see Start); its
	// error, readyErr, ends the sandbox.
	ready    sync.Once
	readyErr error

	// pauseMu is held by Pause and Resume, one at a time.
	pauseMu sync.Mutex

	// destroy runs Destroy once; destroyE is its error.
	destroy  sync.Once
	destroyE error

	// mu guards waiters, nextID, killed, frozen and pauses, and dead is
	// closed under it.
	// An exec is added to execs under it, once killed is checked, so
	// that Destroy's wait counts every exec that started.
	mu sync.Mutex
	// waiters receive init's messages for one exec request id.
	waiters map[uint64]chan initReply
	nextID  uint64
	// dead is closed when the control channel ends (init gone).
	dead chan struct{}
	// killed is set once init has been sent SIGKILL: no exec may start.
	killed bool
	// frozen says the sandbox is paused (pause.go), since when and for
	// how long before in pauses.
	frozen bool
	pauses pauseClock
	// execs counts the execs in flight; Destroy waits for them.
	execs sync.WaitGroup
	// running counts the commands whose monitor runs, and watchOnce
	// starts watchSockets once a command left the sandbox running.
	running   atomic.Int32
	watchOnce sync.Once
}

// ID is the sandbox's identifier; it also names its cgroup.
func (s *Sandbox) ID() string { return s.id }

// Limits are the sandbox's ceilings: as built, or as lowered (Lower).
func (s *Sandbox) Limits() Limits { return s.ceilings() }

// InitPid is init's pid on the host.
func (s *Sandbox) InitPid() int { return s.pid }

// NetNS returns the sandbox's network namespace. The caller must not close
// it.
func (s *Sandbox) NetNS() *os.File { return s.netns }

// HostIDBase is the host uid (and gid) that uid 0 inside maps to.
func (s *Sandbox) HostIDBase() uint32 { return s.idBase }

// newID is a fresh random sandbox id. It reads the kernel's random source
// itself (crypto/rand's, and it never fails on Linux): crypto/rand would
// bring the crypto packages' initialisers into every airlock process.
func newID() string {
	var b [6]byte
	for {
		n, err := unix.Getrandom(b[:], 0)
		if err == unix.EINTR {
			continue
		}
		if err != nil || n != len(b) {
			panic(fmt.Sprintf("getrandom: %d bytes, %v", n, err))
		}
		break
	}
	return hex.EncodeToString(b[:])
}

// Create builds a sandbox and returns once its init is waiting for
// commands. On failure nothing of it remains.
func (rt *Runtime) Create(ctx context.Context, spec Spec) (*Sandbox, error) {
	s, err := rt.Start(ctx, spec)
	if err != nil {
		return nil, err
	}
	if err := s.awaitStart(ctx); err != nil {
		err = errors.Join(err, s.teardown(context.WithoutCancel(ctx)))
		rt.observe(Lifecycle{Event: Destroyed, ID: s.id, Label: s.label, Err: err})
		return nil, err
	}
	return s, nil
}

// Start is Create without the wait for init to be ready: it returns once
// init is starting, its setup sent. A command given to Exec meanwhile is
// queued to init, which starts it the moment it is ready, with no round
// trip between the two; Exec waits for ready itself and reports a setup
// that failed as its result's error (the sandbox is then dead, and
// Destroy still removes it). The one-shot paths use it: airlock run
// creates, runs one command and destroys.
func (rt *Runtime) Start(ctx context.Context, spec Spec) (_ *Sandbox, err error) {
	l := spec.Limits
	if err := l.Validate(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if err := ValidIsolation(spec.Isolation); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	gvisorBackend := spec.Isolation == IsolationGVisor
	if gvisorBackend {
		if err := checkGVisorSpec(&spec); err != nil {
			return nil, err
		}
		if _, err := rt.runsc(); err != nil {
			return nil, fmt.Errorf("isolation %s: %w", IsolationGVisor, err)
		}
	}
	mounts, err := mountBinds(spec.Mounts)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if err := checkVolumes(spec.Volumes, spec.Mounts); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if err := spec.Image.validate(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if err := spec.Seed.validate(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if spec.Seed != nil && !rt.Seeds() {
		return nil, fmt.Errorf("%w: this kernel's tmpfs holds no user.* attributes (Linux 6.6 does), which a seed's overlays need", ErrInvalid)
	}
	if err := spec.User.validate(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if spec.Hostname == "" {
		spec.Hostname = "sandbox"
	}
	if err := validHostname(spec.Hostname); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if err := rt.opts.Budget.Fits(l); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	// The ceilings are reserved first, and given back at the end of the
	// teardown, when all they bound is gone.
	if err := rt.ledger.take(l); err != nil {
		return nil, err
	}
	share := socketShare(l.Memory, rt.sockBudget, rt.sockets)
	cl := cgroup.Limits{MemoryBytes: l.Memory, SocketBytes: share, Pids: l.Pids, CPUMilli: l.CPUMilli}
	var prep *preparedGroup
	if rt.groups != nil {
		prep = rt.groups.take(cl)
	}
	id := newID()
	if prep != nil {
		id = prep.id
	}
	s := &Sandbox{
		id:      id,
		label:   spec.Label,
		rt:      rt,
		limits:  l,
		unheld:  share / unheldDiv,
		exited:  make(chan struct{}),
		gone:    make(chan struct{}),
		waiters: make(map[uint64]chan initReply),
		dead:    make(chan struct{}),
		scratch: -1,
		upper:   -1,
		booked:  true,
		rootRW:  spec.Image != nil && spec.Image.Writable,
		// The volumes' own slice: the caller's spec is not the sandbox's.
		volumeSpec: slices.Clone(spec.Volumes),
	}
	if rt.cg.Version() == cgroup.V2 {
		// v1 holds a sandbox's socket buffers to its share itself
		// (memory.kmem.tcp); on v2 only the readings do.
		s.allSockets = share
	}
	// Anything built so far is torn down if a later step fails.
	defer func() {
		if err != nil {
			err = errors.Join(err, s.teardown(context.WithoutCancel(ctx)))
		}
	}()
	// The lock file exists before the cgroup, so a sweeping process never
	// mistakes a sandbox being built for a leftover. A group made ahead
	// comes with both.
	if prep != nil {
		s.lock, s.group = prep.lock, prep.group
	} else if s.lock, err = claimNew(rt.lockDir + "/" + s.id); err != nil || s.lock == nil {
		return nil, errors.Join(errors.New("claim sandbox id"), err)
	}
	if s.ids, err = allocIDRange(rt.opts.IDLockDir, rt.opts.UIDBase, rt.opts.UIDSlots, &rt.idSlots); err != nil {
		return nil, err
	}
	s.idBase = s.ids.base
	if s.group == nil {
		if s.group, err = rt.cg.Create(s.id, cl); err != nil {
			return nil, err
		}
	}
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("control socket: %w", err)
	}
	initEnd := os.NewFile(uintptr(pair[1]), "ctrl-init")
	// handed says a one-command gVisor sandbox's launch holds initEnd
	// and logW, for a start with init (see Spec.OneCommand).
	handed := false
	defer func() {
		if !handed {
			initEnd.Close()
		}
	}()
	if s.conn, err = initproto.NewConn(pair[0]); err != nil {
		return nil, fmt.Errorf("control socket: %w", err)
	}
	logR, logW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer func() {
		if !handed {
			logW.Close()
		}
	}()
	s.initLog = logR

	if gvisorBackend && spec.OneCommand {
		// Built, but for its runsc: that starts with the command, or
		// with init (gvisor_direct.go), which then holds these ends.
		l, err := s.prepareGVisor(spec, spec.Mounts)
		if err != nil {
			return nil, err
		}
		l.ctrl, l.log, handed = initEnd, logW, true
		s.gv.launch, s.gv.launched = l, make(chan struct{})
		return rt.started(ctx, s, spec, nil, nil)
	}
	if gvisorBackend {
		if err := s.startGVisor(initEnd, logW, spec, spec.Mounts); err != nil {
			return nil, err
		}
		return rt.started(ctx, s, spec, initEnd, logW)
	}
	// The sandbox is built, and init confined, by a program its clone
	// runs before it execs init (see sbinit.Program).
	b, err := rt.base()
	if err != nil {
		return nil, err
	}
	prog, err := rt.programs.get(rt.setup(s, spec, mounts, b))
	if err != nil {
		return nil, fmt.Errorf("sandbox setup: %w", err)
	}
	var progFiles []int
	if spec.Image != nil {
		m, err := s.mountImage(spec.Image)
		if err != nil {
			return nil, err
		}
		defer m.Close()
		progFiles = []int{int(m.Fd())}
	}
	for _, v := range spec.Volumes {
		m, err := s.mountVolume(v)
		if err != nil {
			return nil, err
		}
		defer m.Close()
		progFiles = append(progFiles, int(m.Fd()))
	}
	if spec.Seed != nil {
		m, err := s.mountSeed(spec.Seed)
		if err != nil {
			return nil, err
		}
		defer m.Close()
		progFiles = append(progFiles, int(m.Fd()))
	}
	if err := s.start(initEnd, logW, prog, progFiles); err != nil {
		return nil, err
	}
	return rt.started(ctx, s, spec, initEnd, logW)
}

// started is the end of Start, for both backends, once init (or runsc)
// runs.
func (rt *Runtime) started(ctx context.Context, s *Sandbox, spec Spec, initEnd, logW *os.File) (*Sandbox, error) {
	// Init holds its own ends now. Without the host's copies, an init that
	// dies before it is ready is an end of file at once, not a wait for
	// the ready timeout. A one-command gVisor sandbox's runsc has not
	// started (nil): its launch holds them, and reaps runsc.
	if initEnd != nil {
		initEnd.Close()
		logW.Close()
		go s.watchExit()
	}
	rt.sweepSoon(ctx)
	// While the sandbox is built and init starts: the counter files, so
	// that a command's first reading of them is no opens.
	if err := s.group.OpenCounters(); err != nil {
		return nil, err
	}
	if spec.OnStart != nil {
		if err := spec.OnStart(s); err != nil {
			return nil, err
		}
	}
	// Created once init's clone runs: a setup that fails later ends it
	// with Destroyed, as any other end does.
	rt.observe(Lifecycle{Event: Created, ID: s.id, Label: s.label})
	return s, nil
}

// AwaitStart waits for a started sandbox's init to be ready (and its
// mounts made): what the host puts in it before the first command (a
// Spec.OnStart's binding) waits for it. Its error is the start's.
func (s *Sandbox) AwaitStart(ctx context.Context) error { return s.awaitStart(ctx) }

// awaitStart waits, once, for init to be ready, and then makes the
// sandbox usable. Its error ends the sandbox (killed; Destroy removes it).
func (s *Sandbox) awaitStart(ctx context.Context) error {
	if err := s.awaitLaunch(ctx); err != nil {
		return err
	}
	s.ready.Do(func() {
		s.readyErr = s.finishStart(ctx)
		if s.readyErr != nil {
			s.kill()
		}
	})
	return s.readyErr
}

func (s *Sandbox) finishStart(ctx context.Context) error {
	// Ready comes through the runtime's poller. Only then is it asked how
	// the clone's program and exec went: by then they are over (init said
	// ready, or the channel ended), so that read waits for nothing, where
	// asking first would hold a thread in a blocking read while the
	// sandbox is built. An op that failed is the reason init never said
	// ready, and the error.
	direct := s.gv != nil && s.gv.direct
	var err error
	if !direct {
		// A one-command gVisor sandbox's command has no init to say
		// ready: its runsc's clone has made its mounts.
		err = s.awaitReady(ctx)
	}
	if err != nil {
		s.kill() // a program still running, say: its end is then at hand
	}
	if xerr := s.initExecd(); xerr != nil {
		return xerr
	}
	if err != nil {
		return err
	}
	// Open the scratch tmpfs through init's root before any command runs,
	// so the host's disk readings never follow a path the sandbox controls.
	// A one-command gVisor sandbox's was opened as its runsc started
	// (startDirect); if that failed and runsc has exited since, its
	// command is over and there is no disk left to read.
	if s.scratch < 0 {
		fd, err := unix.Open(s.hostDir(""), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
		switch {
		case err == nil:
			s.scratch = fd
		case direct && s.exitsWithin(time.Second):
		case s.gv != nil:
			return fmt.Errorf("open sandbox scratch: %w%s", err, s.initDiagnostics())
		default:
			return fmt.Errorf("open sandbox scratch: %w", err)
		}
	}
	if s.rootRW {
		if s.upper, err = s.openUpper(); err != nil {
			return err
		}
	}
	if err := s.openVolumes(s.volumeSpec); err != nil {
		return err
	}
	// Sample, which airlock ps calls at any time, reads scratch and
	// the volumes only once they are set.
	s.opened.Store(true)
	if direct {
		go s.waitDirect()
	} else {
		go s.readLoop()
	}
	return nil
}

// start clones init into its namespaces and cgroup (or has the spawner do
// it), its clone running prog (with progFiles) before it execs init.
func (s *Sandbox) start(ctrl, log *os.File, prog *forkexec.Prog, progFiles []int) error {
	var err error
	if s.netns, err = s.rt.nets.take(); err != nil {
		return fmt.Errorf("network namespace: %w", err)
	}
	fds := []int{int(ctrl.Fd()), int(log.Fd()), int(s.netns.Fd())}
	path := s.rt.opts.InitPath
	if s.rt.hostNet == nil {
		// The spawner is the init program: it execs its own file.
		path = selfPath
	}
	req := spawner.Request{
		Path: path,
		Arg0: sbinit.Arg0,
		// Init's environment is not the commands' (each exec request
		// carries its own). It holds Go runtime settings that make
		// init's start cheaper (see initEnv).
		Env:       s.rt.initEnv,
		IDBase:    int(s.ids.base),
		IDSize:    idRangeSize,
		Prog:      prog,
		ProgFiles: progFiles,
	}
	place := spawner.Placement{DirFD: -1, Exe: s.rt.initFile}
	if s.group.Version() == cgroup.V2 {
		fd, err := s.group.DirFD()
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		fds = append(fds, fd)
		req.CgroupDir = true
		place.DirFD = fd
	} else {
		// v1: the clone writes itself into the group's tasks files
		// before anything else; the host's thread never visits it.
		tasks, err := s.group.TasksFDs()
		if err != nil {
			return err
		}
		defer closeFDs(tasks)
		if s.rt.hostNet == nil {
			fds = append(fds, tasks...)
		} else {
			place.Tasks = tasks
		}
	}
	if s.rt.hostNet == nil {
		// The program's files travel last.
		fds = append(fds, progFiles...)
		pid, pidfd, err := s.rt.spawner.spawn(req, fds)
		if err != nil {
			return fmt.Errorf("start sandbox init: %w", err)
		}
		s.pid, s.pidfd = pid, pidfd
		return nil
	}
	// On a goroutine of its own: should Clone fail to bring its thread
	// back from the sandbox's namespace or cgroup, it leaves the thread
	// locked, and the goroutine's end then retires the thread.
	type cloned struct {
		pid, fd int
		execd   func() error
		ok      bool
		err     error
	}
	ch := make(chan cloned, 1)
	go func() {
		var c cloned
		c.pid, c.fd, c.execd, c.ok, c.err = spawner.CloneLater(int(s.rt.hostNet.Fd()), &req, fds[0], fds[1], fds[2], place, false)
		ch <- c
	}()
	c := <-ch
	pid, fd, err := c.pid, c.fd, c.err
	if !c.ok {
		s.rt.opts.Logger.Error("clone thread could not be restored; retired it", "err", err)
	}
	if err != nil {
		return fmt.Errorf("start sandbox init: %w", err)
	}
	// Init's exec goes on alongside the rest of Create, which asks how it
	// went (execd) before it waits for ready.
	s.execd = c.execd
	pidfd, err := pidFile(fd)
	if err != nil {
		// No pidfd to kill it by: its pid is still its own, since
		// only this process can reap it.
		_ = unix.Kill(pid, unix.SIGKILL)
		err = errors.Join(err, s.initExecd())
		var ws unix.WaitStatus
		_, _ = unix.Wait4(pid, &ws, 0, nil)
		return err
	}
	s.pid, s.pidfd = pid, pidfd
	return nil
}

// initExecd returns how the clone's program and init's exec went, once
// they are over (the first caller waits, the others get the same answer);
// nil when init was started by the spawner, which waited.
func (s *Sandbox) initExecd() error {
	s.execdOnce.Do(func() {
		if s.execd == nil {
			return
		}
		if err := s.execd(); err != nil {
			var fe *forkexec.Error
			if errors.As(err, &fe) && fe.Step == "setup" {
				s.execdErr = fmt.Errorf("sandbox setup: %w", err)
			} else {
				s.execdErr = fmt.Errorf("start sandbox init: %w", err)
			}
		}
	})
	return s.execdErr
}

// watchExit reaps init and then closes s.exited. Init is the host's child
// (the spawner clones it with CLONE_PARENT); its pidfd becomes readable
// when it has exited, which is after the kernel has killed everything else
// in its pid namespace, and waitid on the pidfd reaps exactly it.
func (s *Sandbox) watchExit() {
	defer close(s.exited)
	reap := func(fd uintptr) bool {
		// With WNOHANG and nothing to reap, waitid leaves si_signo 0.
		var info unix.Siginfo
		err := unix.Waitid(unix.P_PIDFD, int(fd), &info, unix.WEXITED|unix.WNOHANG, nil)
		return err != unix.EINTR && (err != nil || info.Signo == int32(unix.SIGCHLD))
	}
	rc, err := s.pidfd.SyscallConn()
	if err == nil {
		err = rc.Read(reap)
	}
	if err == nil || rc == nil {
		return
	}
	// Not pollable through the runtime: wait on a thread instead.
	_ = rc.Control(func(fd uintptr) {
		var info unix.Siginfo
		for unix.Waitid(unix.P_PIDFD, int(fd), &info, unix.WEXITED, nil) == unix.EINTR {
		}
	})
}

func (rt *Runtime) setup(s *Sandbox, spec Spec, mounts []sbinit.Bind, b hostBase) *sbinit.Setup {
	l := s.limits
	c := &sbinit.Setup{
		RootDir:    rt.rootDir,
		ScratchDir: rt.scratchDir,
		Hostname:   spec.Hostname,
		UID:        sandboxUID,
		GID:        sandboxGID,
		DiskBytes:  l.Disk,
		DiskInodes: l.inodes(),
		Binds:      append(slices.Clip(b.image.binds), mounts...),
		Volumes:    volumeTargets(spec.Volumes),
		Seed:       spec.Seed != nil,
		Symlinks:   b.image.symlinks,
		Files:      etcFiles(spec.Hostname, spec.User),
		Devices:    b.image.devices,
		Rlimits: []sbinit.Rlimit{
			{Resource: unix.RLIMIT_NOFILE, Cur: uint64(l.FDs), Max: uint64(l.FDs)},
			{Resource: unix.RLIMIT_CORE, Cur: 0, Max: 0},
			// Locked memory is charged outside the cgroup's reach.
			{Resource: unix.RLIMIT_MEMLOCK, Cur: 64 << 10, Max: 64 << 10},
		},
		Workdir:    HomeDir,
		Seccomp:    b.seccomp,
		NoSeccomp:  spec.NoSeccomp,
		NoLandlock: spec.NoLandlock,
	}
	if spec.User != nil {
		c.UID, c.GID = int(spec.User.UID), int(spec.User.GID)
	}
	// Init's own real and saved uid: the last of the range, or the one
	// before when the commands run as that (see sbinit.Setup).
	c.InitUID = idRangeSize - 1
	if c.UID == c.InitUID {
		c.InitUID--
	}
	if spec.Image != nil {
		// The image brings its own system directories (and loader cache
		// and certificates); only the caller's mounts are bound. Of /etc,
		// airlock controls only what names the network (hosts, hostname,
		// resolv.conf); the image's users and groups stay its own.
		c.Binds, c.Symlinks = mounts, nil
		c.Files = slices.DeleteFunc(c.Files, func(f sbinit.File) bool { return !imageEtc[f.Path] })
		c.Image = &sbinit.ImageRoot{Writable: spec.Image.Writable}
	}
	return c
}

func (s *Sandbox) awaitReady(ctx context.Context) error {
	// The control channel's own deadline bounds the wait, and ctx's end
	// moves it to now: no goroutine or timer of its own.
	deadline := time.Now().Add(readyTimeout)
	if err := s.conn.SetReadDeadline(deadline); err != nil {
		return fmt.Errorf("sandbox init: %w", err)
	}
	stop := context.AfterFunc(ctx, func() { _ = s.conn.SetReadDeadline(time.Unix(1, 0)) })
	m, f, err := s.conn.Recv()
	if f != nil {
		f.Close()
		err = errors.Join(err, errors.New("a descriptor before ready"))
	}
	if !stop() {
		// ctx ended, and its deadline may land at any moment: the
		// sandbox is not handed out (the caller tears it down).
		return context.Cause(ctx)
	}
	if derr := s.conn.SetReadDeadline(time.Time{}); err == nil && derr != nil {
		err = derr
	}
	switch {
	case errors.Is(err, os.ErrDeadlineExceeded):
		return fmt.Errorf("sandbox init not ready after %v", readyTimeout)
	case err != nil:
		return fmt.Errorf("sandbox init: %w%s", err, s.initDiagnostics())
	case m.Kind == initproto.KindFail:
		return fmt.Errorf("sandbox init: %s", m.Error)
	case m.Kind != initproto.KindReady:
		return fmt.Errorf("sandbox init: unexpected %q before ready", m.Kind)
	}
	return nil
}

// initDiagnostics returns what init printed before failing (a Go panic, for
// instance), for airlock's own error message.
func (s *Sandbox) initDiagnostics() string {
	s.kill()
	select {
	case <-s.exited:
	case <-time.After(time.Second):
	}
	_ = s.initLog.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	b := make([]byte, 2048)
	n, _ := s.initLog.Read(b)
	if n == 0 {
		return ""
	}
	return ": init said: " + string(b[:n])
}

// Done is closed when the sandbox's init has exited: the sandbox can run
// nothing more and only Destroy remains.
func (s *Sandbox) Done() <-chan struct{} { return s.exited }

// Destroyed is closed when Destroy has finished: the sandbox is gone, and
// so is the work of its teardown.
func (s *Sandbox) Destroyed() <-chan struct{} { return s.gone }

// OpenWorkspace opens the sandbox's /workspace, as init sees it, with
// O_PATH: a starting point for reading and writing files below it from
// the host (see internal/linux/inroot). The caller closes it.
//
// Init's pid is only a number: once init has exited and been reaped, the
// kernel may give it to another process, another sandbox's init among
// them, and /proc/PID/root would then be that one's root. So the open
// counts as an exec (Destroy's teardown, which closes the pidfd, waits
// for it; a sandbox being destroyed is ErrDead), and after the open the
// pidfd, which names this init whatever became of its number, must
// still reach a process: if it does, init had not been reaped when the
// path was opened, so the number was still its own. A descriptor
// opened while init lived stays that sandbox's workspace (or nothing
// anyone else can see, once it is gone).
func (s *Sandbox) OpenWorkspace() (*os.File, error) { return s.OpenDir(HomeDir) }

// ScratchDirs are the sandbox's own writable directories, each a mount of
// its disk tmpfs that nothing of the image's or the host's lies below:
// the directories OpenDir opens, and "/" of a sandbox whose root is
// writable (WritableRoot).
var ScratchDirs = []string{HomeDir, "/tmp"}

// WritableRoot reports whether the sandbox's root is writable (an image
// with an upper layer on its disk tmpfs).
func (s *Sandbox) WritableRoot() bool { return s.rootRW }

// OpenDir is OpenWorkspace for dir, one of ScratchDirs, or "/" when the
// root is writable. Below "/", the other mounts (the workspace, /tmp,
// /proc, /dev) are not reached from it: inroot does not cross mounts.
//
// dir may also be where a volume is attached (VolumeDirs): that is the
// volume's root, opened at create before any command ran, so nothing the
// sandbox has done since (a symlink or a rename above the target) can
// lead the host elsewhere.
func (s *Sandbox) OpenDir(dir string) (*os.File, error) {
	if slices.Contains(s.VolumeDirs(), dir) {
		return s.openVolume(dir)
	}
	if !slices.Contains(ScratchDirs, dir) && (dir != "/" || !s.rootRW) {
		return nil, fmt.Errorf("sandbox %s: open %s: not one of its own directories (%s)", s.id, dir, strings.Join(ScratchDirs, ", "))
	}
	return s.openIn(dir)
}

// OpenRoot opens the sandbox's root directory (O_PATH), writable or not,
// to look things up in it: the host's file calls write only below
// OpenDir's directories, but describing a file reads what the sandbox
// itself could (its /etc/passwd, where a symlink leads). Each lookup
// below it must stay inside it (inroot's RESOLVE_IN_ROOT calls).
func (s *Sandbox) OpenRoot() (*os.File, error) { return s.openIn("/") }

// openIn opens dir of the sandbox (O_PATH) while its init lives.
func (s *Sandbox) openIn(dir string) (*os.File, error) {
	s.mu.Lock()
	if s.killed || s.pidfd == nil {
		s.mu.Unlock()
		return nil, fmt.Errorf("sandbox %s: open %s: %w", s.id, dir, ErrDead)
	}
	s.execs.Add(1)
	pidfd := s.pidfd
	s.mu.Unlock()
	defer s.execs.Done()
	in := dir
	if dir == "/" {
		// The root itself: its final element "." (root is a link,
		// which O_NOFOLLOW would open as one).
		in = "/."
	}
	fd, err := unix.Open(s.hostDir(in), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	if err != nil {
		return nil, fmt.Errorf("sandbox %s: open %s: %w", s.id, dir, err)
	}
	if !initLives(pidfd) {
		unix.Close(fd)
		return nil, fmt.Errorf("sandbox %s: open %s: %w", s.id, dir, ErrDead)
	}
	return os.NewFile(uintptr(fd), dir), nil
}

// initLives says whether init has not been reaped yet: a signal 0 through
// its pidfd reaches it until then (a zombie included, whose pid is not
// free yet). The caller counts as an exec, so the pidfd is open (a
// closed one answers false).
func initLives(pidfd *os.File) bool {
	rc, err := pidfd.SyscallConn()
	if err != nil {
		return false
	}
	lives := false
	_ = rc.Control(func(fd uintptr) {
		lives = unix.PidfdSendSignal(int(fd), 0, nil, 0) == nil
	})
	return lives
}

// UserHostID is the host uid (and gid) of the user commands run as.
func (s *Sandbox) UserHostID() int { return int(s.idBase) + sandboxUID }

func closeFDs(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}
