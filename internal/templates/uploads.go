package templates

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/airlockhq/airlock/internal/errdefs"
)

// The SDK uploads each COPY's files as a tar archive (gzipped or not)
// named by a hash it computes over them; airlock keeps each owner's
// apart (a directory per owner) and cannot check the hash, so an owner
// can only ever mislead its own builds.

// pendingUpload is an upload link given out and not used yet.
type pendingUpload struct {
	owner, hash string
	expires     time.Time
}

// uploadTTL is how long an upload link may be used.
const uploadTTL = 30 * time.Minute

// maxPending bounds the upload links waiting.
const maxPending = 4096

func validHash(h string) bool {
	if len(h) != 64 {
		return false
	}
	_, err := hex.DecodeString(h)
	return err == nil && h == strings.ToLower(h)
}

// ownerDir is where owner's uploads are: by a hash of its name, which
// may hold any character.
func (m *Manager) ownerDir(owner string) string {
	h := sha256.Sum256([]byte(owner))
	return filepath.Join(m.o.Dir, "uploads", hex.EncodeToString(h[:12]))
}

func (m *Manager) uploadPath(owner, hash string) string {
	return filepath.Join(m.ownerDir(owner), hash)
}

// FileLink says whether owner's template has the files of hash, and if
// not gives the secret of a link to upload them to (E2B's GET
// /templates/{id}/files/{hash}).
func (m *Manager) FileLink(owner, templateID, hash string) (present bool, secret string, err error) {
	if !validHash(hash) {
		return false, "", errdefs.Errorf(errdefs.ErrInvalid, "files hash %q: want 64 lower-case hex digits (sha256)", clip(hash))
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if t, ok := m.templates[templateID]; !ok || t.Owner != owner {
		return false, "", errdefs.Errorf(errdefs.ErrNotFound, "no template %q of this API key", clip(templateID))
	}
	if _, err := os.Stat(m.uploadPath(owner, hash)); err == nil {
		now := time.Now()
		os.Chtimes(m.uploadPath(owner, hash), now, now) // kept as used
		return true, "", nil
	}
	for s, p := range m.uploads {
		if time.Now().After(p.expires) {
			delete(m.uploads, s)
		}
	}
	if len(m.uploads) >= maxPending {
		return false, "", errdefs.Errorf(errdefs.ErrLimit, "%d uploads are waiting; try again later", maxPending)
	}
	secret = randomID(24)
	m.uploads[secret] = &pendingUpload{owner: owner, hash: hash, expires: time.Now().Add(uploadTTL)}
	return false, secret, nil
}

// Upload takes the archive of an upload link, at most max bytes; the
// link is used up.
func (m *Manager) Upload(secret string, r io.Reader, max int64) error {
	m.mu.Lock()
	p, ok := m.uploads[secret]
	if ok {
		delete(m.uploads, secret)
	}
	m.mu.Unlock()
	if !ok || time.Now().After(p.expires) {
		return errdefs.New(errdefs.ErrNotFound, "no such upload link (each is used once, within 30 minutes)")
	}
	dir := m.ownerDir(p.owner)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, ".upload-*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	n, err := io.Copy(f, io.LimitReader(r, max+1))
	if err == nil && n > max {
		err = errdefs.Errorf(errdefs.ErrLimit, "the upload is over builds.upload_max (%d bytes)", max)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if err := os.Rename(f.Name(), m.uploadPath(p.owner, p.hash)); err != nil {
		return err
	}
	m.trimUploads(dir, 4*max)
	return nil
}

// trimUploads removes an owner's least recently used uploads past
// budget bytes: a later build that names one uploads it again.
func (m *Manager) trimUploads(dir string, budget int64) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	type up struct {
		name string
		size int64
		at   time.Time
	}
	var ups []up
	var total int64
	for _, e := range ents {
		fi, err := e.Info()
		if err != nil || !fi.Mode().IsRegular() || !validHash(e.Name()) {
			continue
		}
		ups = append(ups, up{e.Name(), fi.Size(), fi.ModTime()})
		total += fi.Size()
	}
	slices.SortFunc(ups, func(a, b up) int { return a.at.Compare(b.at) })
	for _, u := range ups {
		if total <= budget {
			return
		}
		if os.Remove(filepath.Join(dir, u.name)) == nil {
			total -= u.size
		}
	}
}

// openUpload opens owner's upload of hash.
func (m *Manager) openUpload(owner, hash string) (*os.File, error) {
	f, err := os.Open(m.uploadPath(owner, hash))
	if os.IsNotExist(err) {
		return nil, errdefs.Errorf(errdefs.ErrInvalid, "the files of hash %s were not uploaded (ask for their upload link first)", hash)
	}
	if err != nil {
		return nil, fmt.Errorf("the upload %s: %w", hash, err)
	}
	return f, nil
}
