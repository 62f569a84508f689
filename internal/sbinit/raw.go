package sbinit

import (
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The mount calls below bypass the Go runtime's syscall bookkeeping
// (syscall.RawSyscall). Each takes tens of microseconds or more (a new
// superblock, a mount-tree lock, an RCU grace period on unmount), longer
// than the runtime's monitor waits before it hands a thread's processor to
// another thread; with one processor that wakes, or first creates, a
// thread that finds nothing to do. Init's setup runs on one goroutine, so
// holding its processor through the call costs nothing, and init keeps
// fewer threads, which also makes its all-thread calls (the uid change,
// Landlock) cheaper.

func mount(src, dst, fstype string, flags uintptr, data string) error {
	s, err := syscall.BytePtrFromString(src)
	if err != nil {
		return err
	}
	d, err := syscall.BytePtrFromString(dst)
	if err != nil {
		return err
	}
	t, err := syscall.BytePtrFromString(fstype)
	if err != nil {
		return err
	}
	var dp *byte
	if data != "" {
		if dp, err = syscall.BytePtrFromString(data); err != nil {
			return err
		}
	}
	_, _, e := syscall.RawSyscall6(unix.SYS_MOUNT, uintptr(unsafe.Pointer(s)), uintptr(unsafe.Pointer(d)),
		uintptr(unsafe.Pointer(t)), flags, uintptr(unsafe.Pointer(dp)), 0)
	if e != 0 {
		return e
	}
	return nil
}

func unmount(p string, flags int) error {
	b, err := syscall.BytePtrFromString(p)
	if err != nil {
		return err
	}
	if _, _, e := syscall.RawSyscall(unix.SYS_UMOUNT2, uintptr(unsafe.Pointer(b)), uintptr(flags), 0); e != 0 {
		return e
	}
	return nil
}

func pivotRoot(newRoot, putOld string) error {
	n, err := syscall.BytePtrFromString(newRoot)
	if err != nil {
		return err
	}
	o, err := syscall.BytePtrFromString(putOld)
	if err != nil {
		return err
	}
	if _, _, e := syscall.RawSyscall(unix.SYS_PIVOT_ROOT, uintptr(unsafe.Pointer(n)), uintptr(unsafe.Pointer(o)), 0); e != 0 {
		return e
	}
	return nil
}
