// Package snapshot keeps sessions' snapshots: the files of a sandbox's own
// directories (its workspace and /tmp) captured as one tar archive, named
// by its SHA-256 and never changed once written, from which fresh
// sandboxes are filled (docs/decisions/0028). A snapshot is data a new
// sandbox starts from, never an environment handed on: the sandbox it is
// restored into is a fresh one of the pool, with its own uid range,
// network namespace and ceilings. Nothing but the sandbox's files is in
// it: no credential ever entered the sandbox to be captured.
package snapshot

import (
	"archive/tar"
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/linux/inroot"
)

// Meta describes one snapshot.
type Meta struct {
	// ID names it (the node's "snap_" ids); Name is the one its owner
	// gave it, if any, unique among the owner's.
	ID   string `json:"id"`
	Name string `json:"name,omitempty"`
	// Digest is the SHA-256 of its archive, which the store keeps once
	// however many snapshots hold the same files.
	Digest string `json:"digest"`
	// Owner is the caller that took it (a node.Caller's Name): only it
	// (and the local socket) sees it.
	Owner string `json:"owner"`
	// Tool is the tool of the session it was taken of, and the tool of
	// every sandbox made from it; Source is that session.
	Tool   string `json:"tool"`
	Source string `json:"source"`
	// Size is the bytes of its files, Files how many entries it holds;
	// Skipped counts what it could not hold (FIFOs, sockets, devices).
	Size    int64     `json:"size"`
	Files   int       `json:"files"`
	Skipped int       `json:"skipped,omitempty"`
	Created time.Time `json:"created"`
	// Transient marks a snapshot taken for a fork, deleted once the
	// fork is made: never unpacked, and deleted by Open (a fork a crash
	// cut short).
	Transient bool `json:"transient,omitempty"`
	// Seeded says the store holds its files unpacked too (a seed,
	// seed.go), so that sandboxes start from it with nothing copied; set
	// by List and Find, never stored.
	Seeded bool `json:"-"`
}

// Dir is one of a sandbox's own directories, opened (inroot confines
// every walk to it), under the name it has in an archive.
type Dir struct {
	Name string
	F    *os.File
}

// Errors of the store.
var (
	ErrNotFound = errdefs.New(errdefs.ErrNotFound, "no such snapshot")
	ErrNameUsed = errdefs.New(errdefs.ErrConflict, "a snapshot of that name exists")
)

// Store keeps snapshots in a directory of the host (mode 0700): each
// snapshot's Meta as ID.json, each archive once as sha256-HEX.tar; in a
// store opened with a seed owner, also each archive unpacked
// (sha256-HEX.d, with its lock file sha256-HEX.lock), the seed fresh
// sandboxes start from (seed.go).
type Store struct {
	dir string
	// seedOwner is who a seed's files are owned by; -1 for a store
	// without seeds.
	seedOwner int
	// seeds is the background unpacking of archives into seeds.
	seeds seeds

	mu sync.Mutex // guards byID
	// byID holds every snapshot, loaded at Open.
	byID map[string]*Meta
}

// Open opens (making it if need be) the store in dir, and reads what it
// holds. An archive no snapshot names any more, and a half-written one
// (a capture cut short by a crash), are removed.
func Open(dir string) (*Store, error) { return open(dir, -1) }

func open(dir string, seedOwner int) (*Store, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("snapshot store: %w", err)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return nil, fmt.Errorf("snapshot store: %w", err)
	}
	st := &Store{dir: dir, seedOwner: seedOwner, byID: map[string]*Meta{}}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("snapshot store: %w", err)
	}
	used := map[string]bool{}
	for _, e := range ents {
		id, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		var m Meta
		if err == nil {
			err = json.Unmarshal(b, &m)
		}
		if err != nil || m.ID != id || !validDigest(m.Digest) {
			return nil, fmt.Errorf("snapshot store: %s is not a snapshot's record: remove it, or the store", filepath.Join(dir, e.Name()))
		}
		if _, err := os.Stat(st.archive(m.Digest)); err != nil {
			return nil, fmt.Errorf("snapshot store: snapshot %s's archive is missing (%v)", id, err)
		}
		if m.Transient {
			os.Remove(filepath.Join(dir, e.Name()))
			continue
		}
		st.byID[id] = &m
		used[m.Digest] = true
	}
	for _, e := range ents {
		n := e.Name()
		switch {
		case strings.HasPrefix(n, ".tmp-"):
			os.RemoveAll(filepath.Join(dir, n))
		case strings.HasSuffix(n, ".tar") && !used[strings.TrimSuffix(n, ".tar")]:
			os.Remove(filepath.Join(dir, n))
		}
	}
	st.sweepSeedsLocked(ents)
	st.unpackAll()
	return st, nil
}

func validDigest(d string) bool {
	h, ok := strings.CutPrefix(d, "sha256-")
	if !ok || len(h) != 64 {
		return false
	}
	_, err := hex.DecodeString(h)
	return err == nil
}

func (st *Store) archive(digest string) string { return filepath.Join(st.dir, digest+".tar") }

// List returns the snapshots sees(owner) accepts, oldest first.
func (st *Store) List(sees func(owner string) bool) []Meta {
	st.mu.Lock()
	defer st.mu.Unlock()
	var out []Meta
	for _, m := range st.byID {
		if sees(m.Owner) {
			c := *m
			c.Seeded = st.hasSeed(c.Digest)
			out = append(out, c)
		}
	}
	slices.SortFunc(out, func(a, b Meta) int {
		if c := a.Created.Compare(b.Created); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	return out
}

// OlderThan returns the snapshots taken more than age before now: what a
// collection policy by age deletes.
func (st *Store) OlderThan(age time.Duration, now time.Time) []Meta {
	var out []Meta
	for _, m := range st.List(func(string) bool { return true }) {
		if now.Sub(m.Created) > age {
			out = append(out, m)
		}
	}
	return out
}

// Find returns the snapshot of id, or of name among those sees accepts.
// One sees does not accept does not exist for the caller.
func (st *Store) Find(idOrName string, sees func(owner string) bool) (Meta, error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if m := st.byID[idOrName]; m != nil && sees(m.Owner) {
		c := *m
		c.Seeded = st.hasSeed(c.Digest)
		return c, nil
	}
	for _, m := range st.byID {
		if m.Name != "" && m.Name == idOrName && sees(m.Owner) {
			c := *m
			c.Seeded = st.hasSeed(c.Digest)
			return c, nil
		}
	}
	return Meta{}, fmt.Errorf("%w: %q", ErrNotFound, shorten(idOrName))
}

// Delete removes snapshot id, and its archive once no other snapshot
// holds it.
func (st *Store) Delete(id string) error {
	st.mu.Lock()
	defer st.mu.Unlock()
	m := st.byID[id]
	if m == nil {
		return fmt.Errorf("%w: %q", ErrNotFound, shorten(id))
	}
	if err := os.Remove(filepath.Join(st.dir, id+".json")); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	delete(st.byID, id)
	for _, o := range st.byID {
		if o.Digest == m.Digest {
			return nil
		}
	}
	if err := os.Remove(st.archive(m.Digest)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	// The seed goes too, unless a sandbox still starts from it: then
	// it goes at a later Delete, or the next Open.
	ents, err := os.ReadDir(st.dir)
	if err != nil {
		return err
	}
	st.sweepSeedsLocked(ents)
	return nil
}

// Usage is what the snapshots of sees's owners hold: how many, and the
// bytes of their archives (each counted once per snapshot).
func (st *Store) Usage(sees func(owner string) bool) (count int, bytes int64) {
	st.mu.Lock()
	defer st.mu.Unlock()
	for _, m := range st.byID {
		if sees(m.Owner) {
			count++
			bytes += m.Size
		}
	}
	return count, bytes
}

// Capture archives dirs (read as uid:gid, who owns them: never with the
// host's powers) into the store as snapshot m, which must have its ID,
// Owner, Tool, Source and Created set; Name, if set, must be unused among
// its owner's. It returns m with its digest and sizes. The sandbox should
// be paused, so that what is captured is one moment of it.
func (st *Store) Capture(dirs []Dir, uid, gid int, m Meta) (Meta, error) {
	if m.Name != "" {
		if err := st.nameFree(m.Name, m.Owner); err != nil {
			return m, err
		}
	}
	tmp, err := os.CreateTemp(st.dir, ".tmp-")
	if err != nil {
		return m, err
	}
	defer func() {
		tmp.Close()
		os.Remove(tmp.Name())
	}()
	h := sha256.New()
	pr, pw := io.Pipe()
	copied := make(chan error, 1)
	go func() {
		// Read in parts as large as the writer's: a pipe hands over at
		// most what its reader asks for, and each hand-over is a thread
		// switch (io.Copy would take 32 KiB at a time through the
		// file's ReadFrom, hidden here).
		_, err := io.CopyBuffer(struct{ io.Writer }{tmp}, pr, make([]byte, pipeBuffer))
		pr.CloseWithError(err)
		copied <- err
	}()
	// Read as the sandbox's user, written as the daemon: the archive
	// goes through the pipe. Buffered: every write to the pipe hands the
	// archive from the reading thread (locked, for its ids) to the
	// copying goroutine's, and a tar's many small writes (each entry's
	// headers, its data, its padding) one by one cost a thread switch
	// each. Hashed on the reading side, so that the hash of one part
	// runs while the file system takes the one before.
	err = inroot.AsUser(uid, gid, func() error {
		bw := bufio.NewWriterSize(io.MultiWriter(h, pw), pipeBuffer)
		tw := tar.NewWriter(bw)
		if err := writeDirs(tw, dirs, &m); err != nil {
			return err
		}
		if err := tw.Close(); err != nil {
			return err
		}
		return bw.Flush()
	})
	pw.CloseWithError(err)
	if cerr := <-copied; err == nil {
		err = cerr
	}
	if err == nil {
		err = tmp.Sync()
	}
	if err != nil {
		return m, fmt.Errorf("capture: %w", err)
	}
	m.Digest = "sha256-" + hex.EncodeToString(h.Sum(nil))
	st.mu.Lock()
	defer st.mu.Unlock()
	if m.Name != "" {
		if err := st.nameFreeLocked(m.Name, m.Owner); err != nil {
			return m, err
		}
	}
	if _, err := os.Stat(st.archive(m.Digest)); errors.Is(err, os.ErrNotExist) {
		if err := os.Rename(tmp.Name(), st.archive(m.Digest)); err != nil {
			return m, err
		}
	}
	b, _ := json.MarshalIndent(m, "", "  ")
	if err := writeFileSync(filepath.Join(st.dir, m.ID+".json"), b); err != nil {
		return m, err
	}
	st.byID[m.ID] = &m
	if !m.Transient {
		st.unpackLocked(m.Digest)
	}
	return m, nil
}

func (st *Store) nameFree(name, owner string) error {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.nameFreeLocked(name, owner)
}

func (st *Store) nameFreeLocked(name, owner string) error {
	for _, o := range st.byID {
		if o.Name == name && o.Owner == owner {
			return fmt.Errorf("%w: %q is snapshot %s", ErrNameUsed, shorten(name), o.ID)
		}
	}
	return nil
}

// writeFileSync writes b to path through a temporary file, so that a
// crash leaves the whole record or none.
func writeFileSync(path string, b []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), ".tmp-")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}

// writeDirs writes each of dirs' entries to tw, directories before what
// they hold, in order of name.
func writeDirs(tw *tar.Writer, dirs []Dir, m *Meta) error {
	for _, d := range dirs {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d.Name + "/", Mode: 0o755}); err != nil {
			return err
		}
		ents, err := inroot.ReadDir(d.F, "", maxDepth)
		if err != nil {
			return fmt.Errorf("%s: %w", d.Name, err)
		}
		for _, e := range ents {
			// Times to the second, and no format asked for: the writer
			// uses plain ustar headers where they hold the entry, and an
			// extended one only for a long name or target (each extended
			// header is a block more to write and to parse per entry).
			hdr := &tar.Header{Name: d.Name + "/" + e.Rel, Mode: int64(e.Mode & 0o1777), ModTime: e.ModTime.Truncate(time.Second)}
			switch {
			case e.IsDir():
				hdr.Typeflag, hdr.Name = tar.TypeDir, hdr.Name+"/"
			case e.IsSymlink():
				hdr.Typeflag, hdr.Linkname = tar.TypeSymlink, e.Target
			case e.IsRegular():
				hdr.Typeflag = tar.TypeReg
			default:
				m.Skipped++
				continue
			}
			if hdr.Typeflag != tar.TypeReg {
				if err := tw.WriteHeader(hdr); err != nil {
					return err
				}
				m.Files++
				continue
			}
			if err := writeFile(tw, d, e.Rel, hdr); err != nil {
				return err
			}
			m.Files++
			m.Size += hdr.Size
		}
	}
	return nil
}

// maxDepth bounds how deep a capture walks (inroot.ReadDir bounds how
// many entries).
const maxDepth = 256

func writeFile(tw *tar.Writer, d Dir, rel string, hdr *tar.Header) error {
	f, err := inroot.Open(d.F, rel)
	if errors.Is(err, inroot.ErrNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("%s/%s: %w", d.Name, rel, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	hdr.Size = fi.Size()
	if err := tw.WriteHeader(hdr); err != nil {
		return err
	}
	// Exactly the size announced: a file that grew meanwhile is cut,
	// one that shrank is an error (the sandbox should be paused).
	if _, err := io.CopyN(tw, f, hdr.Size); err != nil {
		return fmt.Errorf("%s/%s changed while it was captured: %w", d.Name, rel, err)
	}
	return nil
}

// Restore writes snapshot m's files into dirs (the fresh sandbox's own
// directories, by the names Capture gave them), as uid:gid; the
// sandbox's disk ceiling bounds them (inroot.ErrNoSpace past it).
func (st *Store) Restore(m Meta, dirs []Dir, uid, gid int) error {
	f, err := os.Open(st.archive(m.Digest))
	if err != nil {
		return fmt.Errorf("snapshot %s: %w", m.ID, err)
	}
	defer f.Close()
	// A second descriptor of the archive for big files' data, which the
	// kernel copies into the sandbox's file itself (copy_file_range):
	// no pass through this process's memory.
	data, err := os.Open(st.archive(m.Digest))
	if err != nil {
		return fmt.Errorf("snapshot %s: %w", m.ID, err)
	}
	defer data.Close()
	byName := map[string]*os.File{}
	for _, d := range dirs {
		byName[d.Name] = d.F
	}
	rs := &restorer{tr: nil, src: newBufSeeker(f, pipeBuffer), data: data, dirs: byName, parents: map[string]*os.File{}, uid: uid, gid: gid}
	rs.tr = tar.NewReader(rs.src)
	defer rs.closeParents()
	return inroot.AsUser(uid, gid, rs.run)
}

// pipeBuffer is the buffer between a capture's tar and its pipe, and
// between a restore's archive and its tar.
const pipeBuffer = 256 << 10

// bigFile is the size from which a file's data is copied by the kernel
// rather than through the tar reader.
const bigFile = 64 << 10

// maxParents bounds the directories a restore keeps open.
const maxParents = 1024

// restorer writes an archive's entries into a sandbox's directories.
type restorer struct {
	tr   *tar.Reader
	src  *bufSeeker
	data *os.File
	dirs map[string]*os.File
	// parents are directories opened already, by their path in the
	// archive, so that each entry is written below its own directory
	// and not looked up from the top again.
	parents  map[string]*os.File
	uid, gid int
	// stop, when set and closed, ends the run (errStopped).
	stop <-chan struct{}
}

func (rs *restorer) closeParents() {
	for k, f := range rs.parents {
		f.Close()
		delete(rs.parents, k)
	}
}

// parent returns the directory holding rel below top's directory (its
// own path in the archive's terms, for the cache) and rel's last
// element.
func (rs *restorer) parent(top, rel string) (*os.File, string, error) {
	dir := rs.dirs[top]
	p, name := "", rel
	if i := strings.LastIndexByte(rel, '/'); i >= 0 {
		p, name = rel[:i], rel[i+1:]
	}
	if p == "" {
		return dir, name, nil
	}
	key := top + "/" + p
	if f := rs.parents[key]; f != nil {
		return f, name, nil
	}
	f, err := inroot.OpenDir(dir, p)
	if err != nil {
		return nil, "", err
	}
	if len(rs.parents) >= maxParents {
		rs.closeParents()
	}
	rs.parents[key] = f
	return f, name, nil
}

func (rs *restorer) run() error {
	// Directories get their modes last, deepest first: one the archive
	// has read-only still takes what it holds.
	type dirMode struct {
		dir  *os.File
		rel  string
		perm uint32
	}
	var modes []dirMode
	for {
		select {
		case <-rs.stop:
			return errStopped
		default:
		}
		hdr, err := rs.tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		top, rel, _ := strings.Cut(strings.TrimSuffix(hdr.Name, "/"), "/")
		dir := rs.dirs[top]
		if dir == nil {
			return fmt.Errorf("the archive holds %q, outside the sandbox's directories", shorten(hdr.Name))
		}
		if rel == "" {
			continue // the directory itself
		}
		if _, err := inroot.Split(rel); err != nil {
			return fmt.Errorf("%s: %w", shorten(hdr.Name), err)
		}
		parent, name, err := rs.parent(top, rel)
		if err != nil {
			return fmt.Errorf("%s: %w", shorten(hdr.Name), err)
		}
		perm := uint32(hdr.Mode) & 0o1777
		switch hdr.Typeflag {
		case tar.TypeDir:
			_, err = inroot.Mkdir(parent, name, rs.uid, rs.gid)
			modes = append(modes, dirMode{dir, rel, perm})
		case tar.TypeSymlink:
			err = inroot.Symlink(parent, name, hdr.Linkname)
		case tar.TypeReg:
			var src io.Reader = rs.tr
			if hdr.Size >= bigFile {
				if _, err := rs.data.Seek(rs.src.Offset(), io.SeekStart); err != nil {
					return err
				}
				src = &io.LimitedReader{R: rs.data, N: hdr.Size}
			}
			// A fresh sandbox's directories hold nothing of the
			// archive's yet: each file is new, made as its owner.
			err = inroot.CreateNew(parent, name, src, hdr.Size, perm&0o777, hdr.ModTime)
		default:
			return fmt.Errorf("the archive holds %q of a type snapshots never hold", shorten(hdr.Name))
		}
		if err != nil {
			return fmt.Errorf("%s: %w", shorten(hdr.Name), err)
		}
	}
	for _, d := range slices.Backward(modes) {
		if err := inroot.Chmod(d.dir, d.rel, d.perm); err != nil {
			return fmt.Errorf("%s: %w", shorten(d.rel), err)
		}
	}
	return nil
}

// bufSeeker reads a file through a buffer and can skip ahead without
// reading (the tar reader skips data it was not asked for by seeking),
// and says where in the file the next byte it gives comes from.
type bufSeeker struct {
	f    *os.File
	buf  []byte
	r, w int
	// end is the file offset of buf[w].
	end int64
}

func newBufSeeker(f *os.File, size int) *bufSeeker { return &bufSeeker{f: f, buf: make([]byte, size)} }

func (b *bufSeeker) Read(p []byte) (int, error) {
	if b.r == b.w {
		n, err := b.f.Read(b.buf)
		if n == 0 {
			return 0, err
		}
		b.r, b.w = 0, n
		b.end += int64(n)
	}
	n := copy(p, b.buf[b.r:b.w])
	b.r += n
	return n, nil
}

// Offset is the file offset of the next byte Read gives.
func (b *bufSeeker) Offset() int64 { return b.end - int64(b.w-b.r) }

// Seek moves on from the current offset (io.SeekCurrent, as the tar
// reader skips), within the buffer if it can.
func (b *bufSeeker) Seek(off int64, whence int) (int64, error) {
	if whence != io.SeekCurrent || off < 0 {
		return 0, errors.New("bufSeeker: only forward seeks from the current offset")
	}
	if off <= int64(b.w-b.r) {
		b.r += int(off)
		return b.Offset(), nil
	}
	to := b.Offset() + off
	if _, err := b.f.Seek(to, io.SeekStart); err != nil {
		return 0, err
	}
	b.r, b.w, b.end = 0, 0, to
	return to, nil
}

func shorten(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}
