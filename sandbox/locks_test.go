package sandbox

import (
	"path/filepath"
	"testing"
	"time"
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
