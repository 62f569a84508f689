package sandbox

import (
	"cmp"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlockhq/airlock/internal/pmtext"
	"github.com/airlockhq/airlock/internal/sbinit"
	"github.com/airlockhq/airlock/result"
)

// A disk breach's post-mortem: the largest files, and the directories
// holding the most, in the sandbox's writable directories, read from the
// host through descriptors opened before any command ran (the scratch
// tmpfs's /tmp; a writable root's upper layer, which init kept for the
// host) or through init's root while it lives (/workspace, /dev/shm; a
// volume's root, opened at create). The walk opens each
// directory relative to its parent's descriptor, one name at a time,
// with openat2's RESOLVE_NO_SYMLINKS, RESOLVE_NO_XDEV and
// RESOLVE_BENEATH: a symlink the sandbox planted (to the host's /, to
// a loop) is a name to list, never a path to follow, and no mount is
// crossed. Entries are described with fstatat(AT_SYMLINK_NOFOLLOW).
// Nothing is read of a file but its metadata. The walk is bounded in
// time (the post-mortem's budget), in entries and in depth, so a
// sandbox of a million files or a deep tree makes it neither slow nor
// large; it then says what it left out.

const (
	// postMortemEntries bounds the entries a disk post-mortem describes.
	postMortemEntries = 20000
	// postMortemDepth bounds how deep below a writable directory it
	// goes (and so the directory descriptors it holds at once).
	postMortemDepth = 24
)

// diskRoot is one writable directory to walk: its descriptor (O_PATH
// or not) and where the sandbox sees it.
type diskRoot struct {
	fd   int
	path string
}

// diskWalk is one disk post-mortem's walk.
type diskWalk struct {
	deadline time.Time
	// entries counts the entries described, against postMortemEntries.
	entries int
	// inodes says the breach is of inodes: directories are ranked by
	// how many entries they hold rather than by bytes.
	inodes bool
	// seen are the files with more than one link already counted: a
	// file linked a thousand times is one file.
	seen  map[[2]uint64]bool
	files []result.DiskEntry
	dirs  []result.DiskEntry
	// cut says why the walk stopped short: "" when it read everything.
	cut   string
	deep  bool
	unset bool // a directory could not be opened or read
}

// diskPostMortem walks the sandbox's writable directories for breach l
// (of bytes or inodes) until deadline.
func (s *Sandbox) diskPostMortem(l *result.Limit, deadline time.Time) (files, dirs []result.DiskEntry, note string) {
	w := &diskWalk{deadline: deadline, inodes: l.Unit == result.UnitInodes, seen: map[[2]uint64]bool{}}
	roots, closeRoots := s.diskRoots()
	defer closeRoots()
	for _, r := range roots {
		if w.cut != "" {
			break
		}
		fd, err := openDirBeneath(r.fd, ".")
		if err != nil {
			w.unset = true
			continue
		}
		w.dir(fd, r.path, 0)
		unix.Close(fd)
	}
	var notes []string
	if w.cut != "" {
		notes = append(notes, w.cut)
	}
	if w.deep {
		notes = append(notes, "directories deeper than "+strconv.Itoa(postMortemDepth)+" levels were not read")
	}
	if w.unset {
		notes = append(notes, "some directories could not be read")
	}
	return w.files, w.dirs, strings.Join(notes, "; ")
}

// diskRoots are the directories a disk breach filled: the volumes that
// are full, if any is (a volume has its own ceiling), else the scratch
// tmpfs's directories. The caller calls done when it has walked them.
func (s *Sandbox) diskRoots() (roots []diskRoot, done func()) {
	for _, v := range s.volumes {
		var st unix.Statfs_t
		if unix.Fstatfs(v.fd, &st) == nil && (int64(st.Bavail)*st.Bsize < volumeSlack || st.Ffree == 0) {
			roots = append(roots, diskRoot{fd: v.fd, path: v.target})
		}
	}
	if len(roots) > 0 {
		return roots, func() {}
	}
	if s.upper >= 0 {
		// The root's own layer: what commands wrote to system paths,
		// each under the path the sandbox sees it at ("" is /).
		roots = append(roots, diskRoot{fd: s.upper, path: ""})
	}
	dirs := []string{HomeDir, "/dev/shm"}
	if s.gv == nil {
		roots = append(roots, diskRoot{fd: s.scratch, path: "/tmp"})
	} else {
		// gVisor's scratch tmpfs holds /workspace and /tmp as
		// directories of its root; /dev/shm is the guest's memory.
		dirs = []string{HomeDir, "/tmp"}
	}
	var opened []int
	for _, dir := range dirs {
		// Through init's root: the sandbox cannot move these mounts
		// (its commands hold no capability in any namespace), and the
		// final element is opened without following a link.
		if f, err := s.openIn(dir); err == nil {
			fd, err := unix.Dup(int(f.Fd()))
			f.Close()
			if err == nil {
				opened = append(opened, fd)
				roots = append(roots, diskRoot{fd: fd, path: dir})
			}
		}
	}
	return roots, func() {
		for _, fd := range opened {
			unix.Close(fd)
		}
	}
}

// dir walks directory fd, which the sandbox sees at path, depth levels
// below a root.
func (w *diskWalk) dir(fd int, path string, depth int) {
	var own result.DiskEntry
	buf := make([]byte, 8192)
	var names []string
	for w.cut == "" {
		n, err := unix.Getdents(fd, buf)
		if err != nil {
			w.unset = true
			break
		}
		if n <= 0 {
			break
		}
		_, _, names = unix.ParseDirent(buf[:n], -1, names[:0])
		for _, name := range names {
			if w.entries >= postMortemEntries {
				w.cut = "only the first " + strconv.Itoa(postMortemEntries) + " entries were read"
			} else if time.Now().After(w.deadline) {
				w.cut = "the reading's time budget ran out"
			}
			if w.cut != "" {
				break
			}
			w.entries++
			own.Entries++
			var st unix.Stat_t
			if unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW) != nil {
				continue // gone since it was listed
			}
			size := st.Blocks * 512
			if st.Mode&unix.S_IFMT == unix.S_IFDIR {
				own.Bytes += size
				if depth+1 >= postMortemDepth {
					w.deep = true
					continue
				}
				cfd, err := openDirBeneath(fd, name)
				if err != nil {
					w.unset = true
					continue
				}
				w.dir(cfd, path+"/"+name, depth+1)
				unix.Close(cfd)
				continue
			}
			if st.Nlink > 1 {
				key := [2]uint64{st.Dev, st.Ino}
				if w.seen[key] {
					continue
				}
				w.seen[key] = true
			}
			own.Bytes += size
			if size > 0 {
				w.files = topEntries(w.files, result.DiskEntry{Path: path + "/" + name, Bytes: size}, byBytes)
			}
		}
	}
	if own.Entries > 0 && (own.Bytes > 0 || w.inodes) {
		own.Path = cmp.Or(path, "/")
		rank := byBytes
		if w.inodes {
			rank = byEntries
		}
		w.dirs = topEntries(w.dirs, own, rank)
	}
}

func byBytes(a, b result.DiskEntry) int {
	return cmp.Or(cmp.Compare(b.Bytes, a.Bytes), cmp.Compare(b.Entries, a.Entries))
}

func byEntries(a, b result.DiskEntry) int {
	return cmp.Or(cmp.Compare(b.Entries, a.Entries), cmp.Compare(b.Bytes, a.Bytes))
}

// topEntries adds e to top, keeping the first MaxPostMortemEntries by
// rank; the path is made safe to show only when it is kept.
func topEntries(top []result.DiskEntry, e result.DiskEntry, rank func(a, b result.DiskEntry) int) []result.DiskEntry {
	if len(top) == result.MaxPostMortemEntries && rank(e, top[len(top)-1]) >= 0 {
		return top
	}
	e.Path = pmtext.Path(e.Path)
	i, _ := slices.BinarySearchFunc(top, e, func(a, b result.DiskEntry) int {
		// After the equals: the first found stays first.
		if rank(a, b) <= 0 {
			return -1
		}
		return 1
	})
	top = slices.Insert(top, i, e)
	return top[:min(len(top), result.MaxPostMortemEntries)]
}

// openDirBeneath opens directory name of dirfd for reading: name is one
// element (or "."), never a symlink, never another mount, never above
// dirfd.
func openDirBeneath(dirfd int, name string) (int, error) {
	fd, err := unix.Openat2(dirfd, name, &unix.OpenHow{
		Flags:   unix.O_RDONLY | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_XDEV | unix.RESOLVE_BENEATH | unix.RESOLVE_NO_MAGICLINKS,
	})
	if errors.Is(err, unix.EINTR) || errors.Is(err, unix.EAGAIN) {
		// A rename elsewhere on the host raced the lookup: once more.
		fd, err = unix.Openat2(dirfd, name, &unix.OpenHow{
			Flags:   unix.O_RDONLY | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC,
			Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_XDEV | unix.RESOLVE_BENEATH | unix.RESOLVE_NO_MAGICLINKS,
		})
	}
	return fd, err
}

// openUpper opens the writable root's upper layer that init holds for
// the host (see sbinit's keepUpper), before any command runs: the one
// directory among init's descriptors from sbinit.UpperDirMinFD up that
// lies on the sandbox's scratch tmpfs. The descriptor is init's, a
// trusted process's, not a path the sandbox controls.
func (s *Sandbox) openUpper() (int, error) {
	if s.gv != nil {
		// Under gVisor the upper layer is a directory of the scratch
		// tmpfs (see imageLayers), which no path of the sandbox's
		// reaches.
		fd, err := unix.Openat(s.scratch, "upper", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
		if err != nil {
			return -1, fmt.Errorf("open the root's upper layer: %w", err)
		}
		return fd, nil
	}
	var scratch unix.Stat_t
	if err := unix.Fstat(s.scratch, &scratch); err != nil {
		return -1, fmt.Errorf("open the root's upper layer: %w", err)
	}
	dir := fmt.Sprintf("/proc/%d/fd", s.pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return -1, fmt.Errorf("open the root's upper layer: %w", err)
	}
	for _, e := range ents {
		if n, err := strconv.Atoi(e.Name()); err != nil || n < sbinit.UpperDirMinFD {
			continue
		}
		fd, err := unix.Open(dir+"/"+e.Name(), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			continue // not a directory, or closed since the listing
		}
		var st unix.Stat_t
		if unix.Fstat(fd, &st) == nil && st.Dev == scratch.Dev && st.Ino != scratch.Ino {
			return fd, nil
		}
		unix.Close(fd)
	}
	return -1, errors.New("open the root's upper layer: init holds no descriptor of it")
}
