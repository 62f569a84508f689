package inroot

import (
	"fmt"
	"io"
	"os"
	"path"
	"strings"

	"golang.org/x/sys/unix"
)

// Lookups inside a sandbox's whole root (sandbox.OpenRoot), for
// describing files: where a symlink leads, the names of its users. These
// only read, as the sandbox's user (AsUser); every step is openat2 with
// RESOLVE_IN_ROOT and symlinks refused, so an absolute or ".." path the
// sandbox wrote stays inside its root, and each symlink is read with
// readlinkat and resolved here, never followed by the kernel. Unlike the
// package's other calls they cross the sandbox's mounts (a link in the
// workspace may lead into its image), but never into a procfs or sysfs
// (whose links, such as /proc/1/cwd, read from the host, name host
// paths).

// MaxLinks bounds the symlinks one resolution follows, as Go's
// filepath.EvalSymlinks bounds them.
const MaxLinks = 255

// ErrUnresolved: a symlink's target could not be resolved inside the
// root (missing, a loop, a procfs or sysfs in the way, over a bound).
var ErrUnresolved = fmt.Errorf("%w: the symlink cannot be resolved inside the sandbox", ErrPath)

// inRoot confines a lookup from a sandbox's root: inside it, no
// symlinks, no magic links; mounts may be crossed (a virtual file system
// is refused by rootDir).
const inRoot = unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS

// rootRel is p, absolute in the root, as openat2 takes it below root.
func rootRel(p string) string {
	if r := strings.TrimLeft(path.Clean("/"+p), "/"); r != "" {
		return r
	}
	return "."
}

// rootOpen opens p, absolute in root, with flags, refusing a virtual
// file system.
func rootOpen(root *os.File, p string, flags uint64) (int, error) {
	var fd int
	var err error
	for {
		fd, err = unix.Openat2(int(root.Fd()), rootRel(p), &unix.OpenHow{Flags: flags | unix.O_CLOEXEC, Resolve: inRoot})
		if err != unix.EINTR && err != unix.EAGAIN {
			break
		}
	}
	if err != nil {
		return -1, mapErr(err)
	}
	var sf unix.Statfs_t
	if err := unix.Fstatfs(fd, &sf); err != nil || sf.Type == unix.PROC_SUPER_MAGIC || sf.Type == unix.SYSFS_MAGIC {
		unix.Close(fd)
		return -1, ErrUnresolved
	}
	return fd, nil
}

// lookupFunc describes name in the directory dir (absolute and free of
// symlinks): whether it is a symlink, and then what it holds.
type lookupFunc func(dir, name string) (link bool, target string, err error)

// evalSymlinks resolves every symlink of p (absolute) with look, as
// filepath.EvalSymlinks does: each element must exist; a ".." takes the
// parent of what the elements before it resolved to; a relative target
// is from the link's directory. At most MaxLinks links, and *steps
// lookups (a budget a caller shares across its calls).
func evalSymlinks(p string, look lookupFunc, steps *int) (string, error) {
	if !path.IsAbs(p) || len(p) > MaxPath {
		return "", ErrUnresolved
	}
	resolved, rest, links := "/", p, 0
	for rest != "" {
		var c string
		c, rest, _ = strings.Cut(rest, "/")
		switch c {
		case "", ".":
			continue
		case "..":
			resolved = path.Dir(resolved)
			continue
		}
		if *steps <= 0 {
			return "", ErrUnresolved
		}
		*steps--
		link, target, err := look(resolved, c)
		if err != nil {
			return "", err
		}
		if !link {
			resolved = path.Join(resolved, c)
			continue
		}
		if links++; links > MaxLinks || target == "" || len(target)+1+len(rest) > 2*MaxPath {
			return "", ErrUnresolved
		}
		if path.IsAbs(target) {
			resolved = "/"
		}
		rest = target + "/" + rest
	}
	return resolved, nil
}

// Resolver resolves symlinks inside a sandbox's root, its work bounded
// by a budget of lookups for all its calls (one request's).
type Resolver struct {
	root  *os.File
	steps int
}

// NewResolver resolves in root (sandbox.OpenRoot) with at most steps
// lookups in all.
func NewResolver(root *os.File, steps int) *Resolver { return &Resolver{root: root, steps: steps} }

// Resolve is filepath.EvalSymlinks of p (absolute in the root) inside
// the root: the path with no symlink left, and the entry it names.
func (r *Resolver) Resolve(p string) (string, Entry, error) {
	target, err := evalSymlinks(p, r.lookup, &r.steps)
	if err != nil {
		return "", Entry{}, err
	}
	dir, name := path.Split(target)
	if name == "" {
		fd, err := rootOpen(r.root, "/", unix.O_PATH|unix.O_DIRECTORY)
		if err != nil {
			return "", Entry{}, err
		}
		defer unix.Close(fd)
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			return "", Entry{}, mapErr(err)
		}
		return target, entryOf(&st, "", ""), nil
	}
	fd, err := rootOpen(r.root, dir, unix.O_PATH|unix.O_DIRECTORY)
	if err != nil {
		return "", Entry{}, err
	}
	defer unix.Close(fd)
	e, err := statAt(fd, name, "")
	if err == nil && e.IsSymlink() {
		err = ErrUnresolved // swapped for a link meanwhile
	}
	return target, e, err
}

func (r *Resolver) lookup(dir, name string) (bool, string, error) {
	fd, err := rootOpen(r.root, dir, unix.O_PATH|unix.O_DIRECTORY)
	if err != nil {
		return false, "", err
	}
	defer unix.Close(fd)
	e, err := statAt(fd, name, "")
	if err != nil {
		return false, "", err
	}
	return e.IsSymlink(), e.Target, nil
}

// ReadFileIn reads the regular file p (absolute in root: the sandbox's
// /etc/passwd), at most max bytes of it.
func ReadFileIn(root *os.File, p string, max int64) ([]byte, error) {
	fd, err := rootOpen(root, p, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), p)
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, ErrNotRegular
	}
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err == nil && int64(len(b)) > max {
		err = ErrTooLarge
	}
	return b, err
}
