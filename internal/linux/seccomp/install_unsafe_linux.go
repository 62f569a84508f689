package seccomp

import (
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// setModeFilter is seccomp(SECCOMP_SET_MODE_FILTER, flags, prog) with prog
// describing filter, which must not be empty.
func setModeFilter(flags uintptr, filter []unix.SockFilter) (uintptr, unix.Errno) {
	prog := unix.SockFprog{Len: uint16(len(filter)), Filter: &filter[0]}
	r, _, errno := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, flags, uintptr(unsafe.Pointer(&prog)))
	runtime.KeepAlive(filter)
	return r, errno
}
