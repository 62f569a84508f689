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
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/image/imageref"
	"github.com/airlockhq/airlock/internal/image/unpack"
	"github.com/airlockhq/airlock/internal/linux/idmap"
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

// Config holds the defaults an image gives the commands run from it.
type Config struct {
	Env        []string `json:"env,omitempty"`
	WorkingDir string   `json:"working_dir,omitempty"`
	// User is as the image wrote it; UID and GID are what it resolved to
	// in the image's own /etc/passwd and /etc/group at import.
	User       string   `json:"user,omitempty"`
	UID        *uint32  `json:"uid,omitempty"`
	GID        *uint32  `json:"gid,omitempty"`
	Entrypoint []string `json:"entrypoint,omitempty"`
	Cmd        []string `json:"cmd,omitempty"`
}

// Image is one stored image.
type Image struct {
	Digest string `json:"digest"`
	// Names point at it (filled in by List, Resolve and Inspect).
	Names []string `json:"names,omitempty"`
	// Format is what it was imported from: oci, docker or rootfs.
	Format   string        `json:"format"`
	Source   string        `json:"source"`
	Imported time.Time     `json:"imported"`
	Platform string        `json:"platform,omitempty"`
	Layers   int           `json:"layers"`
	Config   Config        `json:"config"`
	Unpacked unpack.Report `json:"unpacked"`
	// Root is the unpacked root directory; Lock the file sandboxes hold.
	Root string `json:"-"`
	Lock string `json:"-"`
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

func (s *Store) record(digest string) (*Image, error) {
	dir := s.contentDir(digest)
	b, err := os.ReadFile(filepath.Join(dir, "image.json"))
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%w: %s", ErrNotFound, digest)
	}
	if err != nil {
		return nil, err
	}
	img := &Image{}
	if err := json.Unmarshal(b, img); err != nil {
		return nil, fmt.Errorf("image %s: %w", digest, err)
	}
	img.Root, img.Lock = filepath.Join(dir, "rootfs"), filepath.Join(dir, "lock")
	return img, nil
}

// List returns every stored image, newest first.
func (s *Store) List() ([]*Image, error) {
	names, err := s.readNames()
	if err != nil {
		return nil, err
	}
	ents, err := os.ReadDir(filepath.Join(s.opts.Dir, "sha256"))
	if err != nil {
		return nil, err
	}
	var out []*Image
	for _, e := range ents {
		img, err := s.record("sha256:" + e.Name())
		if err != nil {
			continue // being removed
		}
		img.Names = namesOf(names, img.Digest)
		out = append(out, img)
	}
	slices.SortFunc(out, func(a, b *Image) int { return b.Imported.Compare(a.Imported) })
	return out, nil
}

func namesOf(names map[string]string, digest string) []string {
	var out []string
	for n, d := range names {
		if d == digest {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out
}

// Resolve finds an image by name or digest.
func (s *Store) Resolve(ref string) (*Image, error) {
	if err := imageref.Check(ref); err != nil {
		return nil, err
	}
	names, err := s.readNames()
	if err != nil {
		return nil, err
	}
	digest := ref
	if !imageref.IsDigest(ref) {
		d, ok := names[ref]
		if !ok {
			return nil, fmt.Errorf("%w: %q (import it with: airlock image import PATH --name %s)", ErrNotFound, ref, ref)
		}
		digest = d
	}
	img, err := s.record(digest)
	if err != nil {
		return nil, err
	}
	img.Names = namesOf(names, digest)
	return img, nil
}

// ImportOptions modify one import.
type ImportOptions struct {
	// Name names the image; in an archive of several it also chooses
	// one (by tag or reference name). Default: the archive's own name for
	// it, or the file's base name.
	Name string
}

// Imported is the outcome of an import.
type Imported struct {
	*Image
	// Name is the name set.
	Name string
	// Existed is true when the content was already stored: nothing was
	// unpacked.
	Existed bool
}

// Import imports the image at path: an OCI layout directory or archive, a
// docker save archive, or a root file system directory or tarball (gzip
// and zstd compressed tarballs too).
func (s *Store) Import(ctx context.Context, path string, o ImportOptions) (_ *Imported, err error) {
	if o.Name != "" {
		if err := imageref.CheckName(o.Name); err != nil {
			return nil, err
		}
	}
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	abs, _ := filepath.Abs(path)
	src := &source{store: s, path: abs}
	defer src.close()
	if fi.IsDir() {
		err = src.openDir()
	} else if fi.Mode().IsRegular() {
		err = src.openFile(ctx)
	} else {
		err = fmt.Errorf("%w: %s is neither a file nor a directory", ErrInvalid, path)
	}
	if err != nil {
		return nil, err
	}
	return src.importInto(ctx, o)
}

// source is one thing being imported.
type source struct {
	store *Store
	path  string
	// Exactly one of these is set.
	bundle bundle
	treeFD int // a root file system directory
	tarF   *os.File
	// closers run at close.
	closers []func()
}

func (src *source) close() {
	for i := len(src.closers) - 1; i >= 0; i-- {
		src.closers[i]()
	}
}

func (src *source) openDir() error {
	fd, err := unix.Open(src.path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	src.closers = append(src.closers, func() { unix.Close(fd) })
	d := &dirBundle{fd: fd}
	if isImageBundle(d) {
		src.bundle = d
		return nil
	}
	src.treeFD = fd
	return nil
}

func (src *source) openFile(ctx context.Context) error {
	f, err := os.Open(src.path)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	src.closers = append(src.closers, func() { f.Close() })
	comp, err := isCompressed(f)
	if err != nil {
		return err
	}
	if comp {
		// A compressed archive cannot be read at random: unpack it once
		// to a temporary file in the store.
		if f, err = src.spool(ctx, f); err != nil {
			return err
		}
	}
	return src.openTar(f)
}

// spool copies a stream, uncompressed, to an unlinked temporary file in
// the store, to be read at random.
func (src *source) spool(ctx context.Context, r io.Reader) (*os.File, error) {
	tmp, err := os.CreateTemp(filepath.Join(src.store.opts.Dir, "tmp"), "archive-")
	if err != nil {
		return nil, err
	}
	os.Remove(tmp.Name())
	src.closers = append(src.closers, func() { tmp.Close() })
	rc, err := decompress(r)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrInvalid, src.path, err)
	}
	defer rc.Close()
	// An archive may be larger than what it unpacks to (layers are
	// compressed inside), but not without bound.
	max := src.store.opts.limits().Bytes*2 + 1<<30
	n, err := io.Copy(tmp, &ctxIO{ctx: ctx, r: io.LimitReader(rc, max+1)})
	if err == nil && n > max {
		err = fmt.Errorf("%w: larger than %d bytes", unpack.ErrLimit, max)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrInvalid, src.path, err)
	}
	if _, err := tmp.Seek(0, io.SeekStart); err != nil {
		return nil, err
	}
	return tmp, nil
}

// openTar reads a tar file as an image archive or a root file system.
func (src *source) openTar(f *os.File) error {
	tb, err := indexTar(f)
	if err != nil {
		return fmt.Errorf("%w: %s: %w", ErrInvalid, src.path, err)
	}
	if isImageBundle(tb) {
		src.bundle = tb
		return nil
	}
	src.tarF = f
	return nil
}

// ImportReader imports an archive read from r (standard input, say):
// anything Import takes but a directory. A root file system read this way
// needs a name.
func (s *Store) ImportReader(ctx context.Context, r io.Reader, o ImportOptions) (*Imported, error) {
	if o.Name != "" {
		if err := imageref.CheckName(o.Name); err != nil {
			return nil, err
		}
	}
	src := &source{store: s, path: "stdin"}
	defer src.close()
	f, err := src.spool(ctx, r)
	if err != nil {
		return nil, err
	}
	if err := src.openTar(f); err != nil {
		return nil, err
	}
	return src.importInto(ctx, o)
}

func (o Options) limits() unpack.Limits { return o.Limits.WithDefaults() }

// ctxIO stops a copy when the context ends: it reads from r or writes to
// w while ctx lasts.
type ctxIO struct {
	ctx context.Context
	r   io.Reader
	w   io.Writer
}

func (c *ctxIO) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

func (c *ctxIO) Write(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.w.Write(p)
}

func (src *source) importInto(ctx context.Context, o ImportOptions) (*Imported, error) {
	s := src.store
	var (
		oi     *ociImage
		digest string
		err    error
	)
	rec := &Image{Source: src.path, Imported: time.Now().UTC()}
	if src.bundle != nil {
		if oi, err = selectImage(src.bundle, o.Name); err != nil {
			return nil, fmt.Errorf("%s: %w", src.path, err)
		}
		if err := checkPlatform(oi.config); err != nil {
			return nil, err
		}
		if len(oi.layers) != len(oi.config.RootFS.DiffIDs) {
			return nil, fmt.Errorf("%w: the image has %d layers but its config lists %d", ErrInvalid, len(oi.layers), len(oi.config.RootFS.DiffIDs))
		}
		digest = oi.configID
		rec.Format, rec.Layers = oi.format, len(oi.layers)
		rec.Platform = oi.config.OS + "/" + oi.config.Architecture
		c := oi.config.Config
		rec.Config = Config{Env: c.Env, WorkingDir: c.WorkingDir, User: c.User, Entrypoint: c.Entrypoint, Cmd: c.Cmd}
	} else {
		// A root file system is named by the digest of its tar stream:
		// one pass to learn it, so that a second import unpacks nothing.
		h := sha256.New()
		if err := src.stream(ctx, h); err != nil {
			return nil, err
		}
		digest = "sha256:" + hex.EncodeToString(h.Sum(nil))
		rec.Format, rec.Layers = "rootfs", 1
	}
	rec.Digest = digest
	name := o.Name
	if name == "" && oi == nil && src.path == "stdin" {
		return nil, fmt.Errorf("%w: a root file system read from standard input needs a name (--name)", ErrInvalid)
	}
	if name == "" {
		name = defaultName(oi, src.path)
		if err := imageref.CheckName(name); err != nil {
			return nil, fmt.Errorf("%w (choose a name with --name)", err)
		}
	}
	if existing, err := s.record(digest); err == nil {
		switch err := s.setName(name, digest); {
		case err == nil:
			existing.Names = append(existing.Names, name)
			return &Imported{Image: existing, Name: name, Existed: true}, nil
		case !errors.Is(err, ErrNotFound):
			return nil, err
		}
		// Collected meanwhile: unpack it again.
	}
	tmp, release, err := s.tmpDir()
	if err != nil {
		return nil, err
	}
	defer release()
	if err := s.checkIDMap(tmp); err != nil {
		return nil, err
	}
	root := filepath.Join(tmp, "rootfs")
	if err := os.Mkdir(root, 0o755); err != nil {
		return nil, err
	}
	u, err := unpack.New(root, s.opts.IDBase, s.opts.limits())
	if err != nil {
		return nil, err
	}
	defer u.Close()
	if oi != nil {
		for i, l := range oi.layers {
			if err := src.applyLayer(ctx, u, l, string(oi.config.RootFS.DiffIDs[i])); err != nil {
				return nil, fmt.Errorf("layer %d of %d: %w", i+1, len(oi.layers), err)
			}
		}
	} else {
		h := sha256.New()
		pr, pw := io.Pipe()
		streamed := make(chan struct{})
		go func() {
			defer close(streamed)
			pw.CloseWithError(src.stream(ctx, io.MultiWriter(pw, h)))
		}()
		err := u.Apply(pr, false)
		if err == nil {
			_, err = io.Copy(io.Discard, pr)
		}
		pr.CloseWithError(errors.New("unpack ended"))
		// The stream reads the source's descriptors, which close when
		// this returns.
		<-streamed
		if err != nil {
			return nil, err
		}
		if got := "sha256:" + hex.EncodeToString(h.Sum(nil)); got != digest {
			return nil, fmt.Errorf("%s changed during the import", src.path)
		}
	}
	rec.Unpacked = u.Report()
	if err := resolveUser(root, &rec.Config); err != nil {
		return nil, err
	}
	b, _ := json.MarshalIndent(rec, "", "  ")
	if err := os.WriteFile(filepath.Join(tmp, "image.json"), append(b, '\n'), 0o600); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(tmp, "lock"), nil, 0o600); err != nil {
		return nil, err
	}
	if err := s.commit(tmp, digest, name); err != nil {
		return nil, err
	}
	img, err := s.record(digest)
	if err != nil {
		return nil, err
	}
	img.Names = []string{name}
	return &Imported{Image: img, Name: name}, nil
}

// checkIDMap makes sure, once per Store, that sandboxes will be able to
// use what is unpacked under dir: its file system must take idmapped
// mounts. Better to refuse the import than every sandbox later.
func (s *Store) checkIDMap(dir string) error {
	s.idmapOnce.Do(func() {
		ns, err := idmap.UserNS(idmap.Shift{From: s.opts.IDBase, To: sandboxUIDBase, Size: unpack.IDRange})
		if err == nil {
			var m *os.File
			if m, err = idmap.Mount(dir, ns); err == nil {
				m.Close()
			}
			ns.Close()
		}
		if err != nil {
			s.idmapErr = fmt.Errorf("image store %s: sandboxes could not mount its images: %w", s.opts.Dir, err)
		}
	})
	return s.idmapErr
}

// stream writes the root file system's tar stream.
func (src *source) stream(ctx context.Context, w io.Writer) error {
	if src.tarF != nil {
		r := io.NewSectionReader(src.tarF, 0, 1<<62)
		_, err := io.Copy(w, &ctxIO{ctx: ctx, r: r})
		return err
	}
	return writeTree(src.treeFD, &ctxIO{ctx: ctx, w: w})
}

// applyLayer unpacks one layer blob, checking the blob's digest (when the
// manifest gives it) and the uncompressed content's against the config.
func (src *source) applyLayer(ctx context.Context, u *unpack.Unpacker, l layerRef, diffID string) error {
	rc, err := src.bundle.open(l.path)
	if err != nil {
		return err
	}
	defer rc.Close()
	blobHash := sha256.New()
	raw := io.TeeReader(&ctxIO{ctx: ctx, r: rc}, blobHash)
	dr, err := decompress(raw)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	defer dr.Close()
	diffHash := sha256.New()
	if err := u.Apply(io.TeeReader(dr, diffHash), true); err != nil {
		return err
	}
	if err := drain(dr, diffHash, raw); err != nil {
		return err
	}
	if got := digestOf(diffHash); got != diffID {
		return fmt.Errorf("%w: content digest %s does not match the config's diff_id %s", ErrInvalid, got, diffID)
	}
	if l.digest != "" {
		if got := digestOf(blobHash); got != l.digest {
			return fmt.Errorf("%w: blob digest %s does not match the manifest's %s", ErrInvalid, got, l.digest)
		}
	}
	return nil
}

// drain reads what follows the tar's end (padding) into the digests.
func drain(dr io.Reader, diffHash hash.Hash, raw io.Reader) error {
	if _, err := io.Copy(diffHash, dr); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	_, err := io.Copy(io.Discard, raw)
	return err
}

func digestOf(h hash.Hash) string { return "sha256:" + hex.EncodeToString(h.Sum(nil)) }

// defaultName is the name an image gets without --name.
func defaultName(oi *ociImage, path string) string {
	if oi != nil && len(oi.names) > 0 {
		n := oi.names[0]
		return strings.TrimPrefix(n, "docker.io/library/")
	}
	base := filepath.Base(path)
	for _, ext := range []string{".gz", ".tgz", ".zst", ".tar"} {
		base = strings.TrimSuffix(base, ext)
	}
	return strings.ToLower(base)
}

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
	names[name] = digest
	return s.writeNames(names)
}

// setName points name at stored content; ErrNotFound if the content is
// gone (a gc between a caller's look and the lock).
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

// RemoveOptions modify a removal.
type RemoveOptions struct {
	// Force removes an image that a live sandbox or a configured tool
	// uses.
	Force bool
	// Used, if set, says whether a configured tool uses the image (by
	// any of its names or its digest).
	Used func(img *Image) string
}

// Removed is the outcome of a removal.
type Removed struct {
	Names []string `json:"names"`
	// Digest is set when the content went too (no name points at it
	// any more).
	Digest string `json:"digest,omitempty"`
	Bytes  int64  `json:"bytes,omitempty"`
}

// Remove removes a name, or with a digest every name of that image; the
// content goes too once no name points at it.
func (s *Store) Remove(ref string, o RemoveOptions) (*Removed, error) {
	img, err := s.Resolve(ref)
	if err != nil {
		return nil, err
	}
	names, unlock, err := s.lockNames()
	if err != nil {
		return nil, err
	}
	defer unlock()
	var drop []string
	if imageref.IsDigest(ref) {
		drop = namesOf(names, img.Digest)
	} else {
		drop = []string{ref}
	}
	last := len(namesOf(names, img.Digest)) == len(drop)
	if !o.Force {
		if o.Used != nil {
			if tool := o.Used(img); tool != "" {
				return nil, fmt.Errorf("%w: tool %q of the configuration uses %s (use --force to remove it anyway)", ErrInUse, tool, ref)
			}
		}
	}
	if last {
		// Held until the content is gone: no sandbox starts from it
		// meanwhile (a sandbox takes the lock shared).
		release, free := s.claim(img)
		defer release()
		if !free && !o.Force {
			return nil, fmt.Errorf("%w: a live sandbox uses %s (use --force to remove it anyway)", ErrInUse, ref)
		}
	}
	for _, n := range drop {
		delete(names, n)
	}
	if err := s.writeNames(names); err != nil {
		return nil, err
	}
	out := &Removed{Names: drop}
	if last {
		out.Digest, out.Bytes = img.Digest, img.Unpacked.Bytes
		if err := s.removeContent(img.Digest); err != nil {
			return out, err
		}
	}
	return out, nil
}

// claim takes the image's lock exclusively, which no sandbox then can
// share. free is false when a live sandbox holds it; release drops it.
func (s *Store) claim(img *Image) (release func(), free bool) {
	f, err := os.Open(img.Lock)
	if err != nil {
		return func() {}, true
	}
	if unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB) != nil {
		f.Close()
		return func() {}, false
	}
	return func() { f.Close() }, true
}

// removeContent renames the content out of sight first, so a half-removed
// image is never found, then removes it.
func (s *Store) removeContent(digest string) error {
	var b [8]byte
	_, _ = rand.Read(b[:])
	doomed := filepath.Join(s.opts.Dir, "tmp", "rm-"+hex.EncodeToString(b[:]))
	if err := os.Rename(s.contentDir(digest), doomed); err != nil {
		return err
	}
	return os.RemoveAll(doomed)
}

// GC removes content no name points at (unless a live sandbox uses it)
// and what interrupted imports left. It returns the digests removed.
func (s *Store) GC() ([]string, error) {
	if _, err := s.sweepTmp(); err != nil {
		return nil, err
	}
	names, unlock, err := s.lockNames()
	if err != nil {
		return nil, err
	}
	defer unlock()
	ents, err := os.ReadDir(filepath.Join(s.opts.Dir, "sha256"))
	if err != nil {
		return nil, err
	}
	var removed []string
	var errs []error
	for _, e := range ents {
		digest := "sha256:" + e.Name()
		if len(namesOf(names, digest)) > 0 {
			continue
		}
		release, free := func() {}, true
		if img, err := s.record(digest); err == nil {
			release, free = s.claim(img)
		}
		if !free {
			continue // a live sandbox uses it
		}
		err := s.removeContent(digest)
		release()
		if err != nil {
			errs = append(errs, err)
			continue
		}
		removed = append(removed, digest)
	}
	return removed, errors.Join(errs...)
}

// Defaults applies the image's environment and working directory under a
// tool's own: env is the tool's (later entries win), workdir the tool's
// or "".
func (img *Image) Defaults(env []string, workdir string) ([]string, string) {
	env = append(append([]string(nil), img.Config.Env...), env...)
	if workdir == "" {
		workdir = img.Config.WorkingDir
	}
	return env, workdir
}

// Argv is the command the image runs when a call gives none: its
// entrypoint and cmd.
func (img *Image) Argv() []string {
	return append(append([]string(nil), img.Config.Entrypoint...), img.Config.Cmd...)
}
