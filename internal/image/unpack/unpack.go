// Package unpack applies tar layers to a root directory. The archives are
// untrusted: every path is resolved inside the root (openat2 with
// RESOLVE_IN_ROOT, so no name, symlink or hardlink can lead outside it),
// the final element of a path is never followed, and what has no place in
// a shared read-only image is refused or neutralised:
//
//   - absolute names and names with ".." are refused;
//   - duplicate entries within one layer are refused;
//   - device nodes and FIFOs are skipped (a sandbox gets its own /dev, and
//     a FIFO on a shared image would be a channel between sandboxes);
//   - setuid and setgid bits are cleared, and extended attributes (file
//     capabilities among them) are never applied;
//   - owners are shifted into the image id range (id n becomes host id
//     IDBase+n; ids past the range become nobody), never host root;
//   - the total size and the number of entries are capped.
//
// OCI whiteouts (".wh.NAME") and opaque directories (".wh..wh..opq") are
// honoured when applying image layers.
package unpack

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Errors an import reports.
var (
	// ErrUnsafe: an entry tried to leave the root or is not allowed.
	ErrUnsafe = errors.New("unsafe archive entry")
	// ErrLimit: the archive exceeds a cap.
	ErrLimit = errors.New("archive exceeds a limit")
	// ErrFormat: not a tar archive, or a malformed one.
	ErrFormat = errors.New("malformed archive")
)

// Limits cap what one image may unpack to.
type Limits struct {
	// Bytes caps the total size of regular files. Default 16 GiB.
	Bytes int64
	// Entries caps the number of entries over all layers. Default 1<<20.
	Entries int
}

// WithDefaults fills in the defaults of unset caps.
func (l Limits) WithDefaults() Limits {
	if l.Bytes <= 0 {
		l.Bytes = 16 << 30
	}
	if l.Entries <= 0 {
		l.Entries = 1 << 20
	}
	return l
}

// IDRange is how many ids an image has: 0..IDRange-1.
const IDRange = 65536

// nobody is where ids outside the range go.
const nobody = 65534

// MaxName bounds an entry's name and a link's target.
const MaxName = 4096

// Report says what an import did beyond the plain copy.
type Report struct {
	Entries int   `json:"entries"`
	Bytes   int64 `json:"bytes"`
	// Skipped counts device nodes and FIFOs left out.
	Skipped int `json:"skipped,omitempty"`
	// SetIDCleared counts files whose setuid or setgid bit was cleared.
	SetIDCleared int `json:"setid_cleared,omitempty"`
	// IDsClamped counts entries whose owner was outside the id range.
	IDsClamped int `json:"ids_clamped,omitempty"`
}

// Unpacker applies layers, in order, to one root directory.
type Unpacker struct {
	root   int // O_PATH descriptor of the root
	idBase int
	lim    Limits
	rep    Report

	// Per layer: the names the layer has (for duplicates), and every
	// directory it created or named (kept by an opaque marker).
	names map[string]bool
	mine  map[string]bool

	// The parent directory last resolved, reused while entries stay in it.
	lastDir string
	lastFD  int
	// stale is set when an entry removed or replaced something: what a
	// path resolves to may have changed, so the cached parent is dropped
	// once the entry is done (not before: the entry may be using it).
	stale bool
}

// New prepares to unpack into root, an existing empty directory that only
// the caller can reach. Owners are shifted by idBase.
func New(root string, idBase uint32, lim Limits) (*Unpacker, error) {
	lim = lim.WithDefaults()
	fd, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	if err != nil {
		return nil, fmt.Errorf("unpack: %w", err)
	}
	u := &Unpacker{root: fd, idBase: int(idBase), lim: lim, lastFD: -1}
	if err := unix.Fchownat(fd, "", u.idBase, u.idBase, unix.AT_EMPTY_PATH); err != nil {
		u.Close()
		return nil, fmt.Errorf("unpack: %w", err)
	}
	if err := os.Chmod(root, 0o755); err != nil {
		u.Close()
		return nil, fmt.Errorf("unpack: %w", err)
	}
	return u, nil
}

// Close releases the unpacker's descriptors.
func (u *Unpacker) Close() error {
	u.forget()
	if u.root >= 0 {
		unix.Close(u.root)
		u.root = -1
	}
	return nil
}

// Report is what has been done so far.
func (u *Unpacker) Report() Report { return u.rep }

// Apply unpacks one uncompressed tar stream. With whiteouts, the stream is
// an image layer and its whiteout entries remove what earlier layers made.
func (u *Unpacker) Apply(r io.Reader, whiteouts bool) error {
	u.names = make(map[string]bool)
	u.mine = make(map[string]bool)
	u.forget()
	tr := tar.NewReader(r)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%w: %w", ErrFormat, err)
		}
		err = u.entry(tr, hdr, whiteouts)
		if u.stale {
			u.forget()
			u.stale = false
		}
		if err != nil {
			return err
		}
	}
}

// Clean checks an entry name and returns it relative to the root, without
// a trailing slash; "" is the root itself.
func Clean(name string) (string, error) {
	if len(name) > MaxName || strings.ContainsRune(name, 0) {
		return "", fmt.Errorf("%w: name too long or with a NUL byte", ErrUnsafe)
	}
	if strings.HasPrefix(name, "/") {
		return "", fmt.Errorf("%w: %q is absolute", ErrUnsafe, clip(name))
	}
	var parts []string
	for _, p := range strings.Split(name, "/") {
		switch p {
		case "", ".":
			continue
		case "..":
			return "", fmt.Errorf("%w: %q climbs out of the root (a .. component)", ErrUnsafe, clip(name))
		}
		parts = append(parts, p)
	}
	return strings.Join(parts, "/"), nil
}

func clip(s string) string {
	if len(s) > 120 {
		return s[:120] + "..."
	}
	return s
}

func split(p string) (dir, base string) {
	i := strings.LastIndexByte(p, '/')
	if i < 0 {
		return "", p
	}
	return p[:i], p[i+1:]
}

func (u *Unpacker) entry(tr *tar.Reader, hdr *tar.Header, whiteouts bool) error {
	switch hdr.Typeflag {
	case tar.TypeXGlobalHeader:
		return nil
	}
	name, err := Clean(hdr.Name)
	if err != nil {
		return err
	}
	u.rep.Entries++
	if u.rep.Entries > u.lim.Entries {
		return fmt.Errorf("%w: more than %d entries", ErrLimit, u.lim.Entries)
	}
	if u.names[name] {
		return fmt.Errorf("%w: %q appears twice in one layer", ErrUnsafe, clip(name))
	}
	u.names[name] = true
	dir, base := split(name)
	if whiteouts && strings.HasPrefix(base, ".wh.") {
		return u.whiteout(dir, strings.TrimPrefix(base, ".wh."))
	}
	if name == "" {
		if hdr.Typeflag != tar.TypeDir {
			return fmt.Errorf("%w: the root entry is not a directory", ErrUnsafe)
		}
		return u.attrs(u.root, "", hdr, unix.AT_EMPTY_PATH)
	}
	for p := dir; p != ""; p, _ = split(p) {
		u.mine[p] = true
	}
	switch hdr.Typeflag {
	case tar.TypeChar, tar.TypeBlock, tar.TypeFifo:
		u.rep.Skipped++
		return nil
	case tar.TypeDir, tar.TypeReg, tar.TypeSymlink, tar.TypeLink: // archive/tar reads the old TypeRegA as TypeReg or TypeDir
	default:
		return fmt.Errorf("%w: %q has unsupported type %q", ErrUnsafe, clip(name), hdr.Typeflag)
	}
	pfd, err := u.parent(dir)
	if err != nil {
		return fmt.Errorf("%q: %w", clip(name), err)
	}
	switch hdr.Typeflag {
	case tar.TypeDir:
		u.mine[name] = true
		err = u.dir(pfd, base, hdr)
	case tar.TypeReg:
		err = u.file(pfd, base, hdr, tr)
	case tar.TypeSymlink:
		err = u.symlink(pfd, base, hdr)
	case tar.TypeLink:
		err = u.hardlink(pfd, base, hdr)
	}
	if err != nil {
		return fmt.Errorf("%q: %w", clip(name), err)
	}
	return nil
}

// resolve is how every path is looked up: inside the root, with ".." and
// absolute symlinks clamped to it, and no magic links.
const resolve = unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV

// parent returns a descriptor of directory dir (relative to the root),
// creating missing directories on the way. The Unpacker owns it.
func (u *Unpacker) parent(dir string) (int, error) {
	if dir == "" {
		return u.root, nil
	}
	if dir == u.lastDir && u.lastFD >= 0 {
		return u.lastFD, nil
	}
	u.forget()
	fd, err := unix.Openat2(u.root, dir, &unix.OpenHow{Flags: unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC, Resolve: resolve})
	if errors.Is(err, unix.ENOENT) {
		fd, err = u.mkdirs(dir)
	}
	if err != nil {
		if errors.Is(err, unix.ENOTDIR) {
			return -1, fmt.Errorf("%w: a parent is not a directory", ErrUnsafe)
		}
		return -1, err
	}
	u.lastDir, u.lastFD = dir, fd
	return fd, nil
}

// forget drops the cached parent. It is called only between entries,
// never while an entry holds the descriptor.
func (u *Unpacker) forget() {
	if u.lastFD >= 0 {
		unix.Close(u.lastFD)
	}
	u.lastDir, u.lastFD = "", -1
}

// mkdirs creates the missing directories of dir, one element at a time.
func (u *Unpacker) mkdirs(dir string) (int, error) {
	cur, err := unix.Dup(u.root)
	if err != nil {
		return -1, err
	}
	for _, el := range strings.Split(dir, "/") {
		next, err := unix.Openat2(cur, el, &unix.OpenHow{Flags: unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC, Resolve: resolve})
		if errors.Is(err, unix.ENOENT) {
			if err = unix.Mkdirat(cur, el, 0o755); err == nil || errors.Is(err, unix.EEXIST) {
				if err = unix.Fchownat(cur, el, u.idBase, u.idBase, unix.AT_SYMLINK_NOFOLLOW); err == nil {
					next, err = unix.Openat2(cur, el, &unix.OpenHow{Flags: unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC, Resolve: resolve})
				}
			}
		}
		unix.Close(cur)
		if err != nil {
			return -1, err
		}
		cur = next
	}
	return cur, nil
}

// owner maps a header's ids into the image range.
func (u *Unpacker) owner(hdr *tar.Header) (int, int) {
	uid, gid := hdr.Uid, hdr.Gid
	if uid < 0 || uid >= IDRange || gid < 0 || gid >= IDRange {
		u.rep.IDsClamped++
	}
	if uid < 0 || uid >= IDRange {
		uid = nobody
	}
	if gid < 0 || gid >= IDRange {
		gid = nobody
	}
	return u.idBase + uid, u.idBase + gid
}

// perm is the header's permission bits without setuid and setgid.
func (u *Unpacker) perm(hdr *tar.Header) uint32 {
	m := uint32(hdr.Mode)
	if m&(unix.S_ISUID|unix.S_ISGID) != 0 && hdr.Typeflag != tar.TypeDir {
		u.rep.SetIDCleared++
	}
	return m & 0o1777 &^ (unix.S_ISUID | unix.S_ISGID)
}

// attrs sets owner and mode of an existing directory (or the root).
func (u *Unpacker) attrs(pfd int, base string, hdr *tar.Header, flags int) error {
	uid, gid := u.owner(hdr)
	if err := unix.Fchownat(pfd, base, uid, gid, flags|unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return err
	}
	if base == "" {
		base = "."
	}
	fd, err := unix.Openat(pfd, base, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return unix.Fchmod(fd, u.perm(hdr))
}

// clear removes whatever is at base (a directory with all it holds),
// unless it is a directory and keepDir is set. It reports whether a
// directory was kept.
func (u *Unpacker) clear(pfd int, base string, keepDir bool) (bool, error) {
	var st unix.Stat_t
	if err := unix.Fstatat(pfd, base, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return false, nil
		}
		return false, err
	}
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		if keepDir {
			return true, nil
		}
		u.stale = true
		return false, removeAll(pfd, base)
	}
	u.stale = true
	return false, unix.Unlinkat(pfd, base, 0)
}

func (u *Unpacker) dir(pfd int, base string, hdr *tar.Header) error {
	kept, err := u.clear(pfd, base, true)
	if err != nil {
		return err
	}
	if !kept {
		if err := unix.Mkdirat(pfd, base, 0o700); err != nil {
			return err
		}
	}
	return u.attrs(pfd, base, hdr, 0)
}

func (u *Unpacker) file(pfd int, base string, hdr *tar.Header, tr *tar.Reader) error {
	if hdr.Size < 0 || hdr.Size > u.lim.Bytes-u.rep.Bytes {
		return fmt.Errorf("%w: more than %d bytes of files", ErrLimit, u.lim.Bytes)
	}
	if _, err := u.clear(pfd, base, false); err != nil {
		return err
	}
	fd, err := unix.Openat(pfd, base, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return err
	}
	f := os.NewFile(uintptr(fd), base)
	defer f.Close()
	n, err := io.Copy(f, tr)
	u.rep.Bytes += n
	if err != nil {
		if errors.Is(err, unix.ENOSPC) {
			return fmt.Errorf("no space left in the image store: %w", err)
		}
		return fmt.Errorf("%w: %w", ErrFormat, err)
	}
	uid, gid := u.owner(hdr)
	if err := f.Chown(uid, gid); err != nil {
		return err
	}
	if err := f.Chmod(os.FileMode(u.perm(hdr))); err != nil {
		return err
	}
	ts := []unix.Timespec{unix.NsecToTimespec(mtime(hdr).UnixNano()), unix.NsecToTimespec(mtime(hdr).UnixNano())}
	return unix.UtimesNanoAt(fd, "", ts, unix.AT_EMPTY_PATH)
}

func mtime(hdr *tar.Header) time.Time {
	if hdr.ModTime.IsZero() || hdr.ModTime.Unix() < 0 {
		return time.Unix(0, 0)
	}
	return hdr.ModTime
}

func (u *Unpacker) symlink(pfd int, base string, hdr *tar.Header) error {
	if hdr.Linkname == "" || len(hdr.Linkname) > MaxName || strings.ContainsRune(hdr.Linkname, 0) {
		return fmt.Errorf("%w: bad symlink target", ErrUnsafe)
	}
	if _, err := u.clear(pfd, base, false); err != nil {
		return err
	}
	// The target is kept as written: every lookup airlock makes is
	// confined to the root, and inside a sandbox the root is the image.
	if err := unix.Symlinkat(hdr.Linkname, pfd, base); err != nil {
		return err
	}
	uid, gid := u.owner(hdr)
	if err := unix.Fchownat(pfd, base, uid, gid, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return err
	}
	ts := []unix.Timespec{unix.NsecToTimespec(mtime(hdr).UnixNano()), unix.NsecToTimespec(mtime(hdr).UnixNano())}
	return unix.UtimesNanoAt(pfd, base, ts, unix.AT_SYMLINK_NOFOLLOW)
}

// hardlink links base to an entry already unpacked. The target is named
// relative to the root like any entry and resolved inside it; it must not
// be a directory.
func (u *Unpacker) hardlink(pfd int, base string, hdr *tar.Header) error {
	target, err := Clean(hdr.Linkname)
	if err != nil {
		return err
	}
	if target == "" {
		return fmt.Errorf("%w: hardlink to the root", ErrUnsafe)
	}
	tdir, tbase := split(target)
	var tfd int
	if tdir == "" {
		tfd, err = unix.Dup(u.root)
	} else {
		tfd, err = unix.Openat2(u.root, tdir, &unix.OpenHow{Flags: unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC, Resolve: resolve})
	}
	if err != nil {
		return fmt.Errorf("hardlink target %q: %w", clip(target), err)
	}
	defer unix.Close(tfd)
	var st unix.Stat_t
	if err := unix.Fstatat(tfd, tbase, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("hardlink target %q: %w", clip(target), err)
	}
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		return fmt.Errorf("%w: hardlink to directory %q", ErrUnsafe, clip(target))
	}
	// Replacing the target with a link to itself would lose it.
	var here unix.Stat_t
	if unix.Fstatat(pfd, base, &here, unix.AT_SYMLINK_NOFOLLOW) == nil && here.Ino == st.Ino && here.Dev == st.Dev {
		return nil
	}
	if _, err := u.clear(pfd, base, false); err != nil {
		return err
	}
	return unix.Linkat(tfd, tbase, pfd, base, 0)
}

// whiteout removes name from dir (".wh.NAME"), or with the opaque marker
// everything in dir that earlier layers made.
func (u *Unpacker) whiteout(dir, name string) error {
	if name == "" || name == "." || name == ".." {
		return fmt.Errorf("%w: bad whiteout in %q", ErrUnsafe, clip(dir))
	}
	d := dir
	if d == "" {
		d = "."
	}
	fd, err := unix.Openat2(u.root, d, &unix.OpenHow{Flags: unix.O_RDONLY | unix.O_DIRECTORY | unix.O_CLOEXEC, Resolve: resolve})
	if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) {
		return nil // nothing to remove
	}
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	u.stale = true
	if name != ".wh..opq" {
		if _, err := u.clear(fd, name, false); err != nil {
			return fmt.Errorf("whiteout %q: %w", clip(name), err)
		}
		return nil
	}
	names, err := ReadNames(fd)
	if err != nil {
		return err
	}
	for _, n := range names {
		p := n
		if dir != "" {
			p = dir + "/" + n
		}
		if u.mine[p] || u.names[p] {
			continue // this layer's own
		}
		if _, err := u.clear(fd, n, false); err != nil {
			return fmt.Errorf("opaque %q: %w", clip(dir), err)
		}
	}
	return nil
}

// ReadNames lists a directory open for reading, from its start.
func ReadNames(fd int) ([]string, error) {
	d, err := unix.Dup(fd)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(d), "dir")
	defer f.Close()
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return nil, err
	}
	return f.Readdirnames(-1)
}

// removeAll removes base in pfd and everything below it, never following
// a symlink.
func removeAll(pfd int, base string) error {
	err := unix.Unlinkat(pfd, base, 0)
	if err == nil || errors.Is(err, unix.ENOENT) {
		return nil
	}
	if !errors.Is(err, unix.EISDIR) && !errors.Is(err, unix.EPERM) {
		return err
	}
	fd, err := unix.Openat(pfd, base, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	names, err := ReadNames(fd)
	if err == nil {
		for _, n := range names {
			if err = removeAll(fd, n); err != nil {
				break
			}
		}
	}
	unix.Close(fd)
	if err != nil {
		return err
	}
	return unix.Unlinkat(pfd, base, unix.AT_REMOVEDIR)
}
