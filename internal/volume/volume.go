// Package volume keeps named volumes: directories that outlive sessions,
// each its own ext4 file system in a file of the host (so its size is a
// bound the kernel keeps), mounted on the host while the daemon uses it
// and attached into sandboxes writable, their ids shifted onto each
// sandbox's (sandbox.Volume). A volume is data its owner names, never an
// environment: what is in it is what the owner's sandboxes wrote there.
package volume

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/linux/loop"
)

// Sizes.
const (
	// MinSize is the smallest volume: ext4 needs room for its own
	// metadata and journal.
	MinSize = 16 << 20
	// MaxSize bounds one volume.
	MaxSize = 1 << 40
	// DefaultSize is a volume's size when its creator names none.
	DefaultSize = 1 << 30
)

// Owner ids on disk: the root of a new volume belongs to the sandbox's
// user (1000 in every sandbox), so its commands may write there.
const ownerID = 1000

// Meta describes one volume.
type Meta struct {
	// ID names it on the node ("vol_..."); Name is the one its owner
	// gave it, unique among the owner's.
	ID   string `json:"id"`
	Name string `json:"name"`
	// Owner is the caller that made it (a node.Caller's Name), or
	// "tool:NAME" for one a tool's config declares, which every caller
	// of that tool shares.
	Owner   string    `json:"owner"`
	Size    int64     `json:"size"`
	Created time.Time `json:"created"`
}

// Errors.
var (
	ErrNotFound = errdefs.New(errdefs.ErrNotFound, "no such volume")
	ErrNameUsed = errdefs.New(errdefs.ErrConflict, "a volume of that name exists")
	ErrInUse    = errdefs.New(errdefs.ErrConflict, "the volume is attached to a sandbox")
)

// Manager keeps the volumes of a directory of the host (mode 0700): each
// volume's Meta as ID.json, its file system as ID.ext4, mounted at
// mnt/ID while in use.
type Manager struct {
	dir string

	mu   sync.Mutex // guards vols
	vols map[string]*vol
}

type vol struct {
	meta Meta
	// users counts the sandboxes it is attached to (Use's releases not
	// yet called); mounted says it is mounted at the manager's mnt/ID.
	users   int
	mounted bool
}

// Open opens (making it if need be) the volumes of dir. Nothing is
// mounted until a volume is used.
func Open(dir string) (*Manager, error) {
	for _, d := range []string{dir, filepath.Join(dir, "mnt")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("volumes: %w", err)
		}
		if err := os.Chmod(d, 0o700); err != nil {
			return nil, fmt.Errorf("volumes: %w", err)
		}
	}
	m := &Manager{dir: dir, vols: map[string]*vol{}}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("volumes: %w", err)
	}
	for _, e := range ents {
		id, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok {
			if strings.HasPrefix(e.Name(), ".tmp-") {
				os.Remove(filepath.Join(dir, e.Name()))
			}
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		var meta Meta
		if err == nil {
			err = json.Unmarshal(b, &meta)
		}
		if err != nil || meta.ID != id {
			return nil, fmt.Errorf("volumes: %s is not a volume's record: remove it", filepath.Join(dir, e.Name()))
		}
		if _, err := os.Stat(m.image(id)); err != nil {
			return nil, fmt.Errorf("volumes: volume %s's file system is missing (%v)", id, err)
		}
		v := &vol{meta: meta}
		// A mount left by a daemon that crashed is this one's now.
		v.mounted = isMountPoint(m.mnt(id))
		m.vols[id] = v
	}
	return m, nil
}

func (m *Manager) image(id string) string { return filepath.Join(m.dir, id+".ext4") }
func (m *Manager) mnt(id string) string   { return filepath.Join(m.dir, "mnt", id) }

// List returns the volumes sees(owner) accepts, oldest first.
func (m *Manager) List(sees func(owner string) bool) []Meta {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []Meta
	for _, v := range m.vols {
		if sees(v.meta.Owner) {
			out = append(out, v.meta)
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

// Find returns the volume of id, or of name among those sees accepts.
func (m *Manager) Find(idOrName string, sees func(owner string) bool) (Meta, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if v := m.vols[idOrName]; v != nil && sees(v.meta.Owner) {
		return v.meta, nil
	}
	for _, v := range m.vols {
		if v.meta.Name == idOrName && sees(v.meta.Owner) {
			return v.meta, nil
		}
	}
	return Meta{}, fmt.Errorf("%w: %q", ErrNotFound, shorten(idOrName))
}

// Usage is how many volumes sees's owners hold and their sizes' sum.
func (m *Manager) Usage(sees func(owner string) bool) (count int, bytes int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, v := range m.vols {
		if sees(v.meta.Owner) {
			count++
			bytes += v.meta.Size
		}
	}
	return count, bytes
}

// Create makes volume meta (its ID, Name, Owner, Size and Created set):
// a sparse file of Size bytes holding a new ext4 file system whose root
// the sandbox's user owns. It takes no room on the host's disk until
// written.
func (m *Manager) Create(ctx context.Context, meta Meta) (Meta, error) {
	if meta.Size < MinSize || meta.Size > MaxSize {
		return meta, errdefs.Errorf(errdefs.ErrInvalid, "a volume is %d MiB to %d GiB", MinSize>>20, MaxSize>>30)
	}
	m.mu.Lock()
	for _, v := range m.vols {
		if v.meta.Name == meta.Name && v.meta.Owner == meta.Owner {
			m.mu.Unlock()
			return meta, fmt.Errorf("%w: %q is volume %s", ErrNameUsed, shorten(meta.Name), v.meta.ID)
		}
	}
	// Reserved under the lock, so that two creates of one name cannot
	// both pass; the record is written once the file system is made.
	v := &vol{meta: meta, users: 1}
	m.vols[meta.ID] = v
	m.mu.Unlock()
	err := m.make(ctx, meta)
	m.mu.Lock()
	defer m.mu.Unlock()
	if err != nil {
		delete(m.vols, meta.ID)
		os.Remove(m.image(meta.ID))
		return meta, err
	}
	v.users = 0
	return meta, nil
}

func (m *Manager) make(ctx context.Context, meta Meta) error {
	mkfs, err := findMkfs()
	if err != nil {
		return errdefs.New(errdefs.ErrUnavailable, "volumes need mkfs.ext4 (Debian's e2fsprogs) on the host, and it is not there")
	}
	f, err := os.OpenFile(m.image(meta.ID), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	err = f.Truncate(meta.Size)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	// No blocks reserved for root (there is no root to use them); the
	// root directory the sandbox's user's; no lazy init left running in
	// the kernel after the mount.
	out, err := exec.CommandContext(ctx, mkfs, "-q", "-F", "-m", "0",
		"-E", fmt.Sprintf("root_owner=%d:%d", ownerID, ownerID), "-L", "airlock-volume", m.image(meta.ID)).CombinedOutput()
	if err != nil {
		return fmt.Errorf("mkfs.ext4: %v: %s", err, strings.TrimSpace(string(out)))
	}
	b, _ := json.MarshalIndent(meta, "", "  ")
	return writeFileSync(filepath.Join(m.dir, meta.ID+".json"), b)
}

// Use mounts volume id on the host if it is not yet, and returns the
// directory to attach (its file system's root); release says the
// sandbox it was attached to is gone. A volume in use cannot be deleted.
func (m *Manager) Use(id string) (dir string, release func(), err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	v := m.vols[id]
	if v == nil {
		return "", nil, fmt.Errorf("%w: %q", ErrNotFound, shorten(id))
	}
	if !v.mounted {
		if err := m.mount(id); err != nil {
			return "", nil, err
		}
		v.mounted = true
	}
	v.users++
	var once sync.Once
	return m.mnt(id), func() {
		once.Do(func() {
			m.mu.Lock()
			v.users--
			m.mu.Unlock()
		})
	}, nil
}

// mount attaches id's file to a loop device and mounts it at mnt/ID,
// nosuid and nodev: nothing in a volume runs with privileges.
func (m *Manager) mount(id string) error {
	dir := m.mnt(id)
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return err
	}
	dev, err := loop.Attach(m.image(id))
	if err != nil {
		return err
	}
	// Closed once mounted: the device then detaches itself when the
	// file system is unmounted (autoclear).
	defer dev.Close()
	if err := unix.Mount(dev.Name(), dir, "ext4", unix.MS_NOSUID|unix.MS_NODEV, ""); err != nil {
		return fmt.Errorf("mount volume %s: %w", id, err)
	}
	return nil
}

// Delete removes volume id and everything in it. One attached to a
// sandbox is refused (ErrInUse).
func (m *Manager) Delete(id string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	v := m.vols[id]
	if v == nil {
		return fmt.Errorf("%w: %q", ErrNotFound, shorten(id))
	}
	if v.users > 0 {
		return fmt.Errorf("%w: %s", ErrInUse, id)
	}
	if v.mounted {
		if err := unix.Unmount(m.mnt(id), 0); err != nil && !errors.Is(err, unix.EINVAL) {
			return fmt.Errorf("unmount volume %s: %w", id, err)
		}
		v.mounted = false
	}
	os.Remove(m.mnt(id))
	if err := os.Remove(filepath.Join(m.dir, id+".json")); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	delete(m.vols, id)
	return os.Remove(m.image(id))
}

// Close unmounts the volumes no sandbox uses (their loop devices detach
// with them). One still attached stays mounted: its sandbox holds it.
func (m *Manager) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	var errs []error
	for id, v := range m.vols {
		if v.mounted && v.users == 0 {
			if err := unix.Unmount(m.mnt(id), unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) {
				errs = append(errs, fmt.Errorf("unmount volume %s: %w", id, err))
				continue
			}
			v.mounted = false
		}
	}
	return errors.Join(errs...)
}

// findMkfs finds mkfs.ext4 on PATH, or where Debian puts it: a daemon's
// PATH often lacks the sbin directories.
func findMkfs() (string, error) {
	if p, err := exec.LookPath("mkfs.ext4"); err == nil {
		return p, nil
	}
	for _, p := range []string{"/usr/sbin/mkfs.ext4", "/sbin/mkfs.ext4"} {
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0 {
			return p, nil
		}
	}
	return "", exec.ErrNotFound
}

// isMountPoint reports whether dir is mounted on (its device differs
// from its parent's).
func isMountPoint(dir string) bool {
	var a, b unix.Stat_t
	if unix.Lstat(dir, &a) != nil || unix.Lstat(filepath.Dir(dir), &b) != nil {
		return false
	}
	return a.Dev != b.Dev
}

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

func shorten(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}
