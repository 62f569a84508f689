// Package image is airlock's image store: images imported from OCI layouts
// and archives, docker save archives, and plain root file systems
// (directories or tarballs), each unpacked once into a read-only,
// content-addressed directory keyed by its digest, with names pointing at
// digests. Sandboxes use an image's directory as their root through an
// idmapped read-only mount (see package sandbox); the store never needs a
// container engine or a registry.
//
// Layout under the store directory (0700, root's):
//
//	names.json                 name -> digest
//	sha256/<hex>/rootfs/       the unpacked root, owned by the image id range
//	sha256/<hex>/image.json    the record: source, config defaults, sizes
//	sha256/<hex>/lock          sandboxes hold it shared while they live
//	tmp/<id>/                  imports in progress (locked while they run)
//	lock                       serialises changes to names and contents
package image

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/image/imageref"
	"github.com/airlockhq/airlock/internal/image/unpack"
	"golang.org/x/sys/unix"
)

// Errors callers map to exit codes and answers, in the classes of
// errdefs.
var (
	ErrInvalid  = imageref.ErrInvalid
	ErrNotFound = errdefs.New(errdefs.ErrNotFound, "no such image")
	ErrInUse    = errdefs.New(errdefs.ErrConflict, "image in use")
)

// DefaultDir is the store's default location.
const DefaultDir = "/var/lib/airlock/images"

// Host is the embedded default image's name: the host's own system
// directories. It is never in the store.
const Host = imageref.Host

// Options configure a Store.
type Options struct {
	// Dir is the store's directory. Default DefaultDir.
	Dir string
	// IDBase is the first host id of the image id range (id n of an
	// image is stored as host id IDBase+n). It must be the sandbox
	// runtime's ImageIDBase. Default 1<<30 - 65536.
	IDBase uint32
	// Limits cap one import.
	Limits unpack.Limits
}

// The id ranges, as the sandbox runtime's defaults have them (this
// package does not link it; a test of package attach, which links both,
// checks they agree).
const (
	// DefaultIDBase is the image id range's default start, the sandbox
	// runtime's (sandbox.DefaultImageIDBase): just below the sandbox
	// ranges.
	DefaultIDBase = sandboxUIDBase - unpack.IDRange
	// sandboxUIDBase is where the sandbox ranges start
	// (sandbox.DefaultUIDBase).
	sandboxUIDBase = 1 << 30
)

// Store is an image store. Its methods are safe for concurrent use, also
// by several processes.
type Store struct {
	opts Options

	idmapOnce sync.Once
	idmapErr  error
}

// Open opens (creating if needed) a store and removes what interrupted
// imports left behind.
func Open(opts Options) (*Store, error) {
	if opts.Dir == "" {
		opts.Dir = DefaultDir
	}
	if opts.IDBase == 0 {
		opts.IDBase = DefaultIDBase
	}
	if !filepath.IsAbs(opts.Dir) {
		return nil, fmt.Errorf("%w: image store %q is not an absolute path", ErrInvalid, opts.Dir)
	}
	if os.Geteuid() != 0 {
		return nil, errors.New("the image store needs root (image files are owned by a dedicated id range)")
	}
	for _, d := range []string{opts.Dir, filepath.Join(opts.Dir, "sha256"), filepath.Join(opts.Dir, "tmp")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("image store: %w", err)
		}
	}
	if err := os.Chmod(opts.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("image store: %w", err)
	}
	s := &Store{opts: opts}
	if _, err := s.sweepTmp(); err != nil {
		return nil, err
	}
	return s, nil
}

// Dir is the store's directory.
func (s *Store) Dir() string { return s.opts.Dir }

// Limits are what one import may unpack.
func (s *Store) Limits() unpack.Limits { return s.opts.limits() }

// TempDir makes a directory in the store for work that ends in an import
// (a pull's download), removed by done, and by the sweep of a later
// store if this process dies first.
func (s *Store) TempDir() (dir string, done func(), err error) { return s.tmpDir() }

// Tag names stored content: name then resolves to the image of digest.
func (s *Store) Tag(name, digest string) error {
	if err := imageref.CheckName(name); err != nil {
		return err
	}
	return s.setName(name, digest)
}

func (s *Store) contentDir(digest string) string {
	return filepath.Join(s.opts.Dir, "sha256", strings.TrimPrefix(digest, "sha256:"))
}

// lock takes the store's change lock.
func (s *Store) lock() (func(), error) {
	f, err := os.OpenFile(filepath.Join(s.opts.Dir, "lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		f.Close()
		return nil, err
	}
	return func() { f.Close() }, nil
}

// lockNames takes the change lock and reads the names under it.
func (s *Store) lockNames() (map[string]string, func(), error) {
	unlock, err := s.lock()
	if err != nil {
		return nil, nil, err
	}
	names, err := s.readNames()
	if err != nil {
		unlock()
		return nil, nil, err
	}
	return names, unlock, nil
}

func (s *Store) readNames() (map[string]string, error) {
	b, err := os.ReadFile(filepath.Join(s.opts.Dir, "names.json"))
	if errors.Is(err, os.ErrNotExist) {
		return map[string]string{}, nil
	}
	if err != nil {
		return nil, err
	}
	m := map[string]string{}
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("image store names.json: %w", err)
	}
	return m, nil
}

func (s *Store) writeNames(m map[string]string) error {
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	return writeAtomic(filepath.Join(s.opts.Dir, "names.json"), append(b, '\n'))
}

// writeAtomic replaces a file with data, durably.
func writeAtomic(p string, data []byte) error {
	tmp := p + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, p)
	}
	if err != nil {
		os.Remove(tmp)
		return err
	}
	return syncDir(filepath.Dir(p))
}

// syncFS flushes the whole file system holding p.
func syncFS(p string) error {
	fd, err := unix.Open(p, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return unix.Syncfs(fd)
}

func syncDir(p string) error {
	d, err := os.Open(p)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

func (o Options) limits() unpack.Limits { return o.Limits.WithDefaults() }

// tmpDir makes a locked directory for an import; release removes it
// (whatever it still holds) and drops the lock.
func (s *Store) tmpDir() (string, func(), error) {
	var b [8]byte
	_, _ = rand.Read(b[:])
	dir := filepath.Join(s.opts.Dir, "tmp", hex.EncodeToString(b[:]))
	if err := os.Mkdir(dir, 0o700); err != nil {
		return "", nil, err
	}
	f, err := os.Open(dir)
	if err == nil {
		err = unix.Flock(int(f.Fd()), unix.LOCK_EX)
	}
	if err != nil {
		os.RemoveAll(dir)
		return "", nil, err
	}
	return dir, func() {
		os.RemoveAll(dir)
		f.Close()
	}, nil
}

// sweepTmp removes imports whose process is gone.
func (s *Store) sweepTmp() (int, error) {
	tmp := filepath.Join(s.opts.Dir, "tmp")
	ents, err := os.ReadDir(tmp)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, e := range ents {
		p := filepath.Join(tmp, e.Name())
		if !e.IsDir() {
			os.Remove(p)
			continue
		}
		f, err := os.Open(p)
		if err != nil {
			continue
		}
		if unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB) == nil {
			if os.RemoveAll(p) == nil {
				n++
			}
		}
		f.Close()
	}
	return n, nil
}

// commit moves an unpacked import into place and names it.
func (s *Store) commit(tmp, digest, name string) error {
	names, unlock, err := s.lockNames()
	if err != nil {
		return err
	}
	defer unlock()
	dst := s.contentDir(digest)
	// Every unpacked file reaches the disk before the image is named: a
	// crash never leaves a stored image with truncated files.
	if err := syncFS(tmp); err != nil {
		return err
	}
	if err := os.Rename(tmp, dst); err != nil && !errors.Is(err, os.ErrExist) && !errors.Is(err, unix.ENOTEMPTY) {
		return err
	}
	if err := syncDir(filepath.Dir(dst)); err != nil {
		return err
	}
	if name == "" {
		return nil // a build's step: named by no one until a gc takes it
	}
	names[name] = digest
	return s.writeNames(names)
}

// setName points name at stored content; ErrNotFound if the content is
// gone (a gc between a caller's look and the lock).
// Untag drops a name and never the content, which a live sandbox may
// be using: content no name holds goes with a gc, or with the build
// cache's trim when the cache holds it. A name not there is no error.
func (s *Store) Untag(name string) error {
	names, unlock, err := s.lockNames()
	if err != nil {
		return err
	}
	defer unlock()
	if _, ok := names[name]; !ok {
		return nil
	}
	delete(names, name)
	return s.writeNames(names)
}

func (s *Store) setName(name, digest string) error {
	names, unlock, err := s.lockNames()
	if err != nil {
		return err
	}
	defer unlock()
	if _, err := s.record(digest); err != nil {
		return err
	}
	if names[name] == digest {
		return nil
	}
	names[name] = digest
	return s.writeNames(names)
}
