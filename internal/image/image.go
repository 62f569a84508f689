package image

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/airlockhq/airlock/internal/image/imageref"
	"github.com/airlockhq/airlock/internal/image/unpack"
)

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
	// Labels are a build's LABELs.
	Labels map[string]string `json:"labels,omitempty"`
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
	// OwnBytes, for a build step's image, are the bytes of the files it
	// does not share with its parent (they are hardlinked: linkTree).
	OwnBytes int64 `json:"own_bytes,omitempty"`
	// Root is the unpacked root directory; Lock the file sandboxes hold.
	Root string `json:"-"`
	Lock string `json:"-"`
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

// ownBytes are the bytes the image's removal would free: a build step's
// own, or the whole image's.
func (img *Image) ownBytes() int64 {
	if img.Format == "build" {
		return img.OwnBytes
	}
	return img.Unpacked.Bytes
}
