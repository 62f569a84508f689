package sandbox

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlockhq/airlock/internal/gvisor"
	"github.com/airlockhq/airlock/internal/initproto"
)

// A gVisor sandbox made for one command (Spec.OneCommand) starts its
// runsc only when that command comes, and runs it as the container's
// first process, with no init: a gVisor guest is slow to start a process
// (about 11 ms for a fork, exec and wait of /bin/true on a 2-core VM),
// and init's own start is one more. The host then learns how the command
// ended from runsc's log (gvisor.ExitFromLog), and what init would have done
// around it is the guest kernel's or the host's:
//
//   - the ids, capabilities, no_new_privs and resource limits are the
//     bundle's, which runsc applies as it applies init's;
//   - the command is the first process of the guest's pid namespace:
//     when it ends, the guest kernel kills what it left, as init's
//     sandbox is killed when its command ends;
//   - a command that cannot start is reported as init reports it (126 or
//     127, and the shell's message on its standard error);
//   - the descriptor ceiling is the guest kernel's RLIMIT_NOFILE, as
//     with init, but no breach of it is named: only init, in the guest,
//     sees a process's descriptors (see sbinit's fdWatch).
//
// Anything that needs the sandbox before its command (AwaitStart, a
// request that is not a plain one-off: a terminal, a kept-alive or
// resident command, signals, a working directory the sandbox may lack),
// or a CPU-time ceiling, which is the command's own, starts it with init
// instead, as any other. A command's usage counts gVisor's start: its
// CPU time, and its wall time from runsc's start.

// directLog is the most of runsc's log read for a command's end.
const directLog = 64 << 10

// runscLog is the file a one-command sandbox's runsc writes its output
// and its run command's log to (see gvisor.ExitFromLog).
func (g *gvisorState) runscLog() string { return filepath.Join(g.bundle, "runsc.log") }

// directRequest says whether req can be a one-command sandbox's
// command run as the container's process: a plain one-off in a working
// directory the sandbox has.
func directRequest(req *ExecRequest) bool {
	return req.TTY == nil && !req.KeepAlive && !req.Resident && !req.prewarm && req.Signal == nil && directDirs[req.Dir]
}

// directDirs are the working directories every sandbox has, which a
// one-command sandbox's command may start in: runsc makes a process's
// working directory when it is missing, where init refuses it.
var directDirs = map[string]bool{HomeDir: true, "/tmp": true, "/": true}

// takeLaunch takes a gVisor sandbox's pending launch (nil when there is
// none, or another caller took it; that one closes g.launched).
func (g *gvisorState) takeLaunch() *gvisorLaunch {
	g.launchMu.Lock()
	defer g.launchMu.Unlock()
	l := g.launch
	g.launch = nil
	return l
}

// launchFor starts a one-command gVisor sandbox that has not started
// yet for req: it returns the launch for newExec to start with req as
// the container's process, or starts the sandbox with init (a request
// that needs init) and returns nil. A sandbox started already, or of
// the other backend, returns nil.
func (s *Sandbox) launchFor(req *ExecRequest) *gvisorLaunch {
	g := s.gv
	if g == nil || g.launched == nil {
		return nil
	}
	l := g.takeLaunch()
	if l == nil {
		return nil
	}
	// A CPU-time ceiling is the command's own: without init, the CPU
	// runsc spends making the sandbox would count in it.
	if directRequest(req) && s.ceilings().CPUTime == 0 {
		return l
	}
	s.launchInit(l)
	return nil
}

// launchInit starts a pending gVisor sandbox with init, as a sandbox
// not made for one command starts. Its error is the start's.
func (s *Sandbox) launchInit(l *gvisorLaunch) {
	g := s.gv
	defer close(g.launched)
	defer l.release()
	if err := l.start(s, l.ctrl, l.log, nil); err != nil {
		g.launchErr = err
		close(s.exited) // no runsc to reap
		return
	}
	s.launchedThen()
}

// startDirect starts a pending gVisor sandbox with cmd as its
// container's process, for the exec id.
func (s *Sandbox) startDirect(l *gvisorLaunch, id uint64, cmd *directCmd) error {
	g := s.gv
	defer close(g.launched)
	defer l.release()
	g.direct, g.directID, g.directArgv0 = true, id, cmd.argv[0]
	// The host's copy of the command's standard error, for the shell's
	// message when the command cannot start (see waitDirect).
	stderr, err := unix.FcntlInt(uintptr(cmd.stdio[2]), unix.F_DUPFD_CLOEXEC, 3)
	if err != nil {
		g.launchErr = fmt.Errorf("start runsc: %w", err)
		close(s.exited)
		return g.launchErr
	}
	g.stderr = stderr
	log, err := os.OpenFile(g.runscLog(), os.O_WRONLY|os.O_CREATE|os.O_APPEND|os.O_EXCL|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0o600)
	if err == nil {
		defer log.Close()
		err = l.start(s, nil, log, cmd)
	}
	if err != nil {
		unix.Close(g.stderr)
		g.stderr = -1
		g.launchErr = err
		close(s.exited) // no runsc to reap
		return err
	}
	// The scratch tmpfs is mounted in runsc's mount namespace, and seen
	// through runsc's root: opened now, while runsc has just started,
	// for the command may be over, and runsc gone, before its exec
	// reaches finishStart (CI, under the race detector: "open sandbox
	// scratch: no such file or directory").
	if fd, err := unix.Open(s.hostDir(""), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0); err == nil {
		s.scratch = fd
	}
	s.launchedThen()
	return nil
}

// launchedThen follows a launch: runsc is reaped when it exits, and a
// sandbox killed while it was starting is killed again, now that it has
// processes.
func (s *Sandbox) launchedThen() {
	go s.watchExit()
	s.mu.Lock()
	killed := s.killed
	s.mu.Unlock()
	if killed {
		s.kill()
	}
}

// awaitLaunch is awaitStart's first step for a one-command gVisor
// sandbox: it starts one not started yet with init (what waits for the
// sandbox before a command needs init's sandbox), and waits for a start
// under way. Its error is the start's.
func (s *Sandbox) awaitLaunch(ctx context.Context) error {
	g := s.gv
	if g == nil || g.launched == nil {
		return nil
	}
	if l := g.takeLaunch(); l != nil {
		s.launchInit(l)
	}
	select {
	case <-g.launched:
	case <-ctx.Done():
		return context.Cause(ctx)
	}
	return g.launchErr
}

// abandonLaunch releases what a one-command gVisor sandbox that never
// started held, at its teardown; or waits for a start under way (an
// AwaitStart's, which no exec counts), so that the teardown then finds
// runsc.
func (s *Sandbox) abandonLaunch() {
	g := s.gv
	if g == nil || g.launched == nil {
		return
	}
	if l := g.takeLaunch(); l != nil {
		s.dropLaunch(l)
		return
	}
	<-g.launched
}

// dropLaunch ends a launch that was taken but will not start: the
// sandbox is over before it began. Nothing will close s.exited then.
func (s *Sandbox) dropLaunch(l *gvisorLaunch) {
	l.release()
	s.gv.launchErr = ErrDead
	close(s.gv.launched)
	close(s.exited)
}

// waitDirect is readLoop for a one-command gVisor sandbox: once runsc
// has exited it tells the command's exec how the command ended, as
// init's exit message would, and then releases every waiter.
func (s *Sandbox) waitDirect() {
	g := s.gv
	defer s.releaseWaiters()
	<-s.exited
	b, _ := readTail(g.runscLog(), directLog)
	m := &initproto.Message{Kind: initproto.KindExit, ID: g.directID}
	status, failure, ok := gvisor.ExitFromLog(b)
	switch {
	case ok:
		m.Status = int(status)
	case gvisor.StartErrno(failure) != 0:
		// The command could not start: the shell's message, as init
		// writes it.
		m.Errno = int(gvisor.StartErrno(failure))
		m.Error = failure
		_, _ = unix.Write(g.stderr, []byte(execFailedMessage(g.directArgv0, unix.Errno(m.Errno), failure)))
	default:
		if failure == "" {
			failure = "runsc ended without a word"
		}
		g.exitErr = fmt.Errorf("%w: runsc: %s", ErrDead, failure)
		m = nil
	}
	// Last: the stream ends for the output's pump.
	unix.Close(g.stderr)
	g.stderr = -1
	if m == nil {
		return
	}
	s.mu.Lock()
	ch := s.waiters[m.ID]
	s.mu.Unlock()
	if ch != nil {
		select {
		case ch <- initReply{m: m}:
		default:
		}
	}
}

// execFailedMessage is what init writes on a command's standard error
// when it cannot start it (see sbinit's execFailed).
func execFailedMessage(name string, errno unix.Errno, failure string) string {
	if errno == unix.ENOENT && !strings.Contains(name, "/") {
		return fmt.Sprintf("airlock: %s: command not found\n", name)
	}
	return fmt.Sprintf("airlock: %s: %v\n", name, errno)
}

// readTail reads the last n bytes of the file at path.
func readTail(path string, n int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	return io.ReadAll(io.NewSectionReader(f, max(fi.Size()-n, 0), n))
}

// exitsWithin says whether the sandbox's first process (runsc, on the
// one-command path) has exited, or does within d: one that has exited
// may not be reaped yet.
func (s *Sandbox) exitsWithin(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-s.exited:
		return true
	case <-t.C:
		return false
	}
}
