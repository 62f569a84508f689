package inroot

import (
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Entry is one file as Stat and ReadDir see it: the file itself, never
// what a symlink points at.
type Entry struct {
	// Rel is its path below the directory the call started from.
	Rel  string
	Name string
	// Mode is st_mode: type and permission bits.
	Mode    uint32
	Size    int64
	UID     uint32
	GID     uint32
	ModTime time.Time
	// Target is a symlink's target, as stored (never followed).
	Target string
}

// IsDir, IsRegular and IsSymlink say what the entry is.
func (e *Entry) IsDir() bool     { return e.Mode&unix.S_IFMT == unix.S_IFDIR }
func (e *Entry) IsRegular() bool { return e.Mode&unix.S_IFMT == unix.S_IFREG }
func (e *Entry) IsSymlink() bool { return e.Mode&unix.S_IFMT == unix.S_IFLNK }

// MaxEntries bounds what one ReadDir or Remove walks: a sandbox can make
// directories of millions of entries, and the host's memory and time are
// not its to spend.
const MaxEntries = 100_000

// ErrTooMany: a walk met more than MaxEntries entries.
var ErrTooMany = fmt.Errorf("%w: more than %d entries", ErrTooLarge, MaxEntries)

// ErrExists: something is there already.
var ErrExists = errors.New("already exists")

// parent opens the directory holding rel's last element (O_PATH) and
// returns it with that element's name. rel "" is refused by Split.
func parent(dir *os.File, rel string) (int, string, error) {
	parts, err := Split(rel)
	if err != nil {
		return -1, "", err
	}
	name := parts[len(parts)-1]
	if len(parts) == 1 {
		fd, err := unix.Dup(int(dir.Fd()))
		return fd, name, err
	}
	fd, err := openAt(int(dir.Fd()), strings.Join(parts[:len(parts)-1], "/"), unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return -1, "", mapErr(err)
	}
	return fd, name, nil
}

func entryOf(st *unix.Stat_t, rel, name string) Entry {
	return Entry{Rel: rel, Name: name, Mode: st.Mode, Size: st.Size, UID: st.Uid, GID: st.Gid,
		ModTime: time.Unix(st.Mtim.Sec, st.Mtim.Nsec)}
}

// statAt describes name in the directory p, never following it.
func statAt(p int, name, rel string) (Entry, error) {
	var st unix.Stat_t
	if err := unix.Fstatat(p, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return Entry{}, mapErr(err)
	}
	e := entryOf(&st, rel, name)
	if e.IsSymlink() {
		buf := make([]byte, MaxPath)
		if n, err := unix.Readlinkat(p, name, buf); err == nil {
			e.Target = string(buf[:n])
		}
	}
	return e, nil
}

// Stat describes rel below dir; rel "" is dir itself.
func Stat(dir *os.File, rel string) (Entry, error) {
	if rel == "" {
		var st unix.Stat_t
		if err := unix.Fstat(int(dir.Fd()), &st); err != nil {
			return Entry{}, err
		}
		return entryOf(&st, "", ""), nil
	}
	p, name, err := parent(dir, rel)
	if err != nil {
		return Entry{}, err
	}
	defer unix.Close(p)
	return statAt(p, name, rel)
}

// OpenDir opens rel below dir ("" for dir itself) as a directory to read.
func OpenDir(dir *os.File, rel string) (*os.File, error) {
	name := "."
	if rel != "" {
		parts, err := Split(rel)
		if err != nil {
			return nil, err
		}
		name = strings.Join(parts, "/")
	}
	fd, err := openAt(int(dir.Fd()), name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return nil, mapErr(err)
	}
	return os.NewFile(uintptr(fd), rel), nil
}

// ReadDir lists the directory rel below dir ("" for dir itself), and the
// directories below it down to depth levels (1: the directory alone).
// Symlinks are listed, never entered. At most MaxEntries in all.
func ReadDir(dir *os.File, rel string, depth int) ([]Entry, error) {
	if depth < 1 {
		return nil, fmt.Errorf("%w: depth %d, want 1 or more", ErrPath, depth)
	}
	var out []Entry
	err := readDir(dir, rel, depth, &out)
	return out, err
}

func readDir(dir *os.File, rel string, depth int, out *[]Entry) error {
	d, err := OpenDir(dir, rel)
	if err != nil {
		return err
	}
	defer d.Close()
	names, err := d.Readdirnames(MaxEntries + 1 - len(*out))
	if err != nil && !errors.Is(err, io.EOF) {
		return mapErr(err)
	}
	// In order of name, each directory followed by what is below it, as
	// envd's walk (filepath.WalkDir) lists them.
	slices.Sort(names)
	for _, n := range names {
		if len(*out) >= MaxEntries {
			return ErrTooMany
		}
		sub := n
		if rel != "" {
			sub = rel + "/" + n
		}
		e, err := statAt(int(d.Fd()), n, sub)
		if errors.Is(err, ErrNotFound) {
			continue // gone meanwhile
		}
		if err != nil {
			return err
		}
		*out = append(*out, e)
		if depth > 1 && e.IsDir() {
			if err := readDir(dir, sub, depth-1, out); err != nil {
				return err
			}
		}
	}
	return nil
}

// Mkdir makes the directory rel below dir and any missing parents, given
// to uid:gid. It reports false when rel was a directory already;
// ErrExists when a file is in the way, ErrPath when a symlink is.
func Mkdir(dir *os.File, rel string, uid, gid int) (bool, error) {
	parts, err := Split(rel)
	if err != nil {
		return false, err
	}
	cur, err := unix.Dup(int(dir.Fd()))
	if err != nil {
		return false, err
	}
	defer func() { unix.Close(cur) }()
	made := false
	for _, p := range parts {
		made = false
		if err := unix.Mkdirat(cur, p, 0o755); err == nil {
			made = true
			_ = unix.Fchownat(cur, p, uid, gid, unix.AT_SYMLINK_NOFOLLOW)
		} else if !errors.Is(err, unix.EEXIST) {
			return false, mapErr(err)
		}
		next, err := openAt(cur, p, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0)
		if err != nil {
			var st unix.Stat_t
			if errors.Is(err, unix.ENOTDIR) && unix.Fstatat(cur, p, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Mode&unix.S_IFMT != unix.S_IFLNK {
				return false, fmt.Errorf("%w: %s is not a directory", ErrExists, p)
			}
			return false, mapErr(err)
		}
		unix.Close(cur)
		cur = next
	}
	return made, nil
}

// Remove removes rel below dir: a file or symlink (never what it points
// at), or a directory with everything in it (at most MaxEntries).
func Remove(dir *os.File, rel string) error {
	p, name, err := parent(dir, rel)
	if err != nil {
		return err
	}
	defer unix.Close(p)
	n := 0
	return removeAt(p, name, &n)
}

func removeAt(p int, name string, n *int) error {
	if *n++; *n > MaxEntries {
		return ErrTooMany
	}
	err := unix.Unlinkat(p, name, 0)
	if err == nil || !errors.Is(err, unix.EISDIR) {
		return mapErr(err)
	}
	d, err := openAt(p, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return mapErr(err)
	}
	f := os.NewFile(uintptr(d), name)
	defer f.Close()
	for {
		names, err := f.Readdirnames(1024)
		for _, c := range names {
			if err := removeAt(int(f.Fd()), c, n); err != nil && !errors.Is(err, ErrNotFound) {
				return err
			}
		}
		if err != nil || len(names) == 0 {
			break
		}
	}
	return mapErr(unix.Unlinkat(p, name, unix.AT_REMOVEDIR))
}

// Rename moves from to to, both below dir, replacing a file at to (as
// rename(2) does); neither path's directories may be symlinks.
func Rename(dir *os.File, from, to string) error {
	pf, fname, err := parent(dir, from)
	if err != nil {
		return err
	}
	defer unix.Close(pf)
	pt, tname, err := parent(dir, to)
	if err != nil {
		return err
	}
	defer unix.Close(pt)
	return mapErr(unix.Renameat(pf, fname, pt, tname))
}

// Symlink makes rel below dir a symlink holding target, as given: it is
// text, never resolved here, and a sandbox's own symlinks lead wherever
// they like inside it (every call of this package refuses to follow
// them). rel's directories must exist and not be symlinks.
func Symlink(dir *os.File, rel, target string) error {
	if target == "" || len(target) > MaxPath || strings.ContainsRune(target, 0) {
		return fmt.Errorf("%w: a symlink's target must be 1 to %d bytes without NUL", ErrPath, MaxPath)
	}
	p, name, err := parent(dir, rel)
	if err != nil {
		return err
	}
	defer unix.Close(p)
	return mapErr(unix.Symlinkat(target, p, name))
}

// Chmod sets the permission bits (and the sticky bit) of rel below dir,
// a directory or a regular file: never a symlink, never what one points
// at.
func Chmod(dir *os.File, rel string, perm uint32) error {
	name := "."
	if rel != "" {
		parts, err := Split(rel)
		if err != nil {
			return err
		}
		name = strings.Join(parts, "/")
	}
	fd, err := openAt(int(dir.Fd()), name, unix.O_PATH|unix.O_NOFOLLOW, 0)
	if err != nil {
		return mapErr(err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return mapErr(err)
	}
	if t := st.Mode & unix.S_IFMT; t != unix.S_IFDIR && t != unix.S_IFREG {
		return ErrNotRegular
	}
	// An O_PATH descriptor takes no fchmod; its /proc/self/fd path
	// names that very file, whatever its name is now. No set-id bits:
	// nothing here grants them.
	return mapErr(unix.Fchmodat(unix.AT_FDCWD, fmt.Sprintf("/proc/self/fd/%d", fd), perm&0o1777, 0))
}
