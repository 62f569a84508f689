package image

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/airlockhq/airlock/internal/image/imageref"
	"github.com/airlockhq/airlock/internal/image/unpack"
	"github.com/airlockhq/airlock/internal/linux/idmap"
)

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
	img, err := s.store(tmp, rec, name)
	if err != nil {
		return nil, err
	}
	return &Imported{Image: img, Name: name}, nil
}

// store records rec, unpacked under tmp (its rootfs), and moves it into
// place named name ("" for none): the end of an import and of a derive.
func (s *Store) store(tmp string, rec *Image, name string) (*Image, error) {
	if err := resolveUser(filepath.Join(tmp, "rootfs"), &rec.Config); err != nil {
		return nil, err
	}
	b, _ := json.MarshalIndent(rec, "", "  ")
	if err := os.WriteFile(filepath.Join(tmp, "image.json"), append(b, '\n'), 0o600); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(tmp, "lock"), nil, 0o600); err != nil {
		return nil, err
	}
	if err := s.commit(tmp, rec.Digest, name); err != nil {
		return nil, err
	}
	img, err := s.record(rec.Digest)
	if err != nil {
		return nil, err
	}
	if name != "" {
		img.Names = []string{name}
	}
	return img, nil
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
