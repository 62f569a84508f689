package main

import (
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// sigqueueInit sends sig to init (pid 1) with rt_sigqueueinfo, as a
// sigqueue(3) from this process (si_code SI_QUEUE) would.
func sigqueueInit(sig int) syscall.Errno {
	var info [128]byte
	*(*int32)(unsafe.Pointer(&info[0])) = int32(sig)
	*(*int32)(unsafe.Pointer(&info[8])) = -1 // SI_QUEUE
	_, _, e := unix.Syscall(unix.SYS_RT_SIGQUEUEINFO, 1, uintptr(sig), uintptr(unsafe.Pointer(&info[0])))
	return e
}

// ioSetup is io_setup(2) for n events; the context it makes is left to
// the process's exit.
func ioSetup(n int) syscall.Errno {
	var ctx uintptr
	_, _, e := unix.Syscall(unix.SYS_IO_SETUP, uintptr(n), uintptr(unsafe.Pointer(&ctx)), 0)
	return e
}

// ioctlByte is ioctl(fd, req, c), for the requests that take a pointer to
// one byte (TIOCSTI).
func ioctlByte(fd int, req uintptr, c *byte) syscall.Errno {
	_, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), req, uintptr(unsafe.Pointer(c)))
	return e
}
