package cgroup

import (
	"path/filepath"
	"runtime"
	"strconv"
	"testing"
	"time"
	"os"

	"github.com/containerd/cgroups/v3/cgroup1"
	"golang.org/x/sys/unix"
)

func BenchmarkZZPrimitives(b *testing.B) {
	p := openTestParent(b)
	l := p.v1
	for i, h := range l.hier {
		b.Run("mkdir-rmdir-"+h.name, func(b *testing.B) {
			n := 0
			for b.Loop() {
				d := filepath.Join(h.point, p.path, "x"+strconv.Itoa(n)); n++
				if err := unix.Mkdir(d, 0o755); err != nil { b.Fatal(err) }
				if err := unix.Rmdir(d); err != nil { b.Fatal(err) }
			}
		})
		_ = i
	}
	b.Run("syscall-getpid", func(b *testing.B) { for b.Loop() { unix.Getpid() } })
	b.Run("stat", func(b *testing.B) { var st unix.Stat_t; for b.Loop() { unix.Stat("/proc/self", &st) } })
	g, err := p.Create("prim", Limits{})
	if err != nil { b.Fatal(err) }
	defer g.Delete(b.Context())
	runtime.LockOSThread()
	b.Run("enter-leave-0", func(b *testing.B) {
		for b.Loop() {
			leave, err := g.EnterThread(); if err != nil { b.Fatal(err) }
			if err := leave(); err != nil { b.Fatal(err) }
		}
	})
	for i, h := range l.hier {
		b.Run("tasks-roundtrip-0-"+h.name, func(b *testing.B) {
			back := filepath.Join(h.point, "tasks")
			data, _ := os.ReadFile("/proc/thread-self/cgroup")
			cg, _ := procCgroupPath(data, h.name)
			back = filepath.Join(h.point, cg, "tasks")
			for b.Loop() {
				if err := writeFile(g.dirs[i]+"/tasks", "0"); err != nil { b.Fatal(err) }
				if err := writeFile(back, "0"); err != nil { b.Fatal(err) }
			}
		})
		b.Run("tasks-roundtrip-tid-"+h.name, func(b *testing.B) {
			data, _ := os.ReadFile("/proc/thread-self/cgroup")
			cg, _ := procCgroupPath(data, h.name)
			back := filepath.Join(h.point, cg, "tasks")
			tid := strconv.Itoa(unix.Gettid())
			for b.Loop() {
				if err := writeFile(g.dirs[i]+"/tasks", tid); err != nil { b.Fatal(err) }
				if err := writeFile(back, tid); err != nil { b.Fatal(err) }
			}
		})
	}
	b.Run("read-thread-self", func(b *testing.B) {
		var buf [4096]byte
		for b.Loop() { readFile("/proc/thread-self/cgroup", buf[:]) }
	})
	runtime.UnlockOSThread()
	b.Run("cc-processes-memory", func(b *testing.B) {
		for b.Loop() { if _, err := g.cg1.Processes(cgroup1.Memory, true); err != nil { b.Fatal(err) } }
	})
	b.Run("cc-processes-freezer", func(b *testing.B) {
		for b.Loop() { if _, err := g.cg1.Processes(cgroup1.Freezer, true); err != nil { b.Fatal(err) } }
	})
	b.Run("raw-procs-read", func(b *testing.B) {
		var buf [512]byte
		for b.Loop() { readFile(g.dirs[0]+"/cgroup.procs", buf[:]) }
	})
	b.Run("cc-new-load-delete", func(b *testing.B) {
		n := 0
		var tn, td time.Duration
		for b.Loop() {
			t0 := time.Now()
			cg, err := cgroup1.New(cgroup1.StaticPath(p.path+"/y"+strconv.Itoa(n)), p.v1Resources(Limits{MemoryBytes: 256<<20, Pids: 128, CPUMilli: 1000}), cgroup1.WithHierarchy(l.subsystemsFn)); n++
			if err != nil { b.Fatal(err) }
			t1 := time.Now()
			if err := cg.Delete(); err != nil { b.Fatal(err) }
			tn += t1.Sub(t0); td += time.Since(t1)
		}
		b.ReportMetric(float64(tn.Nanoseconds())/float64(n), "new-ns/op")
		b.ReportMetric(float64(td.Nanoseconds())/float64(n), "del-ns/op")
	})
	b.Run("raw-mkdir-limits-rmdir", func(b *testing.B) {
		n := 0
		for b.Loop() {
			var dirs []string
			for _, h := range l.hier { d := filepath.Join(h.point, p.path, "z"+strconv.Itoa(n)); dirs = append(dirs, d); if err := unix.Mkdir(d, 0o755); err != nil { b.Fatal(err) } }
			n++
			writeFile(dirs[0]+"/memory.limit_in_bytes", "268435456")
			writeFile(dirs[0]+"/memory.memsw.limit_in_bytes", "268435456")
			writeFile(dirs[1]+"/pids.max", "128")
			writeFile(dirs[2]+"/cpu.cfs_period_us", "100000")
			writeFile(dirs[2]+"/cpu.cfs_quota_us", "100000")
			for _, d := range dirs { if err := unix.Rmdir(d); err != nil { b.Fatal(err) } }
		}
	})
}
