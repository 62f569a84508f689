package forkexec

import (
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// atFDCWD is AT_FDCWD (-100) as a system call argument.
const atFDCWD = ^uintptr(99)

// netnsChild is the child of StartNetns: on the caller's memory and
// descriptor table, it makes the namespace, brings lo up, records the
// descriptor in s, and exits. Its socket is closed before it exits; the
// namespace's descriptor is close-on-exec.
//
//go:norace
//go:nosplit
func netnsChild(s *forkSpec) {
	if _, _, e := syscall.RawSyscall(unix.SYS_UNSHARE, unix.CLONE_NEWNET, 0, 0); e != 0 {
		netnsFail(s, nsUnshare, e)
	}
	fd, _, e := syscall.RawSyscall6(unix.SYS_OPENAT, atFDCWD, uintptr(unsafe.Pointer(&s.nsPath[0])), unix.O_RDONLY|unix.O_CLOEXEC, 0, 0, 0)
	if e != 0 {
		netnsFail(s, nsOpen, e)
	}
	s.nsFD = int(fd)
	sock, _, e := syscall.RawSyscall(unix.SYS_SOCKET, unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if e != 0 {
		netnsFail(s, nsSocket, e)
	}
	if _, _, e := syscall.RawSyscall(unix.SYS_IOCTL, sock, unix.SIOCGIFFLAGS, uintptr(unsafe.Pointer(&s.ifr[0]))); e != 0 {
		syscall.RawSyscall(unix.SYS_CLOSE, sock, 0, 0)
		netnsFail(s, nsGetFlags, e)
	}
	// ifr_flags, a short after the 16-byte name.
	s.ifr[16] |= byte(unix.IFF_UP)
	if _, _, e := syscall.RawSyscall(unix.SYS_IOCTL, sock, unix.SIOCSIFFLAGS, uintptr(unsafe.Pointer(&s.ifr[0]))); e != 0 {
		syscall.RawSyscall(unix.SYS_CLOSE, sock, 0, 0)
		netnsFail(s, nsSetFlags, e)
	}
	syscall.RawSyscall(unix.SYS_CLOSE, sock, 0, 0)
	for {
		syscall.RawSyscall(unix.SYS_EXIT, 0, 0, 0)
	}
}
