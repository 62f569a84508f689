package image

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlockhq/airlock/internal/image/imageref"
	"github.com/airlockhq/airlock/internal/image/unpack"
)

// Derive stores the image made of parent's root with layer over it (an
// OCI layer: a tar stream with whiteouts, owners as the image's own ids)
// and cfg as its defaults: a step of a build (docs/decisions/0033). Its
// digest names its parent, its layer and its config, so deriving the
// same again stores nothing. name, if not "", names it.
//
// The layer is unpacked by the store's unpacker over a copy of the
// parent's files, as an import's layers are: whatever it holds (a
// sandbox's making) gets no further than an imported image's would.
func (s *Store) Derive(ctx context.Context, parent *Image, layer io.ReadSeeker, cfg Config, name string) (*Image, error) {
	if name != "" {
		if err := imageref.CheckName(name); err != nil {
			return nil, err
		}
	}
	h := sha256.New()
	if _, err := io.Copy(h, layer); err != nil {
		return nil, fmt.Errorf("reading the layer: %w", err)
	}
	layerDigest := "sha256:" + hex.EncodeToString(h.Sum(nil))
	cfg.UID, cfg.GID = nil, nil // resolved below, from the new root
	cb, _ := json.Marshal(cfg)
	d := sha256.New()
	fmt.Fprintf(d, "airlock derive\n%s\n%s\n%s\n", parent.Digest, layerDigest, cb)
	digest := "sha256:" + hex.EncodeToString(d.Sum(nil))
	if existing, err := s.record(digest); err == nil {
		if name != "" {
			if err := s.setName(name, digest); err != nil {
				return nil, err
			}
			existing.Names = append(existing.Names, name)
		}
		return existing, nil
	}
	if _, err := layer.Seek(0, io.SeekStart); err != nil {
		return nil, err
	}
	tmp, release, err := s.tmpDir()
	if err != nil {
		return nil, err
	}
	defer release()
	root := filepath.Join(tmp, "rootfs")
	if err := os.Mkdir(root, 0o755); err != nil {
		return nil, err
	}
	u, err := unpack.New(root, s.opts.IDBase, s.opts.limits())
	if err != nil {
		return nil, err
	}
	defer u.Close()
	// The parent's files, as its owners see them.
	pfd, err := unix.Open(parent.Root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("the parent image %s: %w", parent.Digest, err)
	}
	defer unix.Close(pfd)
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(writeTreeOwned(pfd, pw, s.opts.IDBase)) }()
	err = u.Apply(pr, false)
	pr.CloseWithError(errors.New("unpack ended"))
	if err != nil {
		return nil, fmt.Errorf("copying the parent image: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := u.Apply(layer, true); err != nil {
		return nil, fmt.Errorf("the step's layer: %w", err)
	}
	rec := &Image{Digest: digest, Format: "build", Source: parent.Digest, Imported: time.Now().UTC(), Platform: parent.Platform,
		Layers: parent.Layers + 1, Config: cfg, Unpacked: u.Report()}
	return s.store(tmp, rec, name)
}

// buildCache is the file mapping a build step's cache key to the image it
// made (docs/decisions/0033): content no name points at, which a gc
// removes, and the cache then misses.
const buildCache = "build-cache.json"

// maxCacheKeys bounds the keys kept; the oldest go first.
const maxCacheKeys = 4096

type cacheEntry struct {
	Digest string    `json:"digest"`
	Used   time.Time `json:"used"`
}

// Cached is the image a build step with key made before, if it is still
// stored.
func (s *Store) Cached(key string) (*Image, bool) {
	unlock, err := s.lock()
	if err != nil {
		return nil, false
	}
	defer unlock()
	m := s.readCache()
	e, ok := m[key]
	if !ok {
		return nil, false
	}
	img, err := s.record(e.Digest)
	if err != nil {
		return nil, false
	}
	return img, true
}

// Cache notes that a build step with key made the image digest.
func (s *Store) Cache(key, digest string) error {
	unlock, err := s.lock()
	if err != nil {
		return err
	}
	defer unlock()
	m := s.readCache()
	m[key] = cacheEntry{Digest: digest, Used: time.Now().UTC()}
	for len(m) > maxCacheKeys {
		var oldest string
		for k, e := range m {
			if oldest == "" || e.Used.Before(m[oldest].Used) {
				oldest = k
			}
		}
		delete(m, oldest)
	}
	b, _ := json.Marshal(m)
	return writeAtomic(filepath.Join(s.opts.Dir, buildCache), b)
}

func (s *Store) readCache() map[string]cacheEntry {
	m := map[string]cacheEntry{}
	b, err := os.ReadFile(filepath.Join(s.opts.Dir, buildCache))
	if err == nil {
		_ = json.Unmarshal(b, &m)
	}
	return m
}
