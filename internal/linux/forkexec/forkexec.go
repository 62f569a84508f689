// Package forkexec starts a child process with raw system calls, for the
// two places where syscall.ForkExec cannot do what airlock needs:
//
//   - The spawner clones each sandbox's init into its cgroup at birth
//     (clone3 with CLONE_INTO_CGROUP) and as the host's child
//     (CLONE_PARENT). The kernel accepts clone3 with CLONE_PARENT only with
//     no exit signal (the child then takes the caller's), and ForkExec
//     always asks for SIGCHLD, so on cgroup v2 it fails with EINVAL.
//   - Init starts commands with real, effective and saved uid set to the
//     command user's while init itself keeps another real and saved uid,
//     so that no command may signal it. The change needs setresuid in the
//     child, which ForkExec cannot make (its Credential uses setuid, which
//     an unprivileged process may not use to take its effective uid as its
//     real one).
//
// Everything the child needs is prepared before the fork: paths, argument
// and environment vectors, the descriptor plan. The child is a process of
// one thread that runs nothing but raw system calls until it execs (no
// allocation, no lock, no Go scheduler), with every signal blocked until
// just before exec. On amd64 it runs on the caller's memory rather than a
// copy of it (CLONE_VM: on the caller's stack while the caller waits, as
// vfork, or on a stack of its own when the caller must go on, as with
// Hold); elsewhere, and in race builds for the latter, it is a copy. A
// failure before exec comes back as an errno on a close-on-exec pipe.
package forkexec

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// Spec says what to start.
type Spec struct {
	// Path is executed with Argv and Env; or, when PathFile is set, that
	// open file (execveat with AT_EMPTY_PATH; O_PATH will do): the child
	// then needs no search permission on the way to it, and runs the very
	// file that was opened.
	Path     string
	PathFile *os.File
	Argv     []string
	Env      []string
	// Files are the child's descriptors 0, 1, 2, ...: a descriptor of the
	// caller's, or -1 for closed. The child holds no other descriptor
	// after exec (close_range with CLOSE_RANGE_CLOEXEC, Linux 5.11).
	Files []int
	// Dir, when set, is the child's working directory, entered after the
	// uid change (so with the child's own permissions).
	Dir string
	// Flags are extra clone flags (namespaces).
	Flags uintptr
	// Sibling makes the child the caller's parent's child (CLONE_PARENT);
	// otherwise it is the caller's and signals SIGCHLD when it ends.
	Sibling bool
	// CgroupFD, when not -1, is a cgroup v2 directory the child is born
	// in (CLONE_INTO_CGROUP).
	CgroupFD int
	// CgroupTasks are cgroup v1 tasks files, open for writing, one per
	// hierarchy: the child's first act is to write "0" to each, which
	// moves it into those cgroups (v1 has no CLONE_INTO_CGROUP). It runs
	// nothing of its own before, and the caller's thread never visits
	// the cgroups. With CLONE_NEWCGROUP in Flags the child makes its
	// cgroup namespace after the move (unshare), so that it is rooted in
	// those cgroups, as a namespace made by the clone would be when the
	// clone is born there.
	CgroupTasks []int
	// PinCPU makes the child, last before its exec, run on the one
	// processor it is on then (sched_setaffinity); the threads the
	// program starts inherit that. It is best effort: a child that cannot
	// read its processor, or set it, execs unpinned.
	PinCPU bool
	// Hold makes the child wait, before anything else, until Release:
	// the caller writes the id maps of a new user namespace meanwhile.
	Hold bool
	// Setsid starts a new session (and process group).
	Setsid bool
	// Setctty makes the terminal that is the child's descriptor 0 its
	// controlling terminal (TIOCSCTTY), once its descriptors are in
	// place; it needs Setsid.
	Setctty bool
	// DefaultSignals gives the child the default action of every signal
	// the caller ignores: an ignored signal survives exec, so one the
	// caller inherited ignored would otherwise be ignored by the child
	// and everything it starts.
	DefaultSignals bool
	// ClearGroups empties the supplementary groups.
	ClearGroups bool
	// UID and GID, when not -1, become the child's real, effective and
	// saved ids (setresgid, then setresuid).
	UID, GID int
	// ThreadLocked says the calling goroutine is locked to its thread for
	// the whole call already, by the runtime in a package initialiser
	// (see sbinit.MainOnStartupThread). Start then does not lock it
	// itself: a first LockOSThread starts the Go runtime's template
	// thread, one more thread in the process for good.
	ThreadLocked bool
	// Prog, when set, is a program of system calls the child runs after
	// its other steps, as the uid and gid above, before its exec (see
	// Prog), with ProgFiles as its files (Prog.NFiles of them). An op
	// that fails is an *Error naming it (Error.What).
	Prog      *Prog
	ProgFiles []int
	// NSOwner, when above 0, is the host uid that owns the user namespace
	// the clone makes (CLONE_NEWUSER in Flags), instead of the caller's
	// effective uid. The kernel charges what the kernel counts per user
	// (inotify instances and watches, namespaces, queued signals...) at
	// every level up to the host, and at the host's level to the owner of
	// the namespace: with the caller's root as owner, every sandbox's
	// inotify use was host root's, and one sandbox could exhaust it. The
	// calling thread takes this uid as its effective uid for the clone
	// alone, keeping its capabilities (SECBIT_NO_SETUID_FIXUP), and its
	// own again after it. Changing an effective uid makes the process
	// non-dumpable (the kernel's suid_dumpable rule); it stays so.
	NSOwner int
	// TimerSlack, when not 0, is the child's timer slack in nanoseconds
	// (PR_SET_TIMERSLACK): how late the kernel may wake its timed
	// sleeps. Exec keeps it, and the threads the program starts inherit
	// it from the thread that starts them.
	TimerSlack uint64
}

// Child is a started child.
type Child struct {
	// Pid is the child's pid in the caller's pid namespace.
	Pid int
	// PidFD is a pidfd of the child. The caller owns it.
	PidFD int

	// s is the child's spec. A child may run on the caller's memory
	// (see forkExec), so after the clone the caller never writes to it:
	// the caller's ends of the pipes are its own fields below.
	s                        *forkSpec
	prog                     *Prog // names a failed op
	errR, errW, syncR, syncW int
	held                     bool
	owned                    bool // the child is the caller's, and Kill reaps it
}

// Start clones the child. Without Hold it returns once the child has
// exec'd (or failed to, which is an error, the child reaped when it is
// the caller's). With Hold the child waits for Release or Kill.
func Start(sp Spec) (*Child, error) {
	if sp.CgroupFD < -1 || len(sp.Files) == 0 || len(sp.Argv) == 0 {
		return nil, errors.New("forkexec: bad spec")
	}
	if sp.Setctty && !sp.Setsid {
		return nil, errors.New("forkexec: Setctty needs Setsid")
	}
	if sp.CgroupFD >= 0 && len(sp.CgroupTasks) > 0 {
		return nil, errors.New("forkexec: a child is born in a v2 cgroup (CgroupFD) or moves into v1 ones (CgroupTasks), not both")
	}
	s := &forkSpec{files: sp.Files, tmp: make([]int, len(sp.Files)), pidfd: -1, pathFD: -1,
		timerSlack: sp.TimerSlack, setsid: sp.Setsid, setctty: sp.Setctty, clearGroups: sp.ClearGroups, uid: sp.UID, gid: sp.GID, syncR: -1, syncW: -1,
		tasks: sp.CgroupTasks, pinCPU: sp.PinCPU}
	if sp.DefaultSignals {
		s.dflSignals = ignoredSignals()
	}
	if sp.PathFile != nil {
		s.pathFD = int(sp.PathFile.Fd())
		defer runtime.KeepAlive(sp.PathFile)
	}
	if sp.Prog != nil {
		if len(sp.ProgFiles) != sp.Prog.NFiles {
			return nil, fmt.Errorf("forkexec: %d files for a program of %d", len(sp.ProgFiles), sp.Prog.NFiles)
		}
		res, err := sp.Prog.prepare(sp.PathFile != nil)
		if err != nil {
			return nil, err
		}
		s.prog, s.progFiles = res, sp.ProgFiles
	}
	var err error
	if s.path, err = syscall.BytePtrFromString(sp.Path); err != nil {
		return nil, err
	}
	if s.argv, err = syscall.SlicePtrFromStrings(sp.Argv); err != nil {
		return nil, err
	}
	if s.envv, err = syscall.SlicePtrFromStrings(sp.Env); err != nil {
		return nil, err
	}
	if sp.Dir != "" {
		if s.dir, err = syscall.BytePtrFromString(sp.Dir); err != nil {
			return nil, err
		}
	}
	var errP [2]int
	if err := unix.Pipe2(errP[:], unix.O_CLOEXEC); err != nil {
		return nil, fmt.Errorf("forkexec: pipe: %w", err)
	}
	s.errW = errP[1]
	c := &Child{s: s, prog: sp.Prog, errR: errP[0], errW: errP[1], syncR: -1, syncW: -1, PidFD: -1, held: sp.Hold, owned: !sp.Sibling}
	if sp.Hold {
		var syncP [2]int
		if err := unix.Pipe2(syncP[:], unix.O_CLOEXEC); err != nil {
			c.closeAll()
			return nil, fmt.Errorf("forkexec: pipe: %w", err)
		}
		s.syncR, s.syncW = syncP[0], syncP[1]
		c.syncR, c.syncW = syncP[0], syncP[1]
	}
	s.setArgs(sp)

	if sp.NSOwner > 0 && sp.Flags&unix.CLONE_NEWUSER == 0 {
		c.closeAll()
		return nil, errors.New("forkexec: NSOwner without CLONE_NEWUSER")
	}
	pid, errno, err := forkBlocked(s, sp.ThreadLocked, sp.NSOwner)
	if err != nil {
		c.closeAll()
		return nil, err
	}
	// The child has its own copies of these; the caller keeps none.
	unix.Close(c.errW)
	c.errW = -1
	if c.syncR >= 0 {
		unix.Close(c.syncR)
		c.syncR = -1
	}
	if errno != 0 {
		c.closeAll()
		return nil, fmt.Errorf("forkexec: clone: %w", errno)
	}
	c.Pid, c.PidFD = int(pid), int(s.pidfd)
	if sp.Hold {
		return c, nil
	}
	if err := c.wait(); err != nil {
		return nil, err
	}
	return c, nil
}

// forkBlocked runs forkExec on a locked thread with every signal blocked:
// no Go signal handler may run in the child, which has none of the
// runtime's threads. The child finds the caller's mask in s.mask and
// restores it just before exec. With locked, the caller's goroutine is
// locked to its thread already (Spec.ThreadLocked). With owner above 0
// the thread clones as that effective uid (Spec.NSOwner).
func forkBlocked(s *forkSpec, locked bool, owner int) (uintptr, syscall.Errno, error) {
	if !locked {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
	}
	var all, old unix.Sigset_t
	for i := range all.Val {
		all.Val[i] = ^uint64(0)
	}
	if err := unix.PthreadSigmask(unix.SIG_SETMASK, &all, &old); err != nil {
		return 0, 0, fmt.Errorf("forkexec: block signals: %w", err)
	}
	defer unix.PthreadSigmask(unix.SIG_SETMASK, &old, nil)
	s.mask = old
	if owner > 0 {
		restore, err := actAs(owner)
		if err != nil {
			return 0, 0, err
		}
		defer func() {
			if err := restore(); err != nil {
				// This thread's credentials are not the process's:
				// it must never run another goroutine. One more lock
				// than unlocks keeps it this goroutine's, and the
				// runtime ends the thread with the goroutine.
				runtime.LockOSThread()
				panic(err)
			}
		}()
	}
	pid, errno := forkExec(s)
	return pid, errno, nil
}

// secbitNoSetuidFixup keeps a thread's capabilities across a change of its
// uids (linux/securebits.h).
const secbitNoSetuidFixup = 1 << 2

// actAs makes the calling thread's effective uid uid, with its
// capabilities kept, and returns what puts both back. Credentials are per
// thread in the kernel; the raw system calls here change only this one
// (the Go runtime's Setresuid changes every thread of the process).
func actAs(uid int) (restore func() error, err error) {
	bits, _, errno := unix.RawSyscall(unix.SYS_PRCTL, unix.PR_GET_SECUREBITS, 0, 0)
	if errno != 0 {
		return nil, fmt.Errorf("forkexec: read securebits: %w", errno)
	}
	if _, _, errno := unix.RawSyscall(unix.SYS_PRCTL, unix.PR_SET_SECUREBITS, bits|secbitNoSetuidFixup, 0); errno != 0 {
		return nil, fmt.Errorf("forkexec: keep capabilities across the uid change: %w", errno)
	}
	euid := unix.Geteuid()
	if _, _, errno := unix.RawSyscall(unix.SYS_SETRESUID, ^uintptr(0), uintptr(uid), ^uintptr(0)); errno != 0 {
		unix.RawSyscall(unix.SYS_PRCTL, unix.PR_SET_SECUREBITS, bits, 0)
		return nil, fmt.Errorf("forkexec: take uid %d to own the user namespace: %w", uid, errno)
	}
	return func() error {
		if _, _, errno := unix.RawSyscall(unix.SYS_SETRESUID, ^uintptr(0), uintptr(euid), ^uintptr(0)); errno != 0 {
			return fmt.Errorf("forkexec: take back uid %d: %w", euid, errno)
		}
		if _, _, errno := unix.RawSyscall(unix.SYS_PRCTL, unix.PR_SET_SECUREBITS, bits, 0); errno != 0 {
			return fmt.Errorf("forkexec: put back securebits: %w", errno)
		}
		return nil
	}, nil
}

// Release lets a held child go on, and returns once it has exec'd; an
// error (the child failed before exec) leaves it killed, and reaped when
// it is the caller's.
func (c *Child) Release() error {
	if err := c.Let(); err != nil {
		return err
	}
	return c.wait()
}

// Let lets a held child go on and returns at once, so that the caller's
// work overlaps the child's exec. The caller must then call Execd, which
// says how the exec went, before it lets go of the child: until the child
// has exec'd, it may be running on the caller's memory. An error here
// leaves the child killed, and reaped when it is the caller's.
func (c *Child) Let() error {
	if !c.held {
		return errors.New("forkexec: child not held")
	}
	c.held = false
	_, err := unix.Write(c.syncW, []byte{1})
	unix.Close(c.syncW)
	c.syncW = -1
	if err != nil {
		c.Kill()
		c.closeAll()
		return fmt.Errorf("forkexec: release the child: %w", err)
	}
	return nil
}

// Execd returns once a child let go by Let has exec'd (nil) or has failed
// before its exec (the step and errno). It neither signals nor reaps the
// child, and leaves PidFD open: a failed child exits by itself, and is
// whoever holds its pidfd's to reap. It must be called once after Let,
// also when the caller has killed the child meanwhile.
func (c *Child) Execd() error {
	if c.held || c.syncW >= 0 {
		return errors.New("forkexec: child not let go")
	}
	if c.errR < 0 {
		return errors.New("forkexec: child's status already read")
	}
	buf, n, err := c.readStatus()
	if err != nil {
		c.settle()
		c.closeAll()
		return err
	}
	if n == 0 {
		// End of file: the child exec'd, or died (killed) before.
		c.s.freeStack()
		c.closeAll()
		return nil
	}
	// The child exits after its report: its memory is the caller's again
	// once the pipe ends.
	c.settle()
	c.closeAll()
	if n != len(buf) {
		return errors.New("forkexec: short status from the child")
	}
	return c.statusError(buf)
}

// Kill kills the child, reaps it when it is the caller's (closing the
// pidfd), and releases what Start opened. A sibling's pidfd stays open for
// whoever reaps it.
func (c *Child) Kill() {
	if c.PidFD >= 0 {
		_ = unix.PidfdSendSignal(c.PidFD, unix.SIGKILL, nil, 0)
		c.settle()
		if c.owned {
			var info unix.Siginfo
			for unix.Waitid(unix.P_PIDFD, c.PidFD, &info, unix.WEXITED, nil) == unix.EINTR {
			}
			unix.Close(c.PidFD)
			c.PidFD = -1
		}
	}
	c.closeAll()
}

// unsettled keeps the specs (and stacks) of children settle could not see
// end.
var unsettled struct {
	sync.Mutex // guards specs, which only grows
	specs      []*forkSpec
}

// settle waits, when the child runs on the caller's memory, for the end of
// its status pipe: the child holds the only writing end, and closes it at
// exec, after its memory is its own, or at exit, after it has let go of
// the caller's. Until then its stack and spec must stay as they are.
func (c *Child) settle() {
	if c.s.stack == nil || c.errR < 0 {
		return
	}
	var buf [8]byte
	for {
		n, err := unix.Read(c.errR, buf[:])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			// Not known to be done: the stack and spec stay allocated
			// for good rather than risk the child writing to memory
			// given to something else.
			unsettled.Lock()
			unsettled.specs = append(unsettled.specs, c.s)
			unsettled.Unlock()
			return
		}
		if n == 0 {
			break
		}
	}
	c.s.freeStack()
}

// wait reads the child's status: end of file means it exec'd (the pipe is
// close-on-exec); eight bytes are the errno of the step that failed.
func (c *Child) wait() error {
	buf, n, err := c.readStatus()
	if err != nil {
		c.Kill()
		return err
	}
	if n == 0 {
		// End of file: the child exec'd.
		c.s.freeStack()
		unix.Close(c.errR)
		c.errR = -1
		return nil
	}
	c.Kill() // the child is on its way out: settle waits for it
	if n != len(buf) {
		return errors.New("forkexec: short status from the child")
	}
	return c.statusError(buf)
}

// readStatus reads the status pipe to its end or to a full report: n is
// 0 at end of file (the child exec'd, or died), else the bytes of the
// report of a failed step.
func (c *Child) readStatus() (buf [8]byte, n int, err error) {
	for n < len(buf) {
		m, err := unix.Read(c.errR, buf[n:])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return buf, n, fmt.Errorf("forkexec: read the child's status: %w", err)
		}
		if m == 0 {
			break
		}
		n += m
	}
	return buf, n, nil
}

// statusError decodes a child's report of a failed step.
func (c *Child) statusError(buf [8]byte) error {
	var v uint64
	for i := range buf {
		v |= uint64(buf[i]) << (8 * i)
	}
	e := &Error{Step: "exec", Errno: syscall.Errno(uint32(v)), Op: -1}
	switch st := v >> 32; {
	case st < uint64(len(stepNames)):
		e.Step = stepNames[st]
	case st >= stepProg && c.prog != nil && st-stepProg < uint64(len(c.prog.Ops)):
		e.Step, e.Op = "setup", int(st-stepProg)
		e.What = c.prog.Ops[e.Op].What
	}
	return e
}

func (c *Child) closeAll() {
	for _, fd := range []*int{&c.errR, &c.errW, &c.syncR, &c.syncW} {
		if *fd >= 0 {
			unix.Close(*fd)
			*fd = -1
		}
	}
}

// Error is a child's failure before exec.
type Error struct {
	// Step is what failed: "setsid", "setgroups", "setresgid",
	// "setresuid", "chdir", "dup", "timerslack", "setup" (an op of
	// Spec.Prog) or "exec".
	Step  string
	Errno syscall.Errno
	// Op is the index of the program's op that failed, What its Op.What
	// (Step "setup"); else -1 and "".
	Op   int
	What string
}

func (e *Error) Error() string {
	if e.Step == "setup" {
		return e.What + ": " + e.Errno.Error()
	}
	return e.Step + ": " + e.Errno.Error()
}

// Unwrap returns the errno.
func (e *Error) Unwrap() error { return e.Errno }
