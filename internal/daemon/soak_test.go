package daemon

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/testutil"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/client"
	"github.com/airlockhq/airlock/internal/config"
	"github.com/airlockhq/airlock/internal/testutil/isolatednet"
	"github.com/airlockhq/airlock/result"
	"github.com/airlockhq/airlock/sandbox"
)

func openFDs(t *testing.T) int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// TestSoak makes 5,000 runs (200 with -short) through the socket, four
// clients at a time, and checks that the daemon ends where it began: no
// sandbox, goroutine or descriptor left, and memory steady.
func TestSoak(t *testing.T) {
	isolatednet.Require(t)
	n := 5000
	if testing.Short() {
		n = 200
	}
	cfg, err := config.Parse("airlock.yaml", []byte("tools:\n  sh:\n    pool: {warm: 2}\n"))
	if err != nil {
		t.Fatal(err)
	}
	before := cgroupCount(t)
	baseG := runtime.NumGoroutine()
	baseFD := openFDs(t)
	sock := filepath.Join(t.TempDir(), "airlock.sock")
	d, err := New(t.Context(), Options{Config: cfg, Socket: sock, Sandbox: sandbox.Options{StateDir: testStateDir, CgroupParent: testCgroup, InitPath: testutil.InitPath(t)}, AuditPath: testAudit(t), Grace: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Serve(ctx) }()
	c := client.New(sock)
	var next atomic.Int64
	var heapAtTenth uint64
	var once sync.Once
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(n) {
				r, err := c.Run(context.Background(), api.RunRequest{Tool: "sh", Argv: []string{"true"}})
				if err != nil || r.Outcome != result.Exited || r.ExitCode != 0 {
					t.Errorf("run: %+v %v", r, err)
					return
				}
				if next.Load() == int64(n/10) {
					once.Do(func() {
						runtime.GC()
						var ms runtime.MemStats
						runtime.ReadMemStats(&ms)
						heapAtTenth = ms.HeapAlloc
					})
				}
			}
		}()
	}
	wg.Wait()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if heapAtTenth > 0 && ms.HeapAlloc > 2*heapAtTenth+(8<<20) {
		t.Errorf("heap grew from %d to %d bytes over the soak", heapAtTenth, ms.HeapAlloc)
	}
	if got := cgroupCount(t); got != before {
		t.Errorf("%d sandbox cgroups after the soak, want %d", got, before)
	}
	// Goroutines and descriptors settle back (idle HTTP connections of the
	// client are closed first).
	c = nil
	deadline := time.Now().Add(10 * time.Second)
	for {
		g, fd := runtime.NumGoroutine(), openFDs(t)
		if g <= baseG+2 && fd <= baseFD+2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the soak: %d goroutines (from %d), %d descriptors (from %d)", g, baseG, fd, baseFD)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
