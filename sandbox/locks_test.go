package sandbox

import (
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestClaimNewWaitsOutASweep: a sweep in another process may lock a
// fresh sandbox's lock file for a moment (it looks like a dead holder's
// until its creator locks it); the creator waits that out instead of
// failing the sandbox.
func TestClaimNewWaitsOutASweep(t *testing.T) {
	path := filepath.Join(t.TempDir(), "0123456789ab")
	sweeper, err := tryLock(path)
	if err != nil || sweeper == nil {
		t.Fatal(err)
	}
	go func() {
		time.Sleep(20 * time.Millisecond)
		sweeper.release() // the sweep finds no cgroup: it unlinks and lets go
	}()
	l, err := claimNew(path)
	if err != nil || l == nil {
		t.Fatalf("claimNew: %v %v", l, err)
	}
	defer l.release()
	if again, err := tryLock(path); err != nil || again != nil {
		t.Fatalf("the claimed file is not held: %v %v", again, err)
	}
}

// TestAllocIDRange: ranges are the lowest free slots, whether another
// process (a lock file held elsewhere) or this one holds the others, and a
// released slot is the next one claimed.
func TestAllocIDRange(t *testing.T) {
	dir := t.TempDir()
	var held heldSlots
	// Slot 0 is held by "another process": a lock this runtime's set
	// does not know.
	other, err := tryLock(filepath.Join(dir, "0"))
	if err != nil || other == nil {
		t.Fatal(err)
	}
	defer other.release()
	const base = 100000
	var got []*idRange
	for want := 1; want <= 3; want++ {
		r, err := allocIDRange(dir, base, 4, &held)
		if err != nil {
			t.Fatal(err)
		}
		if r.base != base+uint32(want)*idRangeSize {
			t.Fatalf("range %d at %d, want slot %d", len(got), r.base, want)
		}
		got = append(got, r)
	}
	if _, err := allocIDRange(dir, base, 4, &held); err == nil {
		t.Fatal("a fifth range out of four slots")
	}
	if err := got[1].release(); err != nil {
		t.Fatal(err)
	}
	if held.has(2) {
		t.Fatal("a released slot is still marked held")
	}
	// Its file stays, unlocked, for the next holder: the same inode.
	var before, after unix.Stat_t
	if err := unix.Stat(filepath.Join(dir, "2"), &before); err != nil {
		t.Fatalf("the released slot's file: %v", err)
	}
	if l, err := tryLock(filepath.Join(dir, "2")); err != nil || l == nil {
		t.Fatalf("the released slot is still locked: %v", err)
	} else if err := l.unlock(); err != nil {
		t.Fatal(err)
	}
	r, err := allocIDRange(dir, base, 4, &held)
	if err != nil || r.base != base+2*idRangeSize {
		t.Fatalf("after releasing slot 2: %+v %v", r, err)
	}
	if err := unix.Stat(filepath.Join(dir, "2"), &after); err != nil || after.Ino != before.Ino {
		t.Errorf("the slot's file was made again (inode %d, was %d): %v", after.Ino, before.Ino, err)
	}
	// The skipped slots are still locked on disk, for other processes.
	for _, slot := range []string{"1", "2", "3"} {
		if l, err := tryLock(filepath.Join(dir, slot)); err != nil || l != nil {
			t.Fatalf("slot %s is not locked: %v", slot, err)
		}
	}
	for _, r := range []*idRange{got[0], got[2], r} {
		if err := r.release(); err != nil {
			t.Fatal(err)
		}
	}
}
