// Package idmap makes idmapped mounts: a view of a directory tree in which
// every file's owner is shifted, without touching a file on disk. Image
// content is stored owned by a dedicated unprivileged host range and shown
// to each sandbox as owned by that sandbox's own range, so one read-only
// copy serves every sandbox, and no file of an image is ever owned by a
// host user that matters (host root least of all).
//
// Creating an idmapped mount needs CAP_SYS_ADMIN on the host, and a user
// namespace whose map describes the shift. The caller (root) gets both
// here; the detached mount it returns is then attached by the sandbox's
// init inside the sandbox's own mount namespace.
package idmap

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// Shift maps Size ids starting at From (on disk) to ids starting at To
// (as the mount shows them), for both uids and gids.
type Shift struct {
	From, To, Size uint32
}

func (s Shift) valid() error {
	if s.Size == 0 || uint64(s.From)+uint64(s.Size) > 1<<32-1 || uint64(s.To)+uint64(s.Size) > 1<<32-1 {
		return fmt.Errorf("idmap: invalid shift %d->%d size %d", s.From, s.To, s.Size)
	}
	return nil
}

// UserNS returns a user namespace, owned by the host's, whose uid and gid
// maps are the shift: id From+n inside is host id To+n. It holds no
// process; the returned descriptor keeps it alive.
//
// It forks: the child exists only until its maps are written and its
// namespace opened. The caller must be root.
func UserNS(s Shift) (*os.File, error) {
	if err := s.valid(); err != nil {
		return nil, err
	}
	pid, errno := forkHolder(uintptr(os.Getpid()))
	if errno != 0 {
		return nil, fmt.Errorf("idmap: clone user namespace: %w", errno)
	}
	defer func() {
		_ = unix.Kill(int(pid), unix.SIGKILL)
		var ws unix.WaitStatus
		for {
			if _, err := unix.Wait4(int(pid), &ws, 0, nil); err != unix.EINTR {
				break
			}
		}
	}()
	line := []byte(fmt.Sprintf("%d %d %d\n", s.From, s.To, s.Size))
	dir := "/proc/" + strconv.Itoa(int(pid))
	for _, f := range []string{"uid_map", "gid_map"} {
		if err := os.WriteFile(dir+"/"+f, line, 0); err != nil {
			return nil, fmt.Errorf("idmap: write %s: %w", f, err)
		}
	}
	ns, err := os.Open(dir + "/ns/user")
	if err != nil {
		return nil, fmt.Errorf("idmap: open user namespace: %w", err)
	}
	return ns, nil
}

// forkHolder forks a child in a new user namespace that does nothing but
// wait to be killed. The child runs only raw system calls on the forking
// thread's stack (no Go runtime, which the fork did not copy in working
// order), hence nosplit and norace. It shares the parent's descriptor
// table (CLONE_FILES) instead of holding copies, so it never keeps a
// socket open or a lock held that the parent lets go of.
//
//go:norace
//go:nosplit
func forkHolder(parent uintptr) (uintptr, syscall.Errno) {
	pid, _, errno := syscall.RawSyscall6(unix.SYS_CLONE, unix.CLONE_NEWUSER|unix.CLONE_FILES|uintptr(unix.SIGCHLD), 0, 0, 0, 0, 0)
	if errno != 0 || pid != 0 {
		return pid, errno
	}
	// The child. Die with the parent, and at once if it is already gone.
	syscall.RawSyscall(unix.SYS_PRCTL, unix.PR_SET_PDEATHSIG, uintptr(unix.SIGKILL), 0)
	if ppid, _, _ := syscall.RawSyscall(unix.SYS_GETPPID, 0, 0, 0); ppid != parent {
		syscall.RawSyscall(unix.SYS_EXIT_GROUP, 1, 0, 0)
	}
	for {
		syscall.RawSyscall6(unix.SYS_PPOLL, 0, 0, 0, 0, 0, 0)
	}
}

// Mount returns a detached, read-only, nosuid, nodev mount of the directory
// dir (the tree at dir alone, without mounts below it) whose ownership is
// shifted by the user namespace userns (from UserNS). The caller attaches it
// with move_mount(2) and closes the descriptor.
func Mount(dir string, userns *os.File) (*os.File, error) {
	return mount(dir, userns, unix.MOUNT_ATTR_RDONLY)
}

// MountWritable is Mount, writable: for a directory that is the
// sandbox's own to change (a volume). It is still nosuid and nodev.
func MountWritable(dir string, userns *os.File) (*os.File, error) {
	return mount(dir, userns, 0)
}

func mount(dir string, userns *os.File, extra uint64) (*os.File, error) {
	fd, err := unix.OpenTree(unix.AT_FDCWD, dir, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("idmap: open_tree %s: %w", dir, err)
	}
	attr := unix.MountAttr{
		Attr_set:  unix.MOUNT_ATTR_IDMAP | extra | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV,
		Userns_fd: uint64(userns.Fd()),
	}
	if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH, &attr); err != nil {
		unix.Close(fd)
		if errors.Is(err, unix.EINVAL) {
			return nil, fmt.Errorf("idmap: the file system holding %s does not support idmapped mounts: %w", dir, err)
		}
		return nil, fmt.Errorf("idmap: mount_setattr %s: %w", dir, err)
	}
	return os.NewFile(uintptr(fd), dir), nil
}
