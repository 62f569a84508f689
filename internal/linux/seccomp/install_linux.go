package seccomp

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// ErrThreadSync is wrapped by the error Install returns when the kernel could
// not apply the filter to every thread.
var ErrThreadSync = errors.New("seccomp: cannot apply filter to all threads")

// Install loads filter, a program from [Profile.Compile], as a seccomp filter
// for every thread of the calling process, using
// seccomp(SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC). Threads and
// processes created afterwards inherit it, across execve too; it cannot be
// removed, only narrowed by further filters.
//
// The calling thread must have no_new_privs set (or hold CAP_SYS_ADMIN in
// its user namespace); otherwise the kernel refuses with EACCES. In Go,
// no_new_privs is a per-thread attribute like all of prctl's: either set it
// on every thread with syscall.AllThreadsSyscall(SYS_PRCTL,
// PR_SET_NO_NEW_PRIVS, 1, 0) (cgo-free programs only), or call
// runtime.LockOSThread before prctl(PR_SET_NO_NEW_PRIVS, 1) and keep the
// goroutine locked until Install returns. With TSYNC the kernel then sets
// no_new_privs on the other threads as it filters them.
//
// TSYNC fails if another thread already has a filter that the calling
// thread's filter does not descend from; the kernel then installs nothing,
// and the returned error wraps [ErrThreadSync] and names that thread.
func Install(filter []unix.SockFilter) error {
	if len(filter) == 0 || len(filter) > unix.BPF_MAXINSNS {
		return fmt.Errorf("seccomp: filter length %d outside 1-%d", len(filter), unix.BPF_MAXINSNS)
	}
	r, errno := setModeFilter(unix.SECCOMP_FILTER_FLAG_TSYNC, filter)
	switch {
	case errno == unix.EACCES:
		return fmt.Errorf("seccomp: installing filter: %w: no_new_privs is not set on the calling thread "+
			"(set PR_SET_NO_NEW_PRIVS on the same OS thread first) and it lacks CAP_SYS_ADMIN", errno)
	case errno == unix.EINVAL:
		return fmt.Errorf("seccomp: installing filter: %w: the kernel rejected the program or lacks "+
			"seccomp filter support (CONFIG_SECCOMP_FILTER)", errno)
	case errno != 0:
		return fmt.Errorf("seccomp: installing filter: %w", errno)
	case r != 0:
		// With TSYNC a positive result is the id of the first thread
		// that could not be synchronized.
		return fmt.Errorf("%w: thread %d has a seccomp filter of its own; nothing was installed", ErrThreadSync, r)
	}
	return nil
}
