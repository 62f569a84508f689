package sbinit

import (
	"fmt"
	"os"
	"path/filepath"
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

// setattr sets mount flags (unix.MOUNT_ATTR_*) on the mount at p, and with
// recursive on every mount below it, leaving its other flags as they are:
// one mount_setattr (Linux 5.12). A remount instead needs a statfs first,
// to repeat the flags the kernel locked on mounts that came from the host,
// and one call per submount.
func setattr(p string, attr uint64, recursive bool) error {
	b, err := syscall.BytePtrFromString(p)
	if err != nil {
		return err
	}
	a := unix.MountAttr{Attr_set: attr}
	flags := uintptr(unix.AT_SYMLINK_NOFOLLOW)
	if recursive {
		flags |= unix.AT_RECURSIVE
	}
	cwd := unix.AT_FDCWD
	_, _, e := syscall.RawSyscall6(unix.SYS_MOUNT_SETATTR, uintptr(cwd), uintptr(unsafe.Pointer(b)), flags,
		uintptr(unsafe.Pointer(&a)), unsafe.Sizeof(a), 0)
	switch e {
	case 0:
		return nil
	case unix.ENOSYS:
		return fmt.Errorf("mount_setattr %s: %w (airlock needs Linux 5.12 or newer)", p, e)
	}
	return fmt.Errorf("mount_setattr %s: %w", p, e)
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

// The file helpers below make the tree of a fresh root with plain system
// calls. The os package would try to add every file it opens to the Go
// poller (two fcntl calls and an epoll_ctl that fails for a regular file,
// then two more fcntl calls) and stat each level before making it: four
// to six extra calls per file.

// mkdirAll makes directory p, mode 0755, and any parent missing, and
// accepts a directory already there.
func mkdirAll(p string) error {
	err := unix.Mkdir(p, 0o755)
	if err == unix.ENOENT {
		if err := mkdirAll(filepath.Dir(p)); err != nil {
			return err
		}
		err = unix.Mkdir(p, 0o755)
	}
	if err == unix.EEXIST {
		var st unix.Stat_t
		if unix.Stat(p, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR {
			return nil
		}
		return &os.PathError{Op: "mkdir", Path: p, Err: unix.ENOTDIR}
	}
	if err != nil {
		return &os.PathError{Op: "mkdir", Path: p, Err: err}
	}
	return nil
}

// createFile opens p for writing, creating it (and its missing parents)
// with mode perm, truncated when trunc.
func createFile(p string, perm uint32, trunc bool) (int, error) {
	flags := unix.O_WRONLY | unix.O_CREAT | unix.O_CLOEXEC
	if trunc {
		flags |= unix.O_TRUNC
	}
	fd, err := unix.Open(p, flags, perm)
	if err == unix.ENOENT {
		if err := mkdirAll(filepath.Dir(p)); err != nil {
			return -1, err
		}
		fd, err = unix.Open(p, flags, perm)
	}
	if err != nil {
		return -1, &os.PathError{Op: "open", Path: p, Err: err}
	}
	return fd, nil
}

// writeFile is os.WriteFile without the poller.
func writeFile(p string, data []byte, perm uint32) error {
	fd, err := createFile(p, perm, true)
	if err != nil {
		return err
	}
	for len(data) > 0 {
		n, err := unix.Write(fd, data)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			unix.Close(fd)
			return &os.PathError{Op: "write", Path: p, Err: err}
		}
		data = data[n:]
	}
	if err := unix.Close(fd); err != nil {
		return &os.PathError{Op: "close", Path: p, Err: err}
	}
	return nil
}
