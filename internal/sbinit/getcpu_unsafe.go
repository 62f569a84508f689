package sbinit

import (
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// getcpu is getcpu(2): the processor the calling thread runs on.
func getcpu() (uint32, syscall.Errno) {
	var cpu uint32
	_, _, errno := unix.RawSyscall(unix.SYS_GETCPU, uintptr(unsafe.Pointer(&cpu)), 0, 0)
	return cpu, errno
}
