package sbinit

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync"
	"syscall"

	"github.com/airlockhq/airlock/internal/initproto"
	"github.com/airlockhq/airlock/internal/linux/forkexec"
	"golang.org/x/sys/unix"
)

// Arg0 is the argv[0] the host gives init; the binary's entry point checks it
// before doing anything else.
const Arg0 = "airlock-init"

// ctrlFD is where the host places init's end of the control socket.
const ctrlFD = 3

// IsInit reports whether this process was started as a sandbox init.
func IsInit() bool { return len(os.Args) == 1 && os.Args[0] == Arg0 }

// Main runs init and returns its exit code. It never returns while the
// sandbox is in use: it exits when the host closes the control channel.
func Main() int {
	// Every command is forked from this thread, which carries the
	// per-thread parts of the confinement (capabilities, no_new_privs,
	// Landlock) that children inherit.
	runtime.LockOSThread()
	// The umask is inherited from whoever started airlock, and a strict
	// one (077) would make the generated /etc and the workspace unusable
	// to the sandbox's user; commands get the usual 022 too.
	unix.Umask(0o022)
	// Die with the host. What guarantees it is the control channel: the
	// host's end is held by the host alone, so its death is an EOF that
	// ends init (and with it the sandbox). The parent-death signal is a
	// backstop for the time before init reads: set here, not at clone
	// time, because the spawner clones init as the host's child.
	if err := unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(unix.SIGKILL), 0, 0, 0); err != nil {
		return 2
	}
	// No os/signal here: commands cannot signal init at all once it has
	// confined itself (see confine), and subscribing to signals costs a
	// handshake with the runtime's signal thread per signal, milliseconds
	// of every sandbox's start.
	syscall.CloseOnExec(ctrlFD)
	if err := syscall.SetNonblock(ctrlFD, true); err != nil {
		return 2
	}
	// Through the poller, waiting for the host costs no thread.
	ctrl, err := os.NewFile(ctrlFD, "ctrl").SyscallConn()
	if err != nil {
		return 2
	}
	buf := make([]byte, initproto.MaxMessage)
	m, fds, err := initproto.RecvRaw(ctrl, buf)
	if err != nil {
		if errors.Is(err, initproto.ErrVersion) {
			fail(err)
		}
		return 2
	}
	if m.Kind != initproto.KindSetup || m.Setup == nil {
		fail(fmt.Errorf("first message is %q, want setup", m.Kind))
		return 2
	}
	err = setup(m.Setup, fds)
	closeFDs(fds)
	if err != nil {
		fail(err)
		return 2
	}
	if err := confine(m.Setup); err != nil {
		fail(err)
		return 2
	}
	if err := initproto.Send(ctrlFD, &initproto.Message{Kind: initproto.KindReady}, nil); err != nil {
		return 2
	}
	s := &server{cmds: make(map[int]uint64), uid: m.Setup.UID, wake: make(chan struct{}, 1)}
	go s.reap()
	return s.serve(ctrl, buf)
}

func fail(err error) {
	_ = initproto.Send(ctrlFD, &initproto.Message{Kind: initproto.KindFail, Error: err.Error()}, nil)
}

func closeFDs(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}

// server runs commands and reports their ends.
type server struct {
	sendMu sync.Mutex

	mu sync.Mutex
	// cmds maps the pid of a running command to its request id. Other
	// children (orphans re-parented to init) are reaped and ignored.
	cmds map[int]uint64

	// uid is the commands' uid: their real, effective and saved one.
	uid int
	// wake tells the reaper that a child was started.
	wake chan struct{}
}

func (s *server) send(m *initproto.Message) error {
	s.sendMu.Lock()
	defer s.sendMu.Unlock()
	return initproto.Send(ctrlFD, m, nil)
}

func (s *server) serve(ctrl syscall.RawConn, buf []byte) int {
	for {
		m, fds, err := initproto.RecvRaw(ctrl, buf)
		if err != nil {
			// The host is gone or broken: exiting kills everything in
			// the sandbox, which is what the host would do anyway.
			return 0
		}
		if m.Kind != initproto.KindExec || m.Exec == nil || len(fds) != 3 {
			closeFDs(fds)
			_ = s.send(&initproto.Message{Kind: initproto.KindExit, ID: m.ID, Errno: int(unix.EINVAL), Error: "malformed exec request"})
			continue
		}
		s.start(m.ID, m.Exec, fds)
		closeFDs(fds)
	}
}

func (s *server) start(id uint64, e *initproto.Exec, fds []int) {
	if len(e.Argv) == 0 {
		_ = s.send(&initproto.Message{Kind: initproto.KindExit, ID: id, Errno: int(unix.EINVAL), Error: "empty command"})
		return
	}
	if fi, err := os.Stat(e.Dir); err != nil || !fi.IsDir() {
		msg := fmt.Sprintf("airlock: working directory %s: not a directory", e.Dir)
		if err != nil {
			msg = fmt.Sprintf("airlock: working directory %s: %v", e.Dir, errors.Unwrap(err))
		}
		_, _ = unix.Write(fds[2], []byte(msg+"\n"))
		_ = s.send(&initproto.Message{Kind: initproto.KindExit, ID: id, Errno: int(unix.ENOTDIR), Error: msg})
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
		Setsid: true,
		// All three uids the command's: it then shares none of init's
		// real and saved ones (see confine).
		UID: s.uid, GID: -1, CgroupFD: -1,
	}
	// Held across the fork, so the reaper cannot report the command's end
	// before it is in cmds.
	s.mu.Lock()
	c, err := forkexec.Start(sp)
	if err == nil {
		s.cmds[c.Pid] = id
		unix.Close(c.PidFD)
	}
	s.mu.Unlock()
	if err != nil {
		var fe *forkexec.Error
		if errors.As(err, &fe) {
			err = fe.Errno
		}
		s.execFailed(id, e.Argv[0], err, fds[2])
		return
	}
	select {
	case s.wake <- struct{}{}:
	default:
	}
	_ = s.send(&initproto.Message{Kind: initproto.KindStarted, ID: id, Pid: c.Pid})
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
	_ = s.send(&initproto.Message{Kind: initproto.KindExit, ID: id, Errno: int(errno), Error: err.Error()})
}

// reap is init's duty as PID 1: collect every child that exits (orphans
// re-parented to init included), report the commands, and discard the
// rest. It waits in wait4 while init has children, and on wake while it
// has none, so a sandbox that never ran anything keeps no thread waiting.
func (s *server) reap() {
	for range s.wake {
		for {
			var ws unix.WaitStatus
			pid, err := unix.Wait4(-1, &ws, unix.WALL, nil)
			if err == unix.EINTR {
				continue
			}
			if err != nil {
				break // ECHILD: nothing left until the next start
			}
			s.mu.Lock()
			id, ok := s.cmds[pid]
			delete(s.cmds, pid)
			s.mu.Unlock()
			if ok {
				_ = s.send(&initproto.Message{Kind: initproto.KindExit, ID: id, Pid: pid, Status: int(ws)})
			}
		}
	}
}
