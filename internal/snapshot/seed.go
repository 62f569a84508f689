package snapshot

import (
	"archive/tar"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/airlockhq/airlock/internal/linux/inroot"
)

// OpenSeeded is Open for a store that also keeps each archive unpacked,
// its files owned by owner (the sandboxes' user in the image id range): a
// seed, which fresh sandboxes start from with nothing copied
// (sandbox.Seed). An archive is unpacked in the background once it is
// captured (a capture's caller does not wait for it; many small files
// cost the host's file system far more than one archive does), and at
// Open for every archive without its seed; until its seed is there, a
// snapshot restores by copying. The store keeps both forms, so its files
// take their size twice on the host's disk.
func OpenSeeded(dir string, owner int) (*Store, error) {
	if owner < 0 {
		return nil, fmt.Errorf("snapshot store: seed owner %d", owner)
	}
	return open(dir, owner)
}

// SeedDirs are the directories a seed holds, by the names Capture's
// archives give them: what a sandbox's /workspace and /tmp start with.
var SeedDirs = []string{"workspace", "tmp"}

// seeds is the store's unpacking in the background.
type seeds struct {
	// busy holds the digests being unpacked (guarded by the store's mu).
	busy map[string]bool
	wg   sync.WaitGroup
	// stop, closed by Close, ends the unpacking early.
	stop     chan struct{}
	stopOnce sync.Once
}

func (st *Store) seedDir(digest string) string { return filepath.Join(st.dir, digest+".d") }

func (st *Store) seedLock(digest string) string {
	return filepath.Join(st.dir, digest+".lock")
}

// Seed returns the directory snapshot m's files are unpacked in, and the
// lock file a sandbox starting from it holds shared; ok is false when
// there is none (yet): Restore copies the archive's files instead.
func (st *Store) Seed(m Meta) (dir, lock string, ok bool) {
	if !st.hasSeed(m.Digest) {
		return "", "", false
	}
	return st.seedDir(m.Digest), st.seedLock(m.Digest), true
}

func (st *Store) hasSeed(digest string) bool {
	if st.seedOwner < 0 {
		return false
	}
	_, err := os.Stat(st.seedDir(digest))
	return err == nil
}

// Close stops the unpacking in the background and waits for it; what
// was cut short is removed (or, after a crash, by the next Open), and
// unpacked again at the next Open.
func (st *Store) Close() error {
	st.mu.Lock()
	st.seeds.stopOnce.Do(func() {
		if st.seeds.stop == nil {
			st.seeds.stop = make(chan struct{})
		}
		close(st.seeds.stop)
	})
	st.mu.Unlock()
	st.seeds.wg.Wait()
	return nil
}

// unpackAll starts unpacking every archive without its seed.
func (st *Store) unpackAll() {
	st.mu.Lock()
	defer st.mu.Unlock()
	for _, m := range st.byID {
		st.unpackLocked(m.Digest)
	}
}

// unpackLocked starts unpacking digest's archive in the background,
// unless the store keeps no seeds, has it already, is at it, or was
// closed.
func (st *Store) unpackLocked(digest string) {
	if st.seedOwner < 0 || st.seeds.busy[digest] {
		return
	}
	if st.seeds.stop == nil {
		st.seeds.stop = make(chan struct{})
	}
	select {
	case <-st.seeds.stop:
		return
	default:
	}
	if _, err := os.Stat(st.seedDir(digest)); err == nil {
		return
	}
	if st.seeds.busy == nil {
		st.seeds.busy = map[string]bool{}
	}
	st.seeds.busy[digest] = true
	st.seeds.wg.Add(1)
	go func() {
		defer st.seeds.wg.Done()
		// A seed that failed is no loss: the snapshot restores by
		// copying, and the next Open tries again.
		_ = st.unpack(digest, st.seeds.stop)
		st.mu.Lock()
		delete(st.seeds.busy, digest)
		st.mu.Unlock()
	}()
}

// errStopped ends an unpacking the store's Close cut short.
var errStopped = errors.New("snapshot store closed")

// unpack writes digest's archive into a new directory as the seed's
// owner, then keeps it as the digest's seed if a snapshot still holds
// the digest.
func (st *Store) unpack(digest string, stop <-chan struct{}) error {
	tmp, err := os.MkdirTemp(st.dir, ".tmp-")
	if err != nil {
		return err
	}
	defer func() {
		if tmp != "" {
			os.RemoveAll(tmp)
		}
	}()
	// Its root is the host's, and open to all (0755): the sandbox's
	// overlay looks up below it through the idmapped mount, as a user
	// that is not its owner. What lies below is the seed owner's; the
	// store's own directory (0700) keeps the host's users out.
	if err := os.Chmod(tmp, 0o755); err != nil {
		return err
	}
	byName := map[string]*os.File{}
	defer func() {
		for _, f := range byName {
			f.Close()
		}
	}()
	for _, d := range SeedDirs {
		p := filepath.Join(tmp, d)
		if err := os.Mkdir(p, 0o755); err != nil {
			return err
		}
		if err := os.Chown(p, st.seedOwner, st.seedOwner); err != nil {
			return err
		}
		f, err := os.OpenFile(p, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0)
		if err != nil {
			return err
		}
		byName[d] = f
	}
	f, err := os.Open(st.archive(digest))
	if err != nil {
		return err
	}
	defer f.Close()
	data, err := os.Open(st.archive(digest))
	if err != nil {
		return err
	}
	defer data.Close()
	rs := &restorer{src: newBufSeeker(f, pipeBuffer), data: data, dirs: byName, parents: map[string]*os.File{}, uid: st.seedOwner, gid: st.seedOwner, stop: stop}
	rs.tr = tar.NewReader(rs.src)
	err = inroot.AsUser(st.seedOwner, st.seedOwner, rs.run)
	rs.closeParents()
	if err != nil {
		return err
	}
	fd, err := unix.Open(tmp, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	err = unix.Syncfs(fd)
	unix.Close(fd)
	if err != nil {
		return err
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	used := false
	for _, m := range st.byID {
		used = used || m.Digest == digest
	}
	if !used {
		return nil // deleted meanwhile
	}
	// The lock first: a seed is never without its lock.
	lf, err := os.OpenFile(st.seedLock(digest), os.O_CREATE|os.O_RDONLY, 0o600)
	if err != nil {
		return err
	}
	lf.Close()
	if err := os.Rename(tmp, st.seedDir(digest)); err != nil {
		return err
	}
	tmp = ""
	return nil
}

// sweepSeedsLocked removes the seeds (and their locks) of digests no
// snapshot holds, but not one a sandbox still starts from: one whose
// lock is held shared. ents are the store directory's entries.
func (st *Store) sweepSeedsLocked(ents []os.DirEntry) {
	used := map[string]bool{}
	for _, m := range st.byID {
		used[m.Digest] = true
	}
	for _, e := range ents {
		if d, ok := strings.CutSuffix(e.Name(), ".lock"); ok && validDigest(d) && !used[d] {
			// A lock whose seed never came (an unpacking cut short).
			if _, err := os.Stat(st.seedDir(d)); errors.Is(err, os.ErrNotExist) {
				os.Remove(st.seedLock(d))
			}
			continue
		}
		d, ok := strings.CutSuffix(e.Name(), ".d")
		if !ok || !validDigest(d) || used[d] {
			continue
		}
		lock, err := os.Open(st.seedLock(d))
		if err == nil {
			if unix.Flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB) != nil {
				lock.Close()
				continue // in use
			}
		}
		// Renamed first, so that a removal cut short leaves a .tmp- that
		// the next Open removes, never half a seed.
		gone := filepath.Join(st.dir, ".tmp-gone-"+d)
		if os.Rename(st.seedDir(d), gone) == nil {
			os.RemoveAll(gone)
		}
		os.Remove(st.seedLock(d))
		if lock != nil {
			lock.Close()
		}
	}
}
