package sbinit

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/airlockhq/airlock/internal/initproto"
	"github.com/airlockhq/airlock/internal/linux/forkexec"
	"golang.org/x/sys/unix"
)

// Arg0 is the argv[0] the host gives init; the binary's entry point checks it
// before doing anything else.
const Arg0 = "airlock-init"

// CommandTimerSlack is the timer slack, in nanoseconds, of every command:
// the kernel's default for a process nobody changed it for.
const CommandTimerSlack = 50_000

// ctrlFD is where the host places init's end of the control socket.
const ctrlFD = 3

// IsInit reports whether this process was started as a sandbox init, of
// either backend.
func IsInit() bool {
	return len(os.Args) == 1 && (os.Args[0] == Arg0 || os.Args[0] == GVisorPath)
}

// Main runs init and returns its exit code. It never returns while the
// sandbox is in use: it exits when the host closes the control channel.
// It locks the calling goroutine to its thread first; a program that calls
// it from a package initialiser uses MainOnStartupThread instead.
func Main() int {
	// Every command is forked from this thread, which carries the
	// per-thread parts of the confinement (capabilities, no_new_privs,
	// Landlock) that children inherit.
	runtime.LockOSThread()
	return run(false)
}

// MainOnStartupThread is Main for a caller that runs in a package
// initialiser of its main package (cmd/airlock-init). Initialisers run on
// the process's startup thread, with the goroutine locked to it until main
// (the runtime documents this under LockOSThread), which is all init needs
// of the thread. Main's own LockOSThread would start the runtime's
// template thread: one more thread for each of init's all-thread calls to
// signal and wait for, and for the sandbox's end to tear down.
func MainOnStartupThread() int { return run(true) }

// run is init; startup says it runs in a package initialiser. The sandbox
// is built and init confined before its exec (see Program): what is left
// is what exec undid or the program could not do for every thread.
func run(startup bool) int {
	gvisor := os.Args[0] == GVisorPath
	// Init was born with a large timer slack, for the Go runtime's own
	// threads (see spawner.InitTimerSlack). This thread starts every
	// command, and a command inherits its slack: it goes back to the
	// kernel's default. gVisor has no timer slack (EINVAL).
	if !gvisor {
		if err := unix.Prctl(unix.PR_SET_TIMERSLACK, CommandTimerSlack, 0, 0, 0); err != nil {
			return 2
		}
	}
	if gvisor {
		// Under gVisor nothing ran before init's exec: it confines
		// itself to where the namespace backend's program leaves it.
		if err := confineInGVisor(os.Getenv(GVisorIDsEnv)); err != nil {
			fail(err)
			return 2
		}
	}
	// No os/signal here: commands cannot signal init at all (see below),
	// and subscribing to signals costs a handshake with the runtime's
	// signal thread per signal, milliseconds of every sandbox's start.
	syscall.CloseOnExec(ctrlFD)
	// Blocking, and no Go poller: init waits on this locked thread alone
	// (see server.serve), so a message from the host wakes the thread that
	// handles it, with no poller thread handing over to it.
	if err := syscall.SetNonblock(ctrlFD, false); err != nil {
		return 2
	}
	// The program left init a real and saved uid of its own and the
	// commands' uid as its effective one; exec made the saved uid the
	// effective one. Setting it back on every thread (the Go runtime's
	// all-thread call) makes a command's ids match none of init's real
	// and saved ones again, so the kernel refuses any signal a command
	// sends init (see Program).
	ruid, euid, _ := unix.Getresuid()
	if ruid == euid {
		fail(fmt.Errorf("init runs with uid %d as its real and effective one: it was not confined before its exec", ruid))
		return 2
	}
	// Under gVisor, confineInGVisor left the ids so and checked
	// no_new_privs, which runsc sets: no more all-thread calls.
	if !gvisor {
		if err := confineAfterExec(ruid); err != nil {
			fail(err)
			return 2
		}
	}
	// The exec left no capabilities (see confine); a kernel or a setup
	// that did otherwise ends the sandbox here.
	if err := noCapabilities(); err != nil {
		fail(err)
		return 2
	}
	// Not dumpable (exec resets it): a command running as the same uid
	// cannot ptrace init, read /proc/1/mem or /proc/1/environ, or open
	// /proc/1/fd/3 to talk to the host over init's control channel.
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		fail(fmt.Errorf("dumpable: %w", err))
		return 2
	}
	if err := initproto.Send(ctrlFD, &initproto.Message{Kind: initproto.KindReady}, nil); err != nil {
		return 2
	}
	s := &server{cmds: make(map[int]command), uid: euid, startup: startup, master: -1, gvisor: gvisor, relays: map[uint64]*relay{}}
	if gvisor {
		s.fds = newFDWatch()
	}
	return s.serve(make([]byte, initproto.MaxMessage))
}

// confineAfterExec sets again, on every thread, what init's exec undid
// (the saved uid, see run) or the program could not do for every thread
// (no_new_privs), for the namespace backend.
func confineAfterExec(ruid int) error {
	// The all-thread calls signal each of init's other threads and spin
	// on sched_yield until every one has run its part; a thread waiting
	// for another processor costs hundreds of yields. On one processor
	// with this thread, each runs the moment this one yields.
	restore, pinned := onThisCPU()
	if err := syscall.Setresuid(-1, -1, ruid); err != nil {
		return fmt.Errorf("setresuid: %w", err)
	}
	// no_new_privs, on every thread, before any command exists: the
	// program could not set it before the exec (see confine in
	// build.go). Every command is started from this thread and inherits
	// it; the other threads have it too, so none could ever exec around
	// it. A binary linked with cgo (a test binary under the race
	// detector, serving as its own init) cannot make all-thread calls:
	// there it is set on this thread, the one every command is forked
	// from.
	_, _, errno := syscall.AllThreadsSyscall(unix.SYS_PRCTL, unix.PR_SET_NO_NEW_PRIVS, 1, 0)
	if errno == syscall.ENOTSUP {
		_, _, errno = syscall.RawSyscall(unix.SYS_PRCTL, unix.PR_SET_NO_NEW_PRIVS, 1, 0)
	}
	if errno != 0 {
		return fmt.Errorf("no_new_privs: %w", errno)
	}
	// Commands are forked from this thread and inherit its processors:
	// all it had again. The other threads stay on the one.
	if pinned {
		if err := unix.SchedSetaffinity(0, &restore); err != nil {
			return fmt.Errorf("restoring init's processors: %w", err)
		}
	}
	return nil
}

// onThisCPU puts each of init's threads on the processor this one runs
// on, and returns the processors this thread is to have back after the
// all-thread calls and whether it is to get them. Init is normally born on
// one processor (its clone pins it before the exec), so every thread the
// Go runtime started is there already and the processors to give back are
// the host's (CPUsEnv); otherwise each thread is moved. It is best effort:
// a thread it misses, or a call that fails, only makes the all-thread
// calls slower.
func onThisCPU() (had unix.CPUSet, pinned bool) {
	if err := unix.SchedGetaffinity(0, &had); err != nil {
		return had, false
	}
	if had.Count() == 1 {
		// Born on one processor (the clone pinned it, see
		// spawner.CloneLater): every thread is there already. This one
		// gets the host's processors back after the calls.
		if host, ok := parseCPUs(os.Getenv(CPUsEnv)); ok {
			return host, true
		}
		// No word from the host: every processor this cgroup allows
		// (the kernel keeps the ones it does not).
		for i := range len(had) * 64 {
			had.Set(i)
		}
		return had, true
	}
	cpu, errno := getcpu()
	if errno != 0 {
		return had, false
	}
	var one unix.CPUSet
	one.Set(int(cpu))
	if err := unix.SchedSetaffinity(0, &one); err != nil {
		return had, false
	}
	f, err := os.Open("/proc/self/task")
	if err != nil {
		return had, true
	}
	names, _ := f.Readdirnames(-1)
	f.Close()
	self := unix.Gettid()
	for _, n := range names {
		if tid, err := strconv.Atoi(n); err == nil && tid != self {
			_ = unix.SchedSetaffinity(tid, &one)
		}
	}
	return had, true
}

// CPUsEnv names the variable of init's environment that holds the
// processors the host runs on (FormatCPUs), which init's own thread, the
// one commands are started from, gets back after the clone pinned init to
// one.
const CPUsEnv = "AIRLOCK_CPUS"

// FormatCPUs writes a CPU set as CPUsEnv holds it: its 64-bit words in
// hex, lowest first, comma-separated, up to the last that is not zero.
func FormatCPUs(set *unix.CPUSet) string {
	var b []byte
	last := 0
	for i := 0; i < len(set)*64; i++ {
		if set.IsSet(i) {
			last = i / 64
		}
	}
	for w := 0; w <= last; w++ {
		var word uint64
		for bit := 0; bit < 64; bit++ {
			if set.IsSet(w*64 + bit) {
				word |= 1 << bit
			}
		}
		if w > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendUint(b, word, 16)
	}
	return string(b)
}

// parseCPUs reads what FormatCPUs wrote; a set with no processor is not
// one.
func parseCPUs(s string) (unix.CPUSet, bool) {
	var set unix.CPUSet
	if s == "" {
		return set, false
	}
	for w, part := range strings.Split(s, ",") {
		word, err := strconv.ParseUint(part, 16, 64)
		if err != nil || w >= len(set) {
			return set, false
		}
		for bit := 0; bit < 64; bit++ {
			if word&(1<<bit) != 0 {
				set.Set(w*64 + bit)
			}
		}
	}
	return set, set.Count() > 0
}

// noCapabilities returns an error when this thread holds any capability:
// effective, permitted or inheritable (an ambient one is both permitted
// and inheritable, so none is left either).
func noCapabilities() error {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return fmt.Errorf("capget: %w", err)
	}
	for _, d := range data {
		if d.Effective|d.Permitted|d.Inheritable != 0 {
			return fmt.Errorf("init holds capabilities after its exec (%+v): it was not confined before its exec", data)
		}
	}
	return nil
}

func fail(err error) {
	_ = initproto.Send(ctrlFD, &initproto.Message{Kind: initproto.KindFail, Error: err.Error()}, nil)
}

func closeFDs(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}

// server runs commands and reports their ends. It is one loop on init's
// locked main thread: no other goroutine of init's does anything, so no
// event waits for the Go scheduler to hand a processor from one thread to
// another (init has one), and each wake-up is the kernel's, straight to
// the thread that acts on it.
type server struct {
	// cmds maps the pid of a running command to its request and pidfd.
	// Other children (orphans re-parented to init) are reaped and ignored.
	cmds map[int]command
	// uid is the commands' uid: their real, effective and saved one.
	uid int
	// ep is the epoll set: the control socket and each command's pidfd.
	ep int
	// children is whether init had children at the last reap.
	children bool
	// startup is whether init runs in a package initialiser, on the
	// startup thread the runtime keeps it on (see MainOnStartupThread).
	startup bool
	// master is the terminal master of the command being started, or -1.
	master int
	// fds looks for a breach of the descriptor ceiling while commands
	// run, under gVisor (nil otherwise: the host looks itself).
	fds *fdWatch
	// gvisor is set under gVisor, where init relays terminals (see
	// relay); relays are those of commands not yet reaped, by id, and
	// relaying the one of the command being started.
	gvisor   bool
	relays   map[uint64]*relay
	relaying *relay
}

type command struct {
	id    uint64
	pidfd int
}

// orphanPoll bounds how long an orphan that has exited can wait to be
// reaped while init has children. Orphans are usually reaped at once: the
// kernel gives SIGCHLD to init's main thread first, which interrupts its
// wait (see serve); this covers a signal that went to another thread.
const orphanPoll = 100 // milliseconds

func (s *server) send(m *initproto.Message) error {
	return initproto.Send(ctrlFD, m, nil)
}

// serve handles the host's requests and the children's ends until the
// host closes the control channel. It waits in epoll_wait for the control
// socket and the pidfds of running commands; SIGCHLD, which Go's handler
// takes and ignores, makes that wait return EINTR, after which every child
// that has ended is reaped too.
func (s *server) serve(buf []byte) int {
	ep, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return 2
	}
	s.ep = ep
	if err := unix.EpollCtl(ep, unix.EPOLL_CTL_ADD, ctrlFD, &unix.EpollEvent{Events: unix.EPOLLIN, Fd: ctrlFD}); err != nil {
		return 2
	}
	var evs [8]unix.EpollEvent
	for {
		timeout := -1
		if s.children {
			timeout = orphanPoll
		}
		watch := s.fds != nil && len(s.cmds) > 0 && !s.fds.sent
		if watch {
			timeout = s.fds.wait(time.Now(), timeout)
		}
		n, err := unix.EpollWait(ep, evs[:], timeout)
		if err != nil && err != unix.EINTR {
			return 2
		}
		for _, ev := range evs[:max(n, 0)] {
			if ev.Fd == ctrlFD && !s.requests(buf) {
				// The host is gone or broken: exiting kills
				// everything in the sandbox, which is what the
				// host would do anyway.
				return 0
			}
		}
		s.reap()
		if watch {
			s.fds.look(time.Now())
		}
	}
}

// requests handles every message queued on the control socket and
// reports whether the channel is still open.
func (s *server) requests(buf []byte) bool {
	for {
		m, fds, err := initproto.RecvFD(ctrlFD, buf, true)
		if errors.Is(err, unix.EAGAIN) {
			return true
		}
		if err != nil {
			return false
		}
		switch m.Kind {
		case initproto.KindSignal:
			closeFDs(fds)
			s.signal(m.ID, m.Signal)
			continue
		case initproto.KindResize:
			closeFDs(fds)
			if r := s.relays[m.ID]; r != nil {
				r.resize(m.Rows, m.Cols)
			}
			continue
		}
		// Three descriptors, the command's stdin, stdout and stderr; none
		// for a command with a terminal, which init opens, but under
		// gVisor, where init relays the terminal through the three.
		relayed := s.gvisor && m.Exec != nil && m.Exec.TTY
		if m.Kind != initproto.KindExec || m.Exec == nil || len(fds) != 3 && !(m.Exec.TTY && !relayed && len(fds) == 0) || m.Exec.TTY && !relayed && len(fds) != 0 {
			closeFDs(fds)
			_ = s.send(&initproto.Message{Kind: initproto.KindExit, ID: m.ID, Errno: int(unix.EINVAL), Error: "malformed exec request"})
			continue
		}
		if !m.Exec.TTY {
			s.start(m.ID, m.Exec, fds, -1)
			closeFDs(fds)
			continue
		}
		master, slave, err := openPTY(m.Exec.Rows, m.Exec.Cols)
		if err != nil {
			closeFDs(fds)
			_ = s.send(&initproto.Message{Kind: initproto.KindExit, ID: m.ID, Errno: errnoOf(err), Error: initproto.PTYFailed + err.Error()})
			continue
		}
		if relayed {
			// The third pipe is not used: a terminal is one stream.
			unix.Close(fds[2])
			r, err := newRelay(master, fds[0], fds[1])
			if err != nil {
				unix.Close(slave)
				_ = s.send(&initproto.Message{Kind: initproto.KindExit, ID: m.ID, Errno: errnoOf(err), Error: initproto.PTYFailed + err.Error()})
				continue
			}
			s.relaying = r
			s.start(m.ID, m.Exec, []int{slave, slave, slave}, -1)
			s.relaying = nil
			unix.Close(slave)
			if _, started := s.running(m.ID); started {
				s.relays[m.ID] = r
			}
			// Also for a command that could not start: what init said
			// of it on the terminal reaches the host, before its exit.
			go r.run()
			continue
		}
		s.start(m.ID, m.Exec, []int{slave, slave, slave}, master)
		unix.Close(slave)
		unix.Close(master)
	}
}

// start starts one command on fds, its stdin, stdout and stderr. master,
// when not -1, is the master side of the terminal the three are: it goes
// to the host with the started message, or with the exit message of a
// command that could not start (which carries init's word on the
// terminal); init keeps no copy that matters (the caller closes its own).
func (s *server) start(id uint64, e *initproto.Exec, fds []int, master int) {
	s.master = master
	defer func() { s.master = -1 }()
	if len(e.Argv) == 0 {
		s.report(&initproto.Message{Kind: initproto.KindExit, ID: id, Errno: int(unix.EINVAL), Error: "empty command"})
		return
	}
	if fi, err := os.Stat(e.Dir); err != nil || !fi.IsDir() {
		msg := fmt.Sprintf("airlock: working directory %s: not a directory", e.Dir)
		if err != nil {
			msg = fmt.Sprintf("airlock: working directory %s: %v", e.Dir, errors.Unwrap(err))
		}
		_, _ = unix.Write(fds[2], []byte(msg+"\n"))
		s.report(&initproto.Message{Kind: initproto.KindExit, ID: id, Errno: int(unix.ENOTDIR), Error: msg})
		return
	}
	path, err := lookPath(e.Argv[0], e.Env)
	if err != nil {
		s.execFailed(id, e.Argv[0], err, fds[2])
		return
	}
	sp := forkexec.Spec{
		Path: path, Argv: e.Argv, Env: e.Env, Dir: e.Dir,
		Files:  []int{fds[0], fds[1], fds[2]},
		Setsid: true, Setctty: master >= 0 || s.relaying != nil,
		// All three uids the command's: it then shares none of init's
		// real and saved ones (see confine).
		UID: s.uid, GID: -1, CgroupFD: -1,
		ThreadLocked: s.startup,
	}
	c, err := forkexec.Start(sp)
	if err != nil {
		var fe *forkexec.Error
		if errors.As(err, &fe) {
			err = fe.Errno
		}
		s.execFailed(id, e.Argv[0], err, fds[2])
		return
	}
	// The pidfd turns readable when the command ends, which wakes serve.
	if err := unix.EpollCtl(s.ep, unix.EPOLL_CTL_ADD, c.PidFD, &unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(c.PidFD)}); err != nil {
		// Still reaped, on SIGCHLD or at the next poll.
		unix.Close(c.PidFD)
		c.PidFD = -1
	}
	if s.fds != nil {
		s.fds.started(time.Now(), len(s.cmds) > 0)
	}
	s.cmds[c.Pid] = command{id: id, pidfd: c.PidFD}
	s.children = true
	s.report(&initproto.Message{Kind: initproto.KindStarted, ID: id, Pid: c.Pid})
}

// report sends a command's started message, or its exit message when it
// could not start, with the terminal's master side if it has one.
func (s *server) report(m *initproto.Message) {
	if s.relaying != nil && m.Kind == initproto.KindExit {
		// After what the terminal shows (see relay.exited).
		s.relaying.exited(m)
		return
	}
	var fds []int
	if s.master >= 0 {
		fds = []int{s.master}
	}
	_ = initproto.Send(ctrlFD, m, fds)
}

// openPTY opens a pseudo-terminal of the sandbox's devpts instance (at
// most sbinit.PtyMax at once) of rows by cols, and returns its master and
// slave sides, both close-on-exec. The slave is opened through the master
// (TIOCGPTPEER), never by a path a command could have replaced.
func openPTY(rows, cols uint16) (master, slave int, err error) {
	master, err = unix.Open("/dev/ptmx", unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, -1, err
	}
	if err := unix.IoctlSetPointerInt(master, unix.TIOCSPTLCK, 0); err != nil {
		unix.Close(master)
		return -1, -1, fmt.Errorf("unlock: %w", err)
	}
	if err := unix.IoctlSetWinsize(master, unix.TIOCSWINSZ, &unix.Winsize{Row: rows, Col: cols}); err != nil {
		unix.Close(master)
		return -1, -1, fmt.Errorf("window size: %w", err)
	}
	fd, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(master), unix.TIOCGPTPEER, unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC)
	if errno != 0 {
		unix.Close(master)
		return -1, -1, fmt.Errorf("open its other side: %w", errno)
	}
	return master, int(fd), nil
}

func errnoOf(err error) int {
	var en syscall.Errno
	if errors.As(err, &en) {
		return int(en)
	}
	return int(unix.EINVAL)
}

// execFailed reports a command that could not be started, the way a shell
// would: a message on the command's stderr and errno for the host.
func (s *server) execFailed(id uint64, name string, err error, stderr int) {
	errno := unix.EINVAL
	var en syscall.Errno
	if errors.As(err, &en) {
		errno = unix.Errno(en)
	}
	msg := fmt.Sprintf("airlock: %s: %v\n", name, err)
	if errno == unix.ENOENT && !strings.Contains(name, "/") {
		msg = fmt.Sprintf("airlock: %s: command not found\n", name)
	}
	_, _ = unix.Write(stderr, []byte(msg))
	s.report(&initproto.Message{Kind: initproto.KindExit, ID: id, Errno: int(errno), Error: err.Error()})
}

// reap is init's duty as PID 1: collect every child that has exited
// (orphans re-parented to init included), report the commands, and
// discard the rest.
func (s *server) reap() {
	for {
		var ws unix.WaitStatus
		pid, err := unix.Wait4(-1, &ws, unix.WALL|unix.WNOHANG, nil)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			s.children = false // ECHILD: none left
			return
		}
		if pid == 0 {
			s.children = true // some still running
			return
		}
		c, ok := s.cmds[pid]
		if !ok {
			continue
		}
		delete(s.cmds, pid)
		if c.pidfd >= 0 {
			unix.Close(c.pidfd) // leaves the epoll set with it
		}
		m := &initproto.Message{Kind: initproto.KindExit, ID: c.id, Pid: pid, Status: int(ws)}
		if r := s.relays[c.id]; r != nil {
			// The command was its terminal's controlling process. Linux
			// signals SIGHUP to the terminal's foreground group when
			// such a process exits; gVisor does not, so init does, to
			// the command's own group (init, with no terminal of its
			// own, cannot ask for the foreground one; it is this one
			// unless the command ended with a job of its in front).
			_ = unix.Kill(-pid, unix.SIGHUP)
			// After what the terminal shows (see relay.exited).
			delete(s.relays, c.id)
			r.exited(m)
			continue
		}
		_ = s.send(m)
	}
}

// running returns the pid of the command with id, if it runs.
func (s *server) running(id uint64) (int, bool) {
	for pid, c := range s.cmds {
		if c.id == id {
			return pid, true
		}
	}
	return 0, false
}

// signal sends sig to the command with id and its process group (it is
// its session's leader, so the group is the command and whatever it
// started that did not leave it). A command that has ended, or a signal
// the kernel refuses, is ignored: the command's exit says the rest.
func (s *server) signal(id uint64, sig int) {
	if sig <= 0 {
		return
	}
	for pid, c := range s.cmds {
		if c.id == id {
			// Not reaped yet (it is still in cmds), so its pid, and the
			// group's id, are still its own.
			_ = unix.Kill(-pid, unix.Signal(sig))
			return
		}
	}
}
