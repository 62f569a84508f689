package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/result"
)

// TestParallelSoak runs airlock as agent frameworks do: many one-shot
// `airlock run` processes at once, beside a daemon serving runs of its
// own, all on one state directory and cgroup parent. Every run must
// succeed (each process's sweep of leftovers meets the others' live
// teardowns all the time), and when all are done nothing is left: no
// sandbox cgroup, no lock file, no uid range.
func TestParallelSoak(t *testing.T) {
	requireRoot(t)
	idsHeldBefore := heldLocks(t, "/run/airlock/ids")
	total := 2000
	if testing.Short() {
		total = 200
	}
	const cliWorkers, apiWorkers = 6, 2
	cfg := writeConfig(t, "tools:\n  sh:\n    pool: {warm: 2}\n")
	sock := filepath.Join(t.TempDir(), "airlock.sock")
	daemon, logs := serveCmd(t, cfg, sock, filepath.Join(t.TempDir(), "audit.db"))
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		_ = daemon.Process.Signal(syscall.SIGTERM)
		if err := daemon.Wait(); err != nil {
			t.Errorf("daemon: %v\n%s", err, logs.String())
		}
	}
	t.Cleanup(stop)
	c := waitForDaemon(t, sock, logs, 20*time.Second)
	var next atomic.Int64
	var mu sync.Mutex
	var failures []string
	fail := func(s string) {
		mu.Lock()
		failures = append(failures, s)
		mu.Unlock()
	}
	claim := func() bool { return next.Add(1) <= int64(total) }
	start := time.Now()
	var wg sync.WaitGroup
	var viaCLI, viaAPI atomic.Int64
	for range cliWorkers {
		wg.Go(func() {
			for claim() {
				o := airlock(t, "", "--", "true")
				viaCLI.Add(1)
				if o.code != 0 || o.stderr != "" {
					fail(fmt.Sprintf("airlock run: exit %d: %s", o.code, strings.TrimSpace(o.stderr)))
				}
			}
		})
	}
	for range apiWorkers {
		wg.Go(func() {
			for claim() {
				r, err := c.Run(t.Context(), api.RunRequest{Tool: "sh", Argv: []string{"true"}})
				viaAPI.Add(1)
				if err != nil || r.Outcome != result.Exited || r.ExitCode != 0 {
					fail(fmt.Sprintf("daemon run: %+v %v", r, err))
				}
			}
		})
	}
	wg.Wait()
	t.Logf("%d runs (%d airlock run, %d through the daemon) in %v", viaCLI.Load()+viaAPI.Load(), viaCLI.Load(), viaAPI.Load(), time.Since(start).Round(time.Millisecond))
	if len(failures) > 0 {
		t.Fatalf("%d of %d runs failed, first: %s", len(failures), total, failures[0])
	}
	// The daemon's shutdown destroys its pool; then nothing of any of
	// these processes may be left.
	stop()
	if n := cliCgroups(t); n != 0 {
		t.Errorf("%d sandbox cgroups left", n)
	}
	if n := lockFiles(t, "/run/airlock/groups/"+strings.ReplaceAll(strings.Trim(testCgroup, "/"), "/", "%2F")); n != 0 {
		t.Errorf("%d sandbox lock files left", n)
	}
	// The uid range directory is the host's: other airlock processes
	// may hold ranges in it, and a range's file stays for the next
	// holder. None of these processes may hold one still.
	if n := heldLocks(t, "/run/airlock/ids"); n > idsHeldBefore {
		t.Errorf("%d uid ranges held after the run, %d before", n, idsHeldBefore)
	}
}

// heldLocks counts the lock files in dir that a process holds (flock).
func heldLocks(t *testing.T, dir string) int {
	t.Helper()
	ents, _ := os.ReadDir(dir)
	return len(ents) - lockFiles(t, dir)
}

// lockFiles counts the lock files in dir that no process holds (flock).
func lockFiles(t *testing.T, dir string) int {
	t.Helper()
	n := 0
	_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return nil
		}
		f, err := os.Open(p)
		if err != nil {
			return nil // removed meanwhile
		}
		defer f.Close()
		if syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) == nil {
			n++
		}
		return nil
	})
	return n
}
