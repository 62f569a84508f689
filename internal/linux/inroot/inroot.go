// Package inroot reads and writes files below a directory that untrusted
// code controls — a sandbox's workspace, reached from the host — without
// ever leaving it. Every step is openat2 relative to a descriptor already
// inside, with symlinks, magic links and mount crossings refused, so a
// sandbox that plants a symlink (or swaps a directory for one between two
// steps) cannot make the host read or write anywhere else.
package inroot

import (
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"time"
	"unicode/utf8"

	"golang.org/x/sys/unix"

	"github.com/airlockhq/airlock/internal/errdefs"
)

// Errors callers map to answers, in the classes of errdefs.
var (
	// ErrPath: the path is not a clean relative path.
	ErrPath = errdefs.New(errdefs.ErrInvalid, "invalid path")
	// ErrNotFound: nothing there.
	ErrNotFound = errdefs.New(errdefs.ErrNotFound, "no such file")
	// ErrNotRegular: not a regular file (a directory, a symlink, a device).
	ErrNotRegular = errdefs.New(errdefs.ErrInvalid, "not a regular file")
	// ErrTooLarge: over the caller's byte cap.
	ErrTooLarge = errdefs.New(errdefs.ErrLimit, "file too large")
	// ErrNoSpace: the file system (the sandbox's disk ceiling) is full.
	ErrNoSpace = errdefs.New(errdefs.ErrLimit, "no space left (the sandbox's disk ceiling)")
)

// MaxPath bounds a relative path.
const MaxPath = 4096

// resolve confines every lookup: below the starting directory, no
// symlinks at all, no /proc magic links, no other mounts.
const resolve = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV

// Split checks that rel is a clean relative path ("a/b.txt") and returns
// its elements: no leading "/", no empty, "." or ".." elements, no NUL,
// valid UTF-8, at most MaxPath bytes.
func Split(rel string) ([]string, error) {
	switch {
	case rel == "" || len(rel) > MaxPath:
		return nil, fmt.Errorf("%w: want 1 to %d bytes", ErrPath, MaxPath)
	case strings.HasPrefix(rel, "/"):
		return nil, fmt.Errorf("%w: %q is absolute; paths are relative to the workspace", ErrPath, rel)
	case strings.ContainsRune(rel, 0) || !utf8.ValidString(rel):
		return nil, fmt.Errorf("%w: NUL byte or invalid UTF-8", ErrPath)
	}
	parts := strings.Split(rel, "/")
	for _, p := range parts {
		if p == "" || p == "." || p == ".." {
			return nil, fmt.Errorf("%w: %q has an empty, \".\" or \"..\" element", ErrPath, rel)
		}
	}
	return parts, nil
}

func openAt(dir int, name string, flags uint64, mode uint64) (int, error) {
	for {
		fd, err := unix.Openat2(dir, name, &unix.OpenHow{Flags: flags | unix.O_CLOEXEC, Mode: mode, Resolve: resolve})
		if err == unix.EINTR || err == unix.EAGAIN {
			continue
		}
		return fd, err
	}
}

// mapErr turns lookup errors into the package's classes.
func mapErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, unix.ENOENT):
		return ErrNotFound
	case errors.Is(err, unix.ELOOP), errors.Is(err, unix.EXDEV), errors.Is(err, unix.ENOTDIR):
		// A symlink, another mount, or a file where a directory was
		// expected: refused, whatever it points at.
		return fmt.Errorf("%w: a symlink, mount or file is in the way", ErrPath)
	case errors.Is(err, unix.EISDIR), errors.Is(err, unix.ENXIO):
		// A directory, or a FIFO with no reader (O_NONBLOCK keeps the
		// open from waiting on one).
		return ErrNotRegular
	case errors.Is(err, unix.ENOSPC), errors.Is(err, unix.EDQUOT):
		return ErrNoSpace
	}
	return err
}

// Open opens the regular file rel below dir for reading.
func Open(dir *os.File, rel string) (*os.File, error) {
	parts, err := Split(rel)
	if err != nil {
		return nil, err
	}
	fd, err := openAt(int(dir.Fd()), strings.Join(parts, "/"), unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, mapErr(err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		unix.Close(fd)
		return nil, ErrNotRegular
	}
	return os.NewFile(uintptr(fd), rel), nil
}

// WriteFile writes r to rel below dir, creating missing parent
// directories, replacing an existing regular file, and giving what it
// creates to uid:gid. At most max bytes are written (ErrTooLarge beyond,
// and the file is removed). It returns the bytes written.
func WriteFile(dir *os.File, rel string, r io.Reader, max int64, uid, gid int) (int64, error) {
	return WriteFileThen(dir, rel, r, max, uid, gid, nil)
}

// WriteFileThen is WriteFile, then calls then (if not nil) with the file
// written, still open: what it sets is set on that file, whatever the
// name is given to meanwhile.
func WriteFileThen(dir *os.File, rel string, r io.Reader, max int64, uid, gid int, then func(*os.File) error) (int64, error) {
	parts, err := Split(rel)
	if err != nil {
		return 0, err
	}
	cur, err := unix.Dup(int(dir.Fd()))
	if err != nil {
		return 0, err
	}
	defer func() { unix.Close(cur) }()
	for _, p := range parts[:len(parts)-1] {
		if err := unix.Mkdirat(cur, p, 0o755); err == nil {
			_ = unix.Fchownat(cur, p, uid, gid, unix.AT_SYMLINK_NOFOLLOW)
		} else if !errors.Is(err, unix.EEXIST) {
			return 0, mapErr(err)
		}
		next, err := openAt(cur, p, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0)
		if err != nil {
			return 0, mapErr(err)
		}
		unix.Close(cur)
		cur = next
	}
	name := parts[len(parts)-1]
	fd, err := openAt(cur, name, unix.O_WRONLY|unix.O_CREAT|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0o644)
	if err != nil {
		return 0, mapErr(err)
	}
	f := os.NewFile(uintptr(fd), name)
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		// A FIFO or device planted under the name is never written to.
		return 0, ErrNotRegular
	}
	if err := unix.Ftruncate(fd, 0); err != nil {
		return 0, mapErr(err)
	}
	_ = unix.Fchown(fd, uid, gid)
	// A reader bounded already within max is copied as it is: a
	// LimitedReader of a file lets the kernel copy the data itself.
	src := io.LimitReader(r, max+1)
	if lr, ok := r.(*io.LimitedReader); ok && lr.N <= max {
		src = lr
	}
	n, err := io.Copy(f, src)
	if err == nil && n > max {
		err = ErrTooLarge
	}
	if err != nil {
		_ = unix.Unlinkat(cur, name, 0)
		if errors.Is(err, ErrTooLarge) {
			return 0, err
		}
		return 0, mapErr(err)
	}
	if then != nil {
		if err := then(f); err != nil {
			return n, err
		}
	}
	return n, nil
}

// AsUser calls fn on an OS thread whose file-system uid and gid are uid
// and gid, so that what fn creates belongs to that user and every access
// is checked as that user's — never with the host's root powers. A
// sandbox's file system lives in its own user namespace, where the host's
// root has no id at all (creating files there as root fails with
// EOVERFLOW). The thread goes back to its own ids afterwards; if it
// cannot, it is never unlocked, so the Go runtime retires it.
func AsUser(uid, gid int, fn func() error) error {
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		err, restored := asUser(uid, gid, fn)
		if restored {
			runtime.UnlockOSThread()
		}
		done <- err
	}()
	return <-done
}

func asUser(uid, gid int, fn func() error) (err error, restored bool) {
	oldGid, _ := unix.SetfsgidRetGid(-1)
	oldUid, _ := unix.SetfsuidRetUid(-1)
	// setfsuid reports no errors: read the ids back to know they took.
	unix.SetfsgidRetGid(gid)
	unix.SetfsuidRetUid(uid)
	defer func() {
		unix.SetfsuidRetUid(oldUid)
		unix.SetfsgidRetGid(oldGid)
		u, _ := unix.SetfsuidRetUid(-1)
		g, _ := unix.SetfsgidRetGid(-1)
		restored = u == oldUid && g == oldGid
	}()
	if u, _ := unix.SetfsuidRetUid(-1); u != uid {
		return fmt.Errorf("could not take file-system uid %d", uid), false
	}
	if g, _ := unix.SetfsgidRetGid(-1); g != gid {
		return fmt.Errorf("could not take file-system gid %d", gid), false
	}
	return fn(), false
}

// sendFile copies size bytes of src, from its offset, to the file dst,
// moving src's offset on by what it copied.
func sendFile(dst int, src *os.File, size int64) (int64, error) {
	off, err := src.Seek(0, io.SeekCurrent)
	if err != nil {
		return 0, err
	}
	start := off
	for off-start < size {
		k, err := unix.Sendfile(dst, int(src.Fd()), &off, int(min(size-(off-start), 1<<30)))
		if err == unix.EINTR || err == unix.EAGAIN {
			continue
		}
		if err != nil {
			return off - start, err
		}
		if k == 0 {
			break // the source ended
		}
	}
	_, err = src.Seek(off, io.SeekStart)
	return off - start, err
}

// CreateNew makes name, a new regular file directly in dir (one path
// element: no directories made), with r's size bytes, perm (not set-id)
// and modified time mtime. Run as the file's owner (AsUser): what it
// makes is that user's, with no chown. Something already there under the
// name, a planted FIFO or symlink included, is an error (ErrExists): it
// is never written through. The fewest system calls for the most files:
// a snapshot's restore into a fresh sandbox.
func CreateNew(dir *os.File, name string, r io.Reader, size int64, perm uint32, mtime time.Time) error {
	if name == "" || name == "." || name == ".." || strings.ContainsRune(name, '/') || strings.ContainsRune(name, 0) || len(name) > 255 {
		return fmt.Errorf("%w: %q is not a file name", ErrPath, name)
	}
	fd, err := openAt(int(dir.Fd()), name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW, uint64(perm&0o777))
	if errors.Is(err, unix.EEXIST) {
		return fmt.Errorf("%w: %s", ErrExists, name)
	}
	if err != nil {
		return mapErr(err)
	}
	f := os.NewFile(uintptr(fd), name)
	defer f.Close()
	var n int64
	if lr, ok := r.(*io.LimitedReader); ok && lr.N == size {
		if src, ok := lr.R.(*os.File); ok {
			// A file's data: the kernel copies it, page cache to
			// page cache (copy_file_range does not cross file systems).
			n, err = sendFile(fd, src, size)
			lr.N -= n
		} else {
			n, err = io.Copy(f, lr)
		}
	} else {
		n, err = io.Copy(f, io.LimitReader(r, size))
	}
	if err == nil && n != size {
		err = fmt.Errorf("%d of %d bytes", n, size)
	}
	if err == nil && perm&0o022 != 0 {
		// The process's umask took these bits at the open.
		err = f.Chmod(os.FileMode(perm & 0o777))
	}
	if err == nil {
		t := unix.NsecToTimeval(mtime.UnixNano())
		err = unix.Futimes(fd, []unix.Timeval{t, t})
	}
	if err != nil {
		_ = unix.Unlinkat(int(dir.Fd()), name, 0)
		return mapErr(err)
	}
	return nil
}
