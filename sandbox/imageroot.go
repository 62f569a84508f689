package sandbox

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/airlockhq/airlock/internal/linux/idmap"
	"golang.org/x/sys/unix"
)

// Image is an unpacked image a sandbox's root is built from, instead of
// the host's own directories. Its files are stored owned by the image id
// range (Options.ImageIDBase: id n of the image is host id ImageIDBase+n),
// and each sandbox sees them owned by its own range, through an idmapped
// read-only mount; the image itself is never written.
type Image struct {
	// Root is the image's root directory.
	Root string
	// Lock, when set, is a file the sandbox holds a shared flock(2) on
	// for as long as it lives, so a store can refuse to remove an image
	// a live sandbox uses (by taking the lock exclusively).
	Lock string
	// Writable gives the sandbox an upper layer on its disk tmpfs, so
	// commands can change system paths (install packages, say). The
	// changes are the sandbox's alone and count against its disk ceiling.
	Writable bool
}

// imageEtc are the generated /etc files an image root gets over the
// image's own.
var imageEtc = map[string]bool{"/etc/hosts": true, "/etc/hostname": true, "/etc/resolv.conf": true}

// User is the identity commands run as, inside the sandbox's id range.
type User struct {
	UID, GID uint32
}

func (u *User) validate() error {
	if u != nil && (u.UID >= idRangeSize || u.GID >= idRangeSize) {
		return fmt.Errorf("user %d:%d is outside the sandbox's ids 0-%d", u.UID, u.GID, idRangeSize-1)
	}
	return nil
}

func (img *Image) validate() error {
	if img == nil {
		return nil
	}
	if !filepath.IsAbs(img.Root) || filepath.Clean(img.Root) != img.Root {
		return fmt.Errorf("image root %q is not a clean absolute path", img.Root)
	}
	fi, err := os.Lstat(img.Root)
	if err != nil {
		return fmt.Errorf("image root: %w", err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("image root %s is not a directory", img.Root)
	}
	return nil
}

// imageNS caches, per sandbox id range, the user namespace that shifts the
// image range onto it. Making one forks this process; a range is used by
// sandbox after sandbox (ranges are claimed lowest first), so each is made
// once.
type imageNS struct {
	mu sync.Mutex // guards ns; held while one is made, so each is made once
	ns map[uint32]*os.File
}

func (c *imageNS) get(from, to uint32) (*os.File, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if f := c.ns[to]; f != nil {
		return f, nil
	}
	f, err := idmap.UserNS(idmap.Shift{From: from, To: to, Size: idRangeSize})
	if err != nil {
		return nil, err
	}
	if c.ns == nil {
		c.ns = make(map[uint32]*os.File)
	}
	c.ns[to] = f
	return f, nil
}

func (c *imageNS) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, f := range c.ns {
		f.Close()
		delete(c.ns, k)
	}
}

// mountImage takes the image's lock (shared) and returns a detached,
// idmapped, read-only mount of its root for the sandbox's init to attach.
func (s *Sandbox) mountImage(img *Image) (*os.File, error) {
	if img.Lock != "" {
		f, err := os.Open(img.Lock)
		if err != nil {
			return nil, fmt.Errorf("image lock: %w", err)
		}
		if err := unix.Flock(int(f.Fd()), unix.LOCK_SH|unix.LOCK_NB); err != nil {
			f.Close()
			if errors.Is(err, unix.EWOULDBLOCK) {
				return nil, fmt.Errorf("image %s is being removed", img.Root)
			}
			return nil, fmt.Errorf("image lock: %w", err)
		}
		s.imageLock = f
	}
	ns, err := s.rt.imageNS.get(s.rt.opts.ImageIDBase, s.ids.base)
	if err != nil {
		return nil, err
	}
	return idmap.Mount(img.Root, ns)
}
