package sandbox

import (
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ioctlUint32 is ioctl(fd, req, &v) for a request that writes a 32-bit
// value (NS_GET_OWNER_UID), and returns v.
func ioctlUint32(fd, req uintptr) (uint32, syscall.Errno) {
	var v uint32
	_, _, e := unix.Syscall(unix.SYS_IOCTL, fd, req, uintptr(unsafe.Pointer(&v)))
	return v, e
}

// ioSetup is io_setup(2) for n events; the caller destroys the context
// it returns with io_destroy.
func ioSetup(n uintptr) (uintptr, syscall.Errno) {
	var ctx uintptr
	_, _, e := unix.Syscall(unix.SYS_IO_SETUP, n, uintptr(unsafe.Pointer(&ctx)), 0)
	return ctx, e
}
