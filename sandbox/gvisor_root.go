package sandbox

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/airlockhq/airlock/internal/sbinit"
)

// A gVisor sandbox's root (without an image) is a directory of mount
// points, the host image's symlinks and the generated /etc, served
// read-only; what is mounted on it (the host's system directories, the
// scratch tmpfs's /workspace and /tmp, the volumes) is mounted in each
// sandbox's runsc's own mount namespace (scratchProg), never on the
// host. So sandboxes whose roots hold the same share one: made once, by
// the first, and not made and removed again for each (some thirty file
// operations, which cost milliseconds where the state directory is on a
// disk).
//
// A runtime's shared roots live in a directory of its own, removed by
// Close; its lock file, held while the runtime lives, lets a sweep
// remove what a runtime that died left (sweepRoots).

// rootContent is what a gVisor sandbox's root holds.
type rootContent struct {
	symlinks []sbinit.Symlink
	etc      []sbinit.File
	// binds and volumes are mount points (the binds' sources are not
	// the root's: they are mounted on it).
	binds   []sbinit.Bind
	volumes []string
}

// key names the content: the same key, the same root.
func (rc rootContent) key() string {
	h := sha256.New()
	w := func(f ...string) {
		for _, s := range f {
			h.Write([]byte(strconv.Itoa(len(s))))
			h.Write([]byte{':'})
			h.Write([]byte(s))
		}
	}
	for _, l := range rc.symlinks {
		w("l", l.Path, l.Target)
	}
	for _, f := range rc.etc {
		w("f", f.Path, strconv.FormatUint(uint64(f.Mode), 8), f.Data)
	}
	for _, b := range rc.binds {
		w("b", b.Target, strconv.FormatBool(b.File))
	}
	for _, v := range rc.volumes {
		w("v", v)
	}
	return hex.EncodeToString(h.Sum(nil)[:12])
}

// fill makes the content below dir: the mount points of the guest
// kernel's own file systems and of /workspace and /tmp, the symlinks,
// the /etc files, and the mount points of the binds and volumes.
func (rc rootContent) fill(dir string) error {
	point := func(p string, file bool) error {
		hp := filepath.Join(dir, p)
		if err := os.MkdirAll(filepath.Dir(hp), 0o755); err != nil {
			return err
		}
		if file {
			f, err := os.OpenFile(hp, os.O_CREATE|os.O_WRONLY, 0o644)
			if err != nil {
				return err
			}
			return f.Close()
		}
		return os.MkdirAll(hp, 0o755)
	}
	for _, p := range []string{"proc", "dev", "sys", "tmp", HomeDir} {
		if err := point(p, false); err != nil {
			return err
		}
	}
	for _, l := range rc.symlinks {
		hp := filepath.Join(dir, l.Path)
		if err := os.MkdirAll(filepath.Dir(hp), 0o755); err != nil {
			return err
		}
		if err := os.Symlink(l.Target, hp); err != nil {
			return err
		}
	}
	for _, f := range rc.etc {
		hp := filepath.Join(dir, f.Path)
		if err := os.MkdirAll(filepath.Dir(hp), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(hp, []byte(f.Data), os.FileMode(f.Mode)); err != nil {
			return err
		}
	}
	for _, b := range rc.binds {
		if err := point(b.Target, b.File); err != nil {
			return err
		}
	}
	for _, v := range rc.volumes {
		if err := point(v, false); err != nil {
			return err
		}
	}
	return nil
}

// gvisorRoots are a runtime's shared roots: dir (made with the first),
// held by lock, and the roots made in it by key.
type gvisorRoots struct {
	mu   sync.Mutex
	dir  string
	lock *lockFile
	made map[string]string
}

// rootsDir holds every runtime's directory of shared roots, for this
// runtime's cgroup parent (as bundleDir).
func (rt *Runtime) rootsDir() string { return filepath.Join(rt.bundleDir(), ".roots") }

// sharedRoot returns the root holding rc, made now if this runtime has
// none yet.
func (rt *Runtime) sharedRoot(rc rootContent) (string, error) {
	r := &rt.roots
	r.mu.Lock()
	defer r.mu.Unlock()
	key := rc.key()
	if p, ok := r.made[key]; ok {
		return p, nil
	}
	if r.dir == "" {
		id := newID()
		var lock *lockFile
		var err error
		// Another runtime's Close may remove the directory of every
		// runtime's roots, empty, in between: once more then.
		for range 2 {
			// Traversable by the sandboxes' own ids: runsc's gofer
			// opens the root as the sandbox's uid 0.
			if err = os.MkdirAll(rt.rootsDir(), 0o711); err != nil {
				return "", err
			}
			if lock, err = claimNew(filepath.Join(rt.rootsDir(), id+".lock")); !errors.Is(err, os.ErrNotExist) {
				break
			}
		}
		if err != nil || lock == nil {
			return "", errors.Join(errors.New("claim a directory of shared roots"), err)
		}
		dir := filepath.Join(rt.rootsDir(), id)
		if err := os.Mkdir(dir, 0o711); err != nil {
			return "", errors.Join(err, lock.release())
		}
		r.dir, r.lock, r.made = dir, lock, map[string]string{}
	}
	p := filepath.Join(r.dir, key)
	if err := os.Mkdir(p, 0o755); err != nil {
		return "", err
	}
	if err := rc.fill(p); err != nil {
		return "", errors.Join(err, os.RemoveAll(p))
	}
	r.made[key] = p
	return p, nil
}

// closeRoots removes this runtime's shared roots (its sandboxes are
// destroyed by then).
func (rt *Runtime) closeRoots() error {
	r := &rt.roots
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.dir == "" {
		return nil
	}
	err := errors.Join(os.RemoveAll(r.dir), r.lock.release())
	r.dir, r.lock, r.made = "", nil, nil
	// The directory of every runtime's roots too, when this one's were
	// the last: a stopped daemon leaves nothing in its state directory.
	if rerr := os.Remove(rt.rootsDir()); rerr != nil && !errors.Is(rerr, unix.ENOTEMPTY) && !errors.Is(rerr, unix.EEXIST) && !errors.Is(rerr, os.ErrNotExist) {
		err = errors.Join(err, rerr)
	}
	return err
}

// sweepRoots removes the shared roots of runtimes that are gone: their
// lock is free.
func (rt *Runtime) sweepRoots() error {
	ents, err := os.ReadDir(rt.rootsDir())
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range ents {
		id, ok := strings.CutSuffix(e.Name(), ".lock")
		if !ok || !isSandboxID(id) {
			continue
		}
		l, err := tryLock(filepath.Join(rt.rootsDir(), e.Name()))
		if err != nil || l == nil {
			errs = append(errs, err)
			continue // alive, or unknown
		}
		if err := os.RemoveAll(filepath.Join(rt.rootsDir(), id)); err != nil {
			errs = append(errs, fmt.Errorf("gvisor shared root: %w", err))
		}
		errs = append(errs, l.release())
	}
	return errors.Join(errs...)
}
