package spawner

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Why not syscall.ForkExec: it can place a child in a cgroup at birth
// (UseCgroupFD, which needs clone3), but it always asks clone3 for
// SIGCHLD as the exit signal, and the kernel refuses clone3 with
// CLONE_PARENT and any exit signal (EINVAL; with CLONE_PARENT the child
// takes its exit signal from the caller). Inits must be both: born in
// their cgroup, and the host's children. So the clone is made here, with
// raw system calls, the way the Go runtime makes its own: everything the
// child needs is prepared before the fork, and the child runs only raw
// system calls until it execs.

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

// forkSpec is one clone, prepared in full before the fork: the child may
// not allocate, take a lock or touch the Go runtime.
type forkSpec struct {
	args  cloneArgs
	pidfd int32
	path  *byte
	argv  []*byte // nil-terminated
	envv  []*byte // nil-terminated
	// files are the child's descriptors 0, 1, 2, ...: a descriptor of the
	// caller's, or -1 for closed.
	files []int
	tmp   []int // scratch for the descriptor shuffle
	// syncR is read by the child until the caller has written its id maps
	// (one byte) or given up (end of file); errW carries an errno back
	// when the child fails before exec. Both are close-on-exec.
	syncR, syncW int
	errW         int
	errBuf       [8]byte
	mask         unix.Sigset_t // the caller's signal mask, restored in the child before exec
	all          unix.Sigset_t
}

// sigsetSize is the kernel's sigset_t size.
const sigsetSize = 8

// forkExec clones a child with s.args, and in the child waits for its id
// maps, takes uid and gid 0 with no supplementary groups, installs its
// descriptors and execs. It returns the child's pid in the caller. It must
// run on a locked OS thread with all signals blocked (so that no Go signal
// handler can run in the child, which has a copy of this thread only).
//
//go:norace
//go:nosplit
func forkExec(s *forkSpec) (uintptr, syscall.Errno) {
	pid, _, errno := syscall.RawSyscall(unix.SYS_CLONE3, uintptr(unsafe.Pointer(&s.args)), unsafe.Sizeof(s.args), 0)
	if errno != 0 || pid != 0 {
		return pid, errno
	}
	// The child.
	syscall.RawSyscall(unix.SYS_CLOSE, uintptr(s.syncW), 0, 0)
	for {
		n, _, e := syscall.RawSyscall(unix.SYS_READ, uintptr(s.syncR), uintptr(unsafe.Pointer(&s.errBuf[0])), 1)
		if e == unix.EINTR {
			continue
		}
		if e != 0 || n != 1 {
			// The caller gave up: it reports its own error.
			syscall.RawSyscall(unix.SYS_EXIT_GROUP, 126, 0, 0)
		}
		break
	}
	if _, _, e := syscall.RawSyscall(unix.SYS_SETGROUPS, 0, 0, 0); e != 0 {
		childFail(s, e)
	}
	if _, _, e := syscall.RawSyscall(unix.SYS_SETRESGID, 0, 0, 0); e != 0 {
		childFail(s, e)
	}
	if _, _, e := syscall.RawSyscall(unix.SYS_SETRESUID, 0, 0, 0); e != 0 {
		childFail(s, e)
	}
	// Copy every source above the targets first, so that installing one
	// target never overwrites a source still needed (the copies are
	// close-on-exec; the installed targets are not).
	for i, fd := range s.files {
		s.tmp[i] = -1
		if fd < 0 {
			continue
		}
		nfd, _, e := syscall.RawSyscall(unix.SYS_FCNTL, uintptr(fd), unix.F_DUPFD_CLOEXEC, uintptr(len(s.files)))
		if e != 0 {
			childFail(s, e)
		}
		s.tmp[i] = int(nfd)
	}
	for i, fd := range s.tmp {
		if fd < 0 {
			syscall.RawSyscall(unix.SYS_CLOSE, uintptr(i), 0, 0)
			continue
		}
		if _, _, e := syscall.RawSyscall(unix.SYS_DUP3, uintptr(fd), uintptr(i), 0); e != 0 {
			childFail(s, e)
		}
	}
	syscall.RawSyscall6(unix.SYS_RT_SIGPROCMASK, unix.SIG_SETMASK, uintptr(unsafe.Pointer(&s.mask)), 0, sigsetSize, 0, 0)
	_, _, e := syscall.RawSyscall(unix.SYS_EXECVE, uintptr(unsafe.Pointer(s.path)),
		uintptr(unsafe.Pointer(&s.argv[0])), uintptr(unsafe.Pointer(&s.envv[0])))
	childFail(s, e)
	return 0, 0 // not reached
}

// childFail reports errno to the caller and exits the child.
//
//go:norace
//go:nosplit
func childFail(s *forkSpec, e syscall.Errno) {
	v := uint64(e)
	for i := range s.errBuf {
		s.errBuf[i] = byte(v >> (8 * i))
	}
	syscall.RawSyscall(unix.SYS_WRITE, uintptr(s.errW), uintptr(unsafe.Pointer(&s.errBuf[0])), uintptr(len(s.errBuf)))
	for {
		syscall.RawSyscall(unix.SYS_EXIT_GROUP, 127, 0, 0)
	}
}

// forkRequest says what to clone.
type forkRequest struct {
	path, arg0 string
	env        []string
	// flags are clone flags; CLONE_PIDFD is always added.
	flags uintptr
	// asSibling adds CLONE_PARENT; otherwise the child signals SIGCHLD to
	// the caller.
	asSibling bool
	// cgroupFD, when not -1, is a cgroup v2 directory the child is born
	// in (CLONE_INTO_CGROUP).
	cgroupFD int
	// idBase and idSize are the child's one-range uid and gid map.
	idBase, idSize int
	// files are the child's descriptors 0, 1, 2, ...; -1 for closed.
	files []int
}

// startChild clones and execs one child as r says and returns its pid and
// pidfd. On an error after the clone the child is killed; with asSibling
// it is then the caller's parent's child, which must reap it, so its pidfd
// is returned with the error.
func startChild(r forkRequest) (pid, pidfd int, err error) {
	s := &forkSpec{files: r.files, tmp: make([]int, len(r.files)), pidfd: -1, errW: -1}
	if s.path, err = unix.BytePtrFromString(r.path); err != nil {
		return 0, -1, err
	}
	if s.argv, err = syscall.SlicePtrFromStrings([]string{r.arg0}); err != nil {
		return 0, -1, err
	}
	if s.envv, err = syscall.SlicePtrFromStrings(r.env); err != nil {
		return 0, -1, err
	}
	var syncP, errP [2]int
	if err := unix.Pipe2(syncP[:], unix.O_CLOEXEC); err != nil {
		return 0, -1, fmt.Errorf("pipe: %w", err)
	}
	if err := unix.Pipe2(errP[:], unix.O_CLOEXEC); err != nil {
		unix.Close(syncP[0])
		unix.Close(syncP[1])
		return 0, -1, fmt.Errorf("pipe: %w", err)
	}
	s.syncR, s.syncW, s.errW = syncP[0], syncP[1], errP[1]
	errR := errP[0]
	defer func() {
		unix.Close(s.syncR)
		if s.syncW >= 0 {
			unix.Close(s.syncW)
		}
		unix.Close(errR)
	}()

	s.args.flags = uint64(r.flags | unix.CLONE_PIDFD)
	s.args.pidfd = uint64(uintptr(unsafe.Pointer(&s.pidfd)))
	if r.asSibling {
		s.args.flags |= unix.CLONE_PARENT
	} else {
		s.args.exitSignal = uint64(unix.SIGCHLD)
	}
	if r.cgroupFD >= 0 {
		s.args.flags |= unix.CLONE_INTO_CGROUP
		s.args.cgroup = uint64(r.cgroupFD)
	}
	for i := range s.all.Val {
		s.all.Val[i] = ^uint64(0)
	}

	runtime.LockOSThread()
	if err := unix.PthreadSigmask(unix.SIG_SETMASK, &s.all, &s.mask); err != nil {
		runtime.UnlockOSThread()
		unix.Close(s.errW)
		return 0, -1, fmt.Errorf("block signals: %w", err)
	}
	p, errno := forkExec(s)
	_ = unix.PthreadSigmask(unix.SIG_SETMASK, &s.mask, nil)
	runtime.UnlockOSThread()
	unix.Close(s.errW)
	runtime.KeepAlive(s)
	if errno != 0 {
		return 0, -1, fmt.Errorf("clone: %w", errno)
	}
	pid, pidfd = int(p), int(s.pidfd)
	fail := func(err error) (int, int, error) {
		_ = unix.PidfdSendSignal(pidfd, unix.SIGKILL, nil, 0)
		if !r.asSibling {
			var info unix.Siginfo
			_ = unix.Waitid(unix.P_PIDFD, pidfd, &info, unix.WEXITED, nil)
			unix.Close(pidfd)
			return 0, -1, err
		}
		return pid, pidfd, err
	}

	// The id maps, written by the caller as the host's root: the child
	// cannot write a map onto host ids itself.
	line := []byte(strconv.Itoa(0) + " " + strconv.Itoa(r.idBase) + " " + strconv.Itoa(r.idSize) + "\n")
	dir := "/proc/" + strconv.Itoa(pid) + "/"
	for _, f := range []string{"uid_map", "gid_map"} {
		if err := os.WriteFile(dir+f, line, 0); err != nil {
			return fail(fmt.Errorf("write %s: %w", f, err))
		}
	}
	if _, err := unix.Write(s.syncW, []byte{1}); err != nil {
		return fail(fmt.Errorf("release the child: %w", err))
	}
	unix.Close(s.syncW)
	s.syncW = -1

	// End of file on errR means the exec happened (the pipe is
	// close-on-exec); eight bytes are the errno of a failed step.
	var buf [8]byte
	n, err := readFull(errR, buf[:])
	if err != nil {
		return fail(fmt.Errorf("read the child's status: %w", err))
	}
	if n == 0 {
		return pid, pidfd, nil
	}
	var v uint64
	for i := range n {
		v |= uint64(buf[i]) << (8 * i)
	}
	if n != len(buf) {
		return fail(errors.New("short status from the child"))
	}
	return fail(fmt.Errorf("exec %s: %w", r.path, syscall.Errno(v)))
}

// readFull reads until buf is full or end of file, retrying EINTR.
func readFull(fd int, buf []byte) (int, error) {
	n := 0
	for n < len(buf) {
		m, err := unix.Read(fd, buf[n:])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return n, err
		}
		if m == 0 {
			break
		}
		n += m
	}
	return n, nil
}
