package cgroup

import (
	"context"
	"runtime"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// BenchmarkCreateDelete measures the cgroup part of a sandbox's life
// without its processes: Create with all three limits, placement (v1:
// EnterThread and leave; v2: DirFD), the first Counters read (which opens
// the kept files), the teardown check (Populated, then Kill only if
// something is left, as the sandbox teardown does), and Delete. The
// per-phase metrics say where the time goes.
func BenchmarkCreateDelete(b *testing.B) {
	p := openTestParent(b)
	l := Limits{MemoryBytes: 256 << 20, Pids: 128, CPUMilli: 1000}
	ctx := context.Background()
	// EnterThread needs a locked thread, as in real use. It is unlocked
	// only on success: after a failed leave the thread must not return to
	// the runtime.
	runtime.LockOSThread()
	var tCreate, tPlace, tCounters, tCheck, tDelete time.Duration
	n := 0
	for b.Loop() {
		id := "bench-" + strconv.Itoa(n)
		n++
		t0 := time.Now()
		g, err := p.Create(id, l)
		if err != nil {
			b.Fatalf("Create: %v", err)
		}
		t1 := time.Now()
		if p.Version() == V1 {
			leave, err := g.EnterThread()
			if err != nil {
				b.Fatalf("EnterThread: %v", err)
			}
			if err := leave(); err != nil {
				b.Fatalf("leave: %v", err) // thread stays locked and is discarded
			}
		} else {
			fd, err := g.DirFD()
			if err != nil {
				b.Fatalf("DirFD: %v", err)
			}
			unix.Close(fd)
		}
		t2 := time.Now()
		if _, err := g.Counters(); err != nil {
			b.Fatalf("Counters: %v", err)
		}
		t3 := time.Now()
		if pop, err := g.Populated(); err != nil || pop {
			b.Fatalf("Populated() = %v, %v on a group without processes", pop, err)
		}
		t4 := time.Now()
		if err := g.Delete(ctx); err != nil {
			b.Fatalf("Delete: %v", err)
		}
		t5 := time.Now()
		tCreate += t1.Sub(t0)
		tPlace += t2.Sub(t1)
		tCounters += t3.Sub(t2)
		tCheck += t4.Sub(t3)
		tDelete += t5.Sub(t4)
	}
	runtime.UnlockOSThread()
	per := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / float64(n) }
	b.ReportMetric(per(tCreate), "create-ns/op")
	b.ReportMetric(per(tPlace), "place-ns/op")
	b.ReportMetric(per(tCounters), "counters-ns/op")
	b.ReportMetric(per(tCheck), "populated-ns/op")
	b.ReportMetric(per(tDelete), "delete-ns/op")
}

// BenchmarkCounters measures one poll of a monitor: all counters through
// the kept descriptors.
func BenchmarkCounters(b *testing.B) {
	p := openTestParent(b)
	g, err := p.Create("counters", Limits{MemoryBytes: 256 << 20, Pids: 128, CPUMilli: 1000})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = g.Delete(context.Background()) })
	if _, err := g.Counters(); err != nil { // opens the files
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := g.Counters(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPopulated measures the check a sandbox's teardown starts with.
func BenchmarkPopulated(b *testing.B) {
	p := openTestParent(b)
	g, err := p.Create("populated", Limits{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = g.Delete(context.Background()) })
	b.ReportAllocs()
	for b.Loop() {
		if _, err := g.Populated(); err != nil {
			b.Fatal(err)
		}
	}
}
