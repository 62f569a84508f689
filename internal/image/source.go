package image

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync/atomic"

	"github.com/airlockhq/airlock/internal/image/unpack"
	"golang.org/x/sys/unix"
)

// bundle is an image archive's files: a directory (an OCI layout or an
// unpacked docker save) or a tar file holding one. Names are slash paths
// relative to its top.
type bundle interface {
	open(name string) (io.ReadCloser, error)
	has(name string) bool
}

// dirBundle reads below a directory, never following a symlink out of it.
type dirBundle struct{ fd int }

func (d *dirBundle) open(name string) (io.ReadCloser, error) {
	// Symlinks are followed only while they stay below the directory
	// (older docker save archives link shared layers).
	fd, err := unix.Openat2(d.fd, name, &unix.OpenHow{
		Flags:   unix.O_RDONLY | unix.O_CLOEXEC | unix.O_NONBLOCK,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_MAGICLINKS,
	})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	f := os.NewFile(uintptr(fd), name)
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("%s: not a regular file", name)
	}
	return f, nil
}

func (d *dirBundle) has(name string) bool {
	rc, err := d.open(name)
	if err != nil {
		return false
	}
	rc.Close()
	return true
}

// tarBundle reads entries of a tar file, located once by one pass over the
// headers.
type tarBundle struct {
	f       *os.File
	entries map[string]section
	// links are the archive's symlinks, target resolved against the
	// link's directory (older docker save archives link shared layers).
	links map[string]string
}

type section struct{ off, size int64 }

// maxBundleEntries bounds the index of an image archive.
const maxBundleEntries = 100000

func indexTar(f *os.File) (*tarBundle, error) {
	tb := &tarBundle{f: f, entries: make(map[string]section), links: make(map[string]string)}
	cr := &countingReader{r: f}
	tr := tar.NewReader(cr)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return tb, nil
		}
		if err != nil {
			return nil, fmt.Errorf("read archive: %w", err)
		}
		if len(tb.entries) >= maxBundleEntries {
			return nil, fmt.Errorf("archive has more than %d entries", maxBundleEntries)
		}
		name := path.Clean(strings.TrimPrefix(hdr.Name, "./"))
		switch hdr.Typeflag {
		case tar.TypeReg: // archive/tar reads the old TypeRegA as TypeReg or TypeDir
			tb.entries[name] = section{off: cr.n, size: hdr.Size}
		case tar.TypeSymlink:
			target := hdr.Linkname
			if !path.IsAbs(target) {
				target = path.Join(path.Dir(name), target)
			}
			tb.links[name] = path.Clean(target)
		}
		// Skipped by seeking (tar.Reader seeks past content when it can).
	}
}

// countingReader tracks the offset of the underlying file, so an entry's
// content can be read later with a section reader. tar.Reader seeks
// through it to skip content.
type countingReader struct {
	r *os.File
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

func (c *countingReader) Seek(off int64, whence int) (int64, error) {
	n, err := c.r.Seek(off, whence)
	if err == nil {
		c.n = n
	}
	return n, err
}

// maxLinkHops bounds how many symlinks one lookup follows.
const maxLinkHops = 8

func (t *tarBundle) find(name string) (section, bool) {
	name = path.Clean(name)
	for range maxLinkHops {
		if s, ok := t.entries[name]; ok {
			return s, true
		}
		target, ok := t.links[name]
		if !ok {
			return section{}, false
		}
		name = target
	}
	return section{}, false
}

func (t *tarBundle) open(name string) (io.ReadCloser, error) {
	s, ok := t.find(name)
	if !ok {
		return nil, fmt.Errorf("%s: not in the archive", name)
	}
	return io.NopCloser(io.NewSectionReader(t.f, s.off, s.size)), nil
}

func (t *tarBundle) has(name string) bool {
	_, ok := t.find(name)
	return ok
}

// isImageBundle reports whether b holds an image (OCI layout or docker
// save) rather than a plain root file system.
func isImageBundle(b bundle) bool {
	return b.has("index.json") || b.has("manifest.json") || b.has("oci-layout")
}

// Compression magic numbers.
var (
	gzipMagic = []byte{0x1f, 0x8b}
	zstdMagic = []byte{0x28, 0xb5, 0x2f, 0xfd}
)

// zstdOpen is the zstd decoder, once a program has registered one.
var zstdOpen atomic.Pointer[func(io.Reader) (io.ReadCloser, error)]

// RegisterZstd gives the store its zstd decoder (internal/image/zstd.Open).
// The programs that import images call it at start; the store is linked
// without one so that every other airlock program starts without the
// decoder's package initialisers. Without it (or after RegisterZstd(nil)),
// zstd-compressed content is refused with an error saying so.
func RegisterZstd(open func(io.Reader) (io.ReadCloser, error)) {
	if open == nil {
		zstdOpen.Store(nil)
		return
	}
	zstdOpen.Store(&open)
}

// decompress returns r uncompressed, whatever of gzip, zstd or nothing it
// is compressed with.
func decompress(r io.Reader) (io.ReadCloser, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	head, err := br.Peek(4)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	switch {
	case bytes.HasPrefix(head, gzipMagic):
		return gzip.NewReader(br)
	case bytes.HasPrefix(head, zstdMagic):
		open := zstdOpen.Load()
		if open == nil {
			return nil, errors.New("zstd-compressed content, and this program has no zstd decoder (images are imported by airlockd, which has)")
		}
		return (*open)(br)
	}
	return io.NopCloser(br), nil
}

// isCompressed reports whether a file starts with a gzip or zstd header.
func isCompressed(f *os.File) (bool, error) {
	head := make([]byte, 4)
	n, err := f.ReadAt(head, 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return false, err
	}
	return bytes.HasPrefix(head[:n], gzipMagic) || bytes.HasPrefix(head[:n], zstdMagic), nil
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

// stream writes the root file system's tar stream.
func (src *source) stream(ctx context.Context, w io.Writer) error {
	if src.tarF != nil {
		r := io.NewSectionReader(src.tarF, 0, 1<<62)
		_, err := io.Copy(w, &ctxIO{ctx: ctx, r: r})
		return err
	}
	return writeTree(src.treeFD, &ctxIO{ctx: ctx, w: w})
}

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
