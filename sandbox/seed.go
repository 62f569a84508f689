package sandbox

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/airlockhq/airlock/internal/linux/idmap"
)

// Seed is a directory of the host a sandbox's /workspace and /tmp start
// with (a snapshot's files): its workspace/ and tmp/ subdirectories are
// the read-only lower layers of overlays whose upper layers are the
// sandbox's disk tmpfs, so nothing is copied at create, what the sandbox
// changes is its own and counts against its disk ceiling, and the seed
// is never written. Its files are stored owned by the image id range, as
// an Image's, and each sandbox sees them owned by its own range.
type Seed struct {
	// Dir holds workspace/ and tmp/.
	Dir string
	// Lock, when set, is a file the sandbox holds a shared flock(2) on
	// while it lives, so that a store can refuse to remove a seed in use
	// (by taking the lock exclusively).
	Lock string
}

func (sd *Seed) validate() error {
	if sd == nil {
		return nil
	}
	if !filepath.IsAbs(sd.Dir) || filepath.Clean(sd.Dir) != sd.Dir {
		return fmt.Errorf("seed %q is not a clean absolute path", sd.Dir)
	}
	for _, d := range []string{"workspace", "tmp"} {
		fi, err := os.Lstat(filepath.Join(sd.Dir, d))
		if err != nil {
			return fmt.Errorf("seed: %w", err)
		}
		if !fi.IsDir() {
			return fmt.Errorf("seed %s: %s is not a directory", sd.Dir, d)
		}
	}
	return nil
}

// mountSeed takes the seed's lock (shared) and returns a detached,
// idmapped, read-only mount of its directory for the sandbox's init to
// attach.
func (s *Sandbox) mountSeed(sd *Seed) (*os.File, error) {
	if sd.Lock != "" {
		f, err := os.Open(sd.Lock)
		if err != nil {
			return nil, fmt.Errorf("seed lock: %w", err)
		}
		if err := unix.Flock(int(f.Fd()), unix.LOCK_SH|unix.LOCK_NB); err != nil {
			f.Close()
			if errors.Is(err, unix.EWOULDBLOCK) {
				return nil, fmt.Errorf("seed %s is being removed", sd.Dir)
			}
			return nil, fmt.Errorf("seed lock: %w", err)
		}
		s.seedLock = f
	}
	ns, err := s.rt.imageNS.get(s.rt.opts.ImageIDBase, s.ids.base)
	if err != nil {
		return nil, err
	}
	return idmap.Mount(sd.Dir, ns)
}

// SeedOwner is the host uid (and gid) a seed's files are stored owned
// by: the sandbox's user's id in the image range, which each sandbox
// sees as its user's.
func (rt *Runtime) SeedOwner() int { return int(rt.opts.ImageIDBase) + sandboxUID }

// Seeds reports whether sandboxes can start from a Seed here: the
// overlays keep their records in user.* attributes of the disk tmpfs,
// which tmpfs holds from Linux 6.6 (a memfd, a file of the kernel's own
// tmpfs, is asked). Where it cannot, a snapshot's files are copied in
// instead.
func (rt *Runtime) Seeds() bool { return SeedsSupported() }

// SeedsSupported is Runtime.Seeds, for any runtime of this host.
func SeedsSupported() bool {
	seedsOnce.Do(func() {
		fd, err := unix.MemfdCreate("airlock-xattr-probe", unix.MFD_CLOEXEC)
		if err != nil {
			return
		}
		defer unix.Close(fd)
		seedsOK = unix.Fsetxattr(fd, "user.airlock.probe", []byte("1"), 0) == nil
	})
	return seedsOK
}

var (
	seedsOnce sync.Once
	seedsOK   bool
)
