package forkexec

import (
	"sync"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// cloneArgs is the kernel's struct clone_args up to its cgroup field
// (CLONE_ARGS_SIZE_VER2, Linux 5.7).
type cloneArgs struct {
	flags      uint64
	pidfd      uint64
	childTID   uint64
	parentTID  uint64
	exitSignal uint64
	stack      uint64
	stackSize  uint64
	tls        uint64
	setTID     uint64
	setTIDSize uint64
	cgroup     uint64
}

// The steps a child reports a failure of, in the high word of its status.
const (
	stepExec = iota
	stepSetsid
	stepSetgroups
	stepSetresgid
	stepSetresuid
	stepChdir
	stepDup
	stepTimerSlack
	stepCgroup
	stepCgroupNS
	stepSetctty
)

var stepNames = [...]string{"exec", "setsid", "setgroups", "setresgid", "setresuid", "chdir", "dup", "timerslack", "enter cgroup", "cgroup namespace", "set controlling terminal"}

// forkSpec is one clone, prepared in full before the fork: the child may
// not allocate, take a lock or touch the Go runtime.
type forkSpec struct {
	args       cloneArgs
	pidfd      int32
	path, dir  *byte
	argv, envv []*byte // nil-terminated
	files, tmp []int
	legacy     bool // clone rather than clone3
	// share says how the child runs until it execs: on a copy of the
	// caller's memory, or on the memory itself (see forkExec).
	share shareMode
	// stack is the child's own stack with shareStack.
	stack      []byte
	stackTop   uintptr // the legacy clone's stack pointer
	pathFD     int     // execveat(pathFD, "") instead of execve(path)
	empty      [1]byte
	setsid     bool
	setctty    bool
	timerSlack uint64 // nanoseconds; 0 leaves the caller's
	// tasks are the v1 tasks files the child moves itself into first;
	// cgroupNS makes it unshare its cgroup namespace after (see
	// Spec.CgroupTasks).
	tasks       []int
	cgroupNS    bool
	clearGroups bool
	uid, gid    int
	// syncR is read by a held child until the caller releases it (one
	// byte) or gives up (end of file); errW carries a failed step and its
	// errno back. All are close-on-exec.
	syncR, syncW, errW int
	buf                [8]byte
	mask               unix.Sigset_t // restored in the child before exec
	// dflSignals are set back to their default action in the child
	// (Spec.DefaultSignals), with dfl, a kernel struct sigaction of
	// SIG_DFL, no flags and an empty mask.
	dflSignals []int
	dfl        [4]uint64
	// pinCPU makes the child, last before its exec, run on the processor
	// it is on alone (cpu and cpus are its scratch).
	pinCPU bool
	cpu    uint32
	cpus   unix.CPUSet
	// netns makes the child StartNetns's: it makes a network namespace,
	// records its descriptor (nsFD) or the failed step and errno, and
	// exits, never execs.
	netns  bool
	nsFD   int
	nsErr  syscall.Errno
	nsStep uint8
	nsPath [32]byte // /proc/thread-self/ns/net, NUL-terminated
	ifr    [40]byte // struct ifreq for lo
	// prog, when set, runs after the descriptors are installed (see
	// Prog); progFiles are its Files. slots are its descriptors: copies
	// of progFiles, then the executable's copy (which the exec uses
	// whenever pathFD is set), then what its ops saved. llattr is the
	// struct a TrapLandlockRule fills in. All are the child's own
	// scratch, never read by the caller.
	prog      *resolved
	progFiles []int
	slots     [maxSlots]uintptr
	llattr    [16]byte
}

// sigsetSize is the kernel's sigset_t size.
const sigsetSize = 8

func (s *forkSpec) setArgs(sp Spec) {
	s.args.flags = uint64(sp.Flags | unix.CLONE_PIDFD)
	if len(s.tasks) > 0 && sp.Flags&unix.CLONE_NEWCGROUP != 0 {
		// Made by the child once it is in its cgroups: a namespace made
		// by the clone would be rooted in the caller's.
		s.args.flags &^= unix.CLONE_NEWCGROUP
		s.cgroupNS = true
	}
	s.args.pidfd = uint64(uintptr(unsafe.Pointer(&s.pidfd)))
	if sp.Sibling {
		// With CLONE_PARENT the exit signal must be 0: the child takes
		// the caller's own.
		s.args.flags |= unix.CLONE_PARENT
	} else {
		s.args.exitSignal = uint64(unix.SIGCHLD)
	}
	if sp.CgroupFD >= 0 {
		s.args.flags |= unix.CLONE_INTO_CGROUP
		s.args.cgroup = uint64(sp.CgroupFD)
	} else {
		// Plain clone where clone3 is not needed: init starts commands
		// under its own seccomp filter, which answers clone3 with
		// ENOSYS (its flags are in memory the filter cannot read).
		s.legacy = true
	}
	// No child needs a copy of the caller's memory: it runs a few raw
	// system calls and execs. Copying a Go process's page tables, and the
	// copy-on-write faults that follow in both, were most of what a clone
	// cost. A child that creates nothing and waits for nobody runs on the
	// caller's stack while the caller's thread sleeps until it execs
	// (vfork); any other runs on a stack of its own, the caller going on
	// at once (it may have id maps to write while the child waits).
	if !canShareMemory {
		return
	}
	if s.legacy && sp.Flags == 0 && !sp.Hold && !sp.Sibling {
		s.share = shareVfork
		s.args.flags |= unix.CLONE_VM | unix.CLONE_VFORK
		return
	}
	if raceBuild {
		return
	}
	s.share = shareStack
	s.args.flags |= unix.CLONE_VM
	s.newStack()
	base := uintptr(unsafe.Pointer(&s.stack[0]))
	top := (base + childStack - 64) &^ 15
	if s.legacy {
		s.stackTop = top
	} else {
		s.args.stack = uint64(base)
		s.args.stackSize = uint64(top - base)
	}
}

type shareMode uint8

const (
	shareNone  shareMode = iota // a copy (fork)
	shareVfork                  // the caller's memory and stack (vfork)
	shareStack                  // the caller's memory, a stack of its own
)

// childStack is the size of a shareStack child's stack: forkChild and the
// raw system calls it makes need a few hundred bytes.
const childStack = 16 << 10

// stacks keeps the stacks of children known to be off them (see
// freeStack) for the next clones: every sandbox's start cloned two
// children on stacks of their own, and each stack was a fresh, zeroed
// 16 KiB allocation, about a third of what the host allocated a sandbox.
// What a previous child left on a stack is nobody's to read: the next
// child writes before it reads, and a child's exec or exit leaves the
// caller's memory behind.
var stacks = sync.Pool{New: func() any { return new([childStack]byte) }}

// newStack gives s a stack from the pool.
func (s *forkSpec) newStack() { s.stack = stacks.Get().(*[childStack]byte)[:] }

// freeStack returns s's stack to the pool. Only for a child known to be
// done with it: it exec'd or exited (the end of its status pipe, or its
// reaping), so it never runs on the caller's memory again.
func (s *forkSpec) freeStack() {
	if s.stack != nil {
		stacks.Put((*[childStack]byte)(s.stack))
		s.stack = nil
	}
}

// forkExec clones a child with s.args and, in the child, runs the steps s
// asks for and execs (forkChild). It returns the child's pid in the
// caller. It must run on a locked OS thread with all signals blocked.
//
// A child that shares the caller's memory writes nothing the caller reads
// but s.tmp and s.buf (its own scratch) and, with shareVfork, the caller's
// results of this call, which the caller overwrites when it resumes. A
// shareStack child may run alongside the caller until it execs or exits:
// its stack and s stay allocated until the caller sees the end of the
// status pipe (see Child.settle).
//
//go:norace
//go:nosplit
func forkExec(s *forkSpec) (uintptr, syscall.Errno) {
	var pid, e uintptr
	flags := uintptr(s.args.flags | s.args.exitSignal)
	switch {
	case s.share == shareVfork:
		pid, e = vfork(flags, uintptr(unsafe.Pointer(&s.pidfd)))
	case s.share == shareStack && s.legacy:
		// clone(flags, stack, parent_tid, ...): with CLONE_PIDFD the
		// pidfd is stored at parent_tid.
		pid, e = cloneOnStack(unix.SYS_CLONE, flags, s.stackTop, uintptr(unsafe.Pointer(&s.pidfd)), s)
	case s.share == shareStack:
		pid, e = cloneOnStack(unix.SYS_CLONE3, uintptr(unsafe.Pointer(&s.args)), unsafe.Sizeof(s.args), 0, s)
	case s.legacy:
		var errno syscall.Errno
		pid, _, errno = syscall.RawSyscall6(unix.SYS_CLONE, flags, 0, uintptr(unsafe.Pointer(&s.pidfd)), 0, 0, 0)
		e = uintptr(errno)
	default:
		var errno syscall.Errno
		pid, _, errno = syscall.RawSyscall(unix.SYS_CLONE3, uintptr(unsafe.Pointer(&s.args)), unsafe.Sizeof(s.args), 0)
		e = uintptr(errno)
	}
	if e != 0 || pid != 0 {
		return pid, syscall.Errno(e)
	}
	forkChild(s)
	return 0, 0 // not reached
}

// forkChild is the child: the steps s asks for, then exec. It never
// returns.
//
//go:norace
//go:nosplit
func forkChild(s *forkSpec) {
	if s.netns {
		netnsChild(s) // never returns
	}
	for _, fd := range s.tasks {
		// "0" is the writer itself: the kernel moves this thread alone,
		// which is the whole child.
		s.buf[0] = '0'
		if _, _, e := syscall.RawSyscall(unix.SYS_WRITE, uintptr(fd), uintptr(unsafe.Pointer(&s.buf[0])), 1); e != 0 {
			childFail(s, stepCgroup, e)
		}
	}
	if s.cgroupNS {
		if _, _, e := syscall.RawSyscall(unix.SYS_UNSHARE, unix.CLONE_NEWCGROUP, 0, 0); e != 0 {
			childFail(s, stepCgroupNS, e)
		}
	}
	if s.syncR >= 0 {
		syscall.RawSyscall(unix.SYS_CLOSE, uintptr(s.syncW), 0, 0)
		for {
			n, _, e := syscall.RawSyscall(unix.SYS_READ, uintptr(s.syncR), uintptr(unsafe.Pointer(&s.buf[0])), 1)
			if e == unix.EINTR {
				continue
			}
			if e != 0 || n != 1 {
				// The caller gave up and reports its own error.
				syscall.RawSyscall(unix.SYS_EXIT_GROUP, 126, 0, 0)
			}
			break
		}
	}
	if s.timerSlack != 0 {
		if _, _, e := syscall.RawSyscall(unix.SYS_PRCTL, unix.PR_SET_TIMERSLACK, uintptr(s.timerSlack), 0); e != 0 {
			childFail(s, stepTimerSlack, e)
		}
	}
	if s.setsid {
		if _, _, e := syscall.RawSyscall(unix.SYS_SETSID, 0, 0, 0); e != 0 {
			childFail(s, stepSetsid, e)
		}
	}
	if s.clearGroups {
		if _, _, e := syscall.RawSyscall(unix.SYS_SETGROUPS, 0, 0, 0); e != 0 {
			childFail(s, stepSetgroups, e)
		}
	}
	if s.gid >= 0 {
		if _, _, e := syscall.RawSyscall(unix.SYS_SETRESGID, uintptr(s.gid), uintptr(s.gid), uintptr(s.gid)); e != 0 {
			childFail(s, stepSetresgid, e)
		}
	}
	if s.uid >= 0 {
		if _, _, e := syscall.RawSyscall(unix.SYS_SETRESUID, uintptr(s.uid), uintptr(s.uid), uintptr(s.uid)); e != 0 {
			childFail(s, stepSetresuid, e)
		}
	}
	if s.dir != nil {
		if _, _, e := syscall.RawSyscall(unix.SYS_CHDIR, uintptr(unsafe.Pointer(s.dir)), 0, 0); e != 0 {
			childFail(s, stepChdir, e)
		}
	}
	// The status pipe's end goes above the targets first: installing or
	// closing a target over it would end the pipe early, which reads as
	// the exec, and leave a later failure unreported.
	if s.errW < len(s.files) {
		nfd, _, e := syscall.RawSyscall(unix.SYS_FCNTL, uintptr(s.errW), unix.F_DUPFD_CLOEXEC, uintptr(len(s.files)))
		if e != 0 {
			childFail(s, stepDup, e)
		}
		s.errW = int(nfd)
	}
	// Copy every source above the targets first, so that installing one
	// target never overwrites a source still needed (the copies are
	// close-on-exec; the installed targets are not): the program's files
	// and the executable too, which it and the exec then use.
	for i, fd := range s.progFiles {
		nfd, _, e := syscall.RawSyscall(unix.SYS_FCNTL, uintptr(fd), unix.F_DUPFD_CLOEXEC, uintptr(len(s.files)))
		if e != 0 {
			childFail(s, stepDup, e)
		}
		s.slots[i] = nfd
	}
	if s.pathFD >= 0 {
		nfd, _, e := syscall.RawSyscall(unix.SYS_FCNTL, uintptr(s.pathFD), unix.F_DUPFD_CLOEXEC, uintptr(len(s.files)))
		if e != 0 {
			childFail(s, stepDup, e)
		}
		s.slots[len(s.progFiles)] = nfd
	}
	for i, fd := range s.files {
		s.tmp[i] = -1
		if fd < 0 {
			continue
		}
		nfd, _, e := syscall.RawSyscall(unix.SYS_FCNTL, uintptr(fd), unix.F_DUPFD_CLOEXEC, uintptr(len(s.files)))
		if e != 0 {
			childFail(s, stepDup, e)
		}
		s.tmp[i] = int(nfd)
	}
	for i, fd := range s.tmp {
		if fd < 0 {
			syscall.RawSyscall(unix.SYS_CLOSE, uintptr(i), 0, 0)
			continue
		}
		if _, _, e := syscall.RawSyscall(unix.SYS_DUP3, uintptr(fd), uintptr(i), 0); e != 0 {
			childFail(s, stepDup, e)
		}
	}
	if s.setctty {
		if _, _, e := syscall.RawSyscall(unix.SYS_IOCTL, 0, unix.TIOCSCTTY, 0); e != 0 {
			childFail(s, stepSetctty, e)
		}
	}
	// Nothing else reaches the program: every other descriptor closes
	// at exec, whether or not whoever opened it asked for that (a
	// descriptor the caller inherited without close-on-exec, say).
	syscall.RawSyscall(unix.SYS_CLOSE_RANGE, uintptr(len(s.files)), uintptr(^uint32(0)), unix.CLOSE_RANGE_CLOEXEC)
	if s.prog != nil {
		if i, e := runProg(s); e != 0 {
			childFail(s, stepProg+i, e)
		}
	}
	if s.pinCPU {
		if _, _, e := syscall.RawSyscall(unix.SYS_GETCPU, uintptr(unsafe.Pointer(&s.cpu)), 0, 0); e == 0 && int(s.cpu) < len(s.cpus)*64 {
			for i := range s.cpus {
				s.cpus[i] = 0
			}
			s.cpus[s.cpu/64] = 1 << (s.cpu % 64)
			syscall.RawSyscall(unix.SYS_SCHED_SETAFFINITY, 0, unsafe.Sizeof(s.cpus), uintptr(unsafe.Pointer(&s.cpus)))
		}
	}
	for i := 0; i < len(s.dflSignals); i++ {
		syscall.RawSyscall6(unix.SYS_RT_SIGACTION, uintptr(s.dflSignals[i]), uintptr(unsafe.Pointer(&s.dfl[0])), 0, sigsetSize, 0, 0)
	}
	syscall.RawSyscall6(unix.SYS_RT_SIGPROCMASK, unix.SIG_SETMASK, uintptr(unsafe.Pointer(&s.mask)), 0, sigsetSize, 0, 0)
	var e syscall.Errno
	if s.pathFD >= 0 {
		_, _, e = syscall.RawSyscall6(unix.SYS_EXECVEAT, s.slots[len(s.progFiles)], uintptr(unsafe.Pointer(&s.empty[0])),
			uintptr(unsafe.Pointer(&s.argv[0])), uintptr(unsafe.Pointer(&s.envv[0])), unix.AT_EMPTY_PATH, 0)
	} else {
		_, _, e = syscall.RawSyscall(unix.SYS_EXECVE, uintptr(unsafe.Pointer(s.path)),
			uintptr(unsafe.Pointer(&s.argv[0])), uintptr(unsafe.Pointer(&s.envv[0])))
	}
	childFail(s, stepExec, e)
}

// runProg runs s.prog and returns the index of the op that failed and its
// errno, or 0 when every op succeeded (or was skipped).
//
//go:norace
//go:nosplit
func runProg(s *forkSpec) (int, syscall.Errno) {
	ops := s.prog.ops
	for i := 0; i < len(ops); {
		op := &ops[i]
		a := op.args
		for j := 0; j < len(a); j++ {
			if op.slots&(1<<j) != 0 {
				a[j] = s.slots[a[j]]
			}
		}
		var r uintptr
		var e syscall.Errno
		if op.trap == TrapLandlockRule {
			// struct landlock_path_beneath_attr, packed: the rights,
			// then the descriptor.
			for k := 0; k < 8; k++ {
				s.llattr[k] = byte(a[1] >> (8 * k))
			}
			for k := 0; k < 4; k++ {
				s.llattr[8+k] = byte(a[2] >> (8 * k))
			}
			r, _, e = syscall.RawSyscall6(unix.SYS_LANDLOCK_ADD_RULE, a[0], unix.LANDLOCK_RULE_PATH_BENEATH, uintptr(unsafe.Pointer(&s.llattr[0])), 0, 0, 0)
		} else {
			r, _, e = syscall.RawSyscall6(op.trap, a[0], a[1], a[2], a[3], a[4], a[5])
		}
		if e == 0 && op.whole && r != a[2] {
			e = unix.EIO
		}
		if e != 0 {
			next := -1
			for k := 0; k < len(op.els); k++ {
				if op.els[k].errno != 0 && op.els[k].errno == e {
					next = i + 1 + int(op.els[k].skip)
					break
				}
			}
			if next < 0 {
				return i, e
			}
			i = next
			continue
		}
		if op.save >= 0 {
			s.slots[op.save] = r
		}
		i += 1 + int(op.skip)
	}
	return 0, 0
}

// childFail reports the failed step and errno to the caller and exits the
// child.
//
//go:norace
//go:nosplit
func childFail(s *forkSpec, step int, e syscall.Errno) {
	v := uint64(step)<<32 | uint64(uint32(e))
	for i := range s.buf {
		s.buf[i] = byte(v >> (8 * i))
	}
	syscall.RawSyscall(unix.SYS_WRITE, uintptr(s.errW), uintptr(unsafe.Pointer(&s.buf[0])), uintptr(len(s.buf)))
	for {
		syscall.RawSyscall(unix.SYS_EXIT_GROUP, 127, 0, 0)
	}
}

// ignoredSignals returns the standard signals this process ignores now
// (SIG_IGN), which a child inherits as they are: a shell's background job
// ignores SIGINT and SIGQUIT, nohup SIGHUP, and an ignored signal passes
// through every fork and exec. The Go runtime keeps an inherited SIG_IGN
// for SIGHUP, SIGINT and the job-control signals, and os/signal's Notify
// and Stop move those between its handler (which exec resets) and
// SIG_IGN, so what counts is the disposition at the clone: read then, 31
// system calls (about 5 µs), for the clones that ask (init's). Real-time
// signals get the runtime's handlers.
func ignoredSignals() []int {
	var out []int
	for sig := 1; sig < 32; sig++ {
		if sig == int(unix.SIGKILL) || sig == int(unix.SIGSTOP) {
			continue
		}
		var old [4]uint64
		_, _, e := syscall.RawSyscall6(unix.SYS_RT_SIGACTION, uintptr(sig), 0, uintptr(unsafe.Pointer(&old[0])), sigsetSize, 0, 0)
		if e == 0 && old[0] == 1 { // SIG_IGN
			out = append(out, sig)
		}
	}
	return out
}
