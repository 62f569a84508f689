package sandbox

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// lockFile is an exclusive, crash-safe claim on a name: an flock on a file
// that the kernel releases when its holder dies, however it dies.
type lockFile struct {
	f    *os.File
	path string
}

// tryLock claims path, creating it. It returns (nil, nil) when another
// holder has it.
func tryLock(path string) (*lockFile, error) {
	for {
		f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
		if err != nil {
			return nil, err
		}
		if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
			f.Close()
			if errors.Is(err, unix.EWOULDBLOCK) {
				return nil, nil
			}
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		// The previous holder may have unlinked the file between our open
		// and our lock; a lock on an unlinked file claims nothing, so
		// check that the path still names what we locked.
		var a, b unix.Stat_t
		if err := unix.Fstat(int(f.Fd()), &a); err != nil {
			f.Close()
			return nil, err
		}
		if err := unix.Stat(path, &b); err != nil || a.Ino != b.Ino || a.Dev != b.Dev {
			f.Close()
			continue
		}
		return &lockFile{f: f, path: path}, nil
	}
}

// claimNew locks the lock file of a fresh sandbox id. No one else has
// that id, but a sweep in another airlock process may hold its file for a
// moment: it lists the lock files, and one being created looks like a dead
// holder's until it is locked. The parallel soak met this twice in 2,000
// runs, as a failed run ("claim sandbox id"). That moment is waited out.
func claimNew(path string) (*lockFile, error) {
	for i := 0; ; i++ {
		l, err := tryLock(path)
		if err != nil || l != nil || i == 1000 {
			return l, err
		}
		time.Sleep(time.Millisecond)
	}
}

// release removes the file, then drops the lock.
func (l *lockFile) release() error {
	if l == nil {
		return nil
	}
	err := os.Remove(l.path)
	if errors.Is(err, os.ErrNotExist) {
		err = nil
	}
	return errors.Join(err, l.f.Close())
}

// unlock drops the lock and leaves the file, for the next holder.
func (l *lockFile) unlock() error {
	if l == nil {
		return nil
	}
	return l.f.Close()
}

// idRange is a host uid/gid range owned by one live sandbox.
type idRange struct {
	base uint32
	slot int
	lock *lockFile
	held *heldSlots
}

// release frees the range: its lock, then this process's mark. The lock
// file stays: a slot's file is made once and serves every holder after
// (claims are lowest first, so they are few), where making and removing
// one per sandbox cost the state directory's file system an inode
// allocation each time (on ext4, a scan past recently freed inodes that
// grew with the churn: 1% of a sustained run's CPU).
func (r *idRange) release() error {
	err := r.lock.unlock()
	r.held.drop(r.slot)
	return err
}

// heldSlots are the uid range slots this process holds. Claiming one
// skips them without a look at their lock files: a slot this process holds
// is locked by it, and with a pool of ready sandboxes the lowest free slot
// is past all of them, each an open, a lock and a close on the way.
type heldSlots struct {
	mu sync.Mutex
	m  map[int]bool
}

func (h *heldSlots) has(slot int) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.m[slot]
}

func (h *heldSlots) add(slot int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.m == nil {
		h.m = map[int]bool{}
	}
	h.m[slot] = true
}

func (h *heldSlots) drop(slot int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.m, slot)
}

// idRangeSize ids are mapped per sandbox: 0..65535 inside, so images that
// use ordinary system and user ids work.
const idRangeSize = 65536

// allocIDRange claims the lowest free slot that held does not have.
// Slots are claimed with lock files in one host-wide directory, so
// sandboxes of different airlock processes never share a range. Lowest
// first keeps the set of ranges in use small, and with it the runtime's
// cache of image user namespaces.
func allocIDRange(dir string, base uint32, slots int, held *heldSlots) (*idRange, error) {
	for slot := range slots {
		if held.has(slot) {
			continue
		}
		l, err := tryLock(filepath.Join(dir, strconv.Itoa(slot)))
		if err != nil {
			return nil, err
		}
		if l != nil {
			held.add(slot)
			return &idRange{base: base + uint32(slot)*idRangeSize, slot: slot, lock: l, held: held}, nil
		}
	}
	return nil, fmt.Errorf("all %d uid ranges are in use", slots)
}
