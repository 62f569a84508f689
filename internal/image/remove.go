package image

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/airlockhq/airlock/internal/image/imageref"
	"golang.org/x/sys/unix"
)

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
