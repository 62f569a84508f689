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
	"slices"
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
	// The parent's files, linked rather than copied (linkTree): the
	// step's layer then replaces what it changed.
	pfd, err := unix.Open(parent.Root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("the parent image %s: %w", parent.Digest, err)
	}
	defer unix.Close(pfd)
	rfd, err := unix.Open(root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(rfd)
	var pst unix.Stat_t
	err = unix.Fstat(pfd, &pst)
	if err == nil {
		err = linkTree(pfd, rfd)
	}
	if err == nil {
		err = sameMeta(rfd, &pst)
	}
	if err != nil {
		return nil, fmt.Errorf("linking the parent image's files: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := u.Apply(layer, true); err != nil {
		return nil, fmt.Errorf("the step's layer: %w", err)
	}
	// What it holds: the parent's (shared) and the layer's own.
	rep := u.Report()
	rep.Bytes += parent.Unpacked.Bytes
	rep.Entries += parent.Unpacked.Entries
	rec := &Image{Digest: digest, Format: "build", Source: parent.Digest, Imported: time.Now().UTC(), Platform: parent.Platform,
		Layers: parent.Layers + 1, Config: cfg, Unpacked: rep, OwnBytes: u.Report().Bytes}
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
	// Used now: the trim keeps what builds use.
	e.Used = time.Now().UTC()
	m[key] = e
	if b, err := json.Marshal(m); err == nil {
		_ = writeAtomic(filepath.Join(s.opts.Dir, buildCache), b)
	}
	return img, true
}

// DefaultBuildCacheMax is the build cache's ceiling unless configured:
// the bytes of the step images only the cache holds.
const DefaultBuildCacheMax = 10 << 30

// cacheGrace keeps a cache entry used this recently from the trim: a
// build under way may still start its next step from it.
const cacheGrace = time.Hour

// TrimCache removes the images only the build cache holds (no name
// points at them), least recently used first, until they add up to at
// most max bytes; one used in the last hour, or by a live sandbox, is
// kept. It returns the digests removed and the bytes they held.
func (s *Store) TrimCache(max int64) ([]string, int64, error) {
	names, unlock, err := s.lockNames()
	if err != nil {
		return nil, 0, err
	}
	defer unlock()
	m := s.readCache()
	type held struct {
		digest string
		used   time.Time
		bytes  int64
	}
	byDigest := map[string]*held{}
	var total int64
	for _, e := range m {
		if len(namesOf(names, e.Digest)) > 0 {
			continue
		}
		h := byDigest[e.Digest]
		if h == nil {
			img, err := s.record(e.Digest)
			if err != nil {
				continue // gone already: the entry misses
			}
			h = &held{digest: e.Digest, bytes: img.ownBytes()}
			byDigest[e.Digest] = h
			total += h.bytes
		}
		if e.Used.After(h.used) {
			h.used = e.Used
		}
	}
	list := make([]*held, 0, len(byDigest))
	for _, h := range byDigest {
		list = append(list, h)
	}
	slices.SortFunc(list, func(a, b *held) int { return a.used.Compare(b.used) })
	var removed []string
	var freed int64
	var errs []error
	for _, h := range list {
		if total <= max || time.Since(h.used) < cacheGrace {
			break
		}
		img, err := s.record(h.digest)
		if err != nil {
			continue
		}
		release, free := s.claim(img)
		if !free {
			continue // a live sandbox uses it
		}
		err = s.removeContent(h.digest)
		release()
		if err != nil {
			errs = append(errs, err)
			continue
		}
		total -= h.bytes
		freed += h.bytes
		removed = append(removed, h.digest)
	}
	if len(removed) > 0 {
		for k, e := range m {
			if slices.Contains(removed, e.Digest) {
				delete(m, k)
			}
		}
		b, _ := json.Marshal(m)
		errs = append(errs, writeAtomic(filepath.Join(s.opts.Dir, buildCache), b))
	}
	return removed, freed, errors.Join(errs...)
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
