package sandbox

import (
	"context"
	"github.com/airlockhq/airlock/internal/linux/cgroup"
	"os"
	"strconv"
	"time"

	"github.com/airlockhq/airlock/result"
	"golang.org/x/sys/unix"
)

// monitor checks the ceilings while the command runs and takes samples.
// Enforcement is the kernel's; this only notices a breach the kernel has
// already enforced (an OOM kill, a refused fork, a full tmpfs) and turns
// it into the destruction of the whole sandbox and a named outcome.
//
// It is started at the first check, checkEvery after the command, and
// checks at once, then every checkEvery; samples are due every
// SampleEvery from the command's start.
func (x *execution) monitor(ctx context.Context) {
	every := checkEvery
	if x.req.Resident {
		// A resident command waits, mostly, for its next unit of work,
		// and lives as long as its session: checked ten times less often.
		// A breach that ends it (an OOM kill) is still named at once, by
		// the last look after its end.
		every = residentCheckEvery
	}
	check := time.NewTicker(every)
	defer check.Stop()
	nextSample := x.start.Add(x.req.SampleEvery)
	nextSockets := x.start.Add(socketsEvery)
	if x.s.gv != nil && x.s.gv.direct {
		// A one-command gVisor sandbox's command can hold no socket
		// before runsc has made the sandbox (see directFirstCheck).
		nextSockets = nextSockets.Add(directFirstCheck)
	}
	now := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-x.breached:
			return
		default:
		}
		if x.check(true) {
			return
		}
		if now.After(nextSockets) {
			nextSockets = now.Add(socketsEvery)
			if x.checkSockets() {
				return
			}
		}
		if now.After(nextSample) {
			nextSample = now.Add(x.req.SampleEvery)
			if smp, ok := x.sample(); ok && x.req.OnEvent != nil {
				x.req.OnEvent(result.Event{Type: result.EventSample, Millis: smp.Millis, Sample: &smp})
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-x.breached:
			return
		case now = <-check.C:
		}
	}
}

// check looks for a breach and reports whether it found one; fds adds the
// descriptor check, which needs a look at every process.
func (x *execution) check(fds bool) bool {
	c, err := x.s.group.Counters()
	d, dok := x.disk()
	return x.checkReading(c, err == nil, d, dok, fds)
}

// checkReading is check on a reading already taken.
func (x *execution) checkReading(c cgroup.Counters, cok bool, d diskUse, dok bool, fds bool) bool {
	s := x.s
	l := s.ceilings()
	if cok {
		x.noteUsage(c.MemoryPeakBytes, c.MemoryBytes, max(c.PidsPeak, c.Pids), c.CPUUsageNanos)
		switch {
		case c.OOMKills > 0:
			x.setBreach(&result.Limit{Name: result.LimitMemory, Ceiling: l.Memory, Observed: max(c.MemoryPeakBytes, c.MemoryBytes), Unit: result.UnitBytes})
			return true
		case c.PidsMaxEvents > 0:
			x.setBreach(&result.Limit{Name: result.LimitPids, Ceiling: l.Pids, Observed: max(c.PidsPeak, c.Pids, l.Pids), Unit: result.UnitCount})
			return true
		case l.CPUTime > 0 && !x.req.Resident && c.CPUUsageNanos-x.base.nanos >= l.CPUTime.Nanoseconds():
			x.setBreach(&result.Limit{Name: result.LimitCPU, Ceiling: l.CPUTime.Milliseconds(), Observed: (c.CPUUsageNanos - x.base.nanos) / 1e6, Unit: result.UnitMillis})
			return true
		}
	}
	if dok {
		switch {
		case d.freeBlocks == 0:
			x.setBreach(&result.Limit{Name: result.LimitDisk, Ceiling: l.Disk, Observed: d.used, Unit: result.UnitBytes})
			return true
		case d.freeInodes == 0:
			x.setBreach(&result.Limit{Name: result.LimitDisk, Ceiling: l.inodes(), Observed: d.inodes, Unit: result.UnitInodes})
			return true
		}
	}
	if l := s.fullVolume(); l != nil {
		x.setBreach(l)
		return true
	}
	if fds {
		// Under gVisor the commands' descriptors are the guest kernel's,
		// not the host's: no process on the host holds them, and init
		// looks in the guest instead.
		var n int64
		if s.gv != nil {
			n = s.gv.fdsHeld.Load()
		} else {
			n = x.fdHolder()
		}
		if n > 0 {
			x.setBreach(&result.Limit{Name: result.LimitFDs, Ceiling: l.FDs, Observed: n, Unit: result.UnitCount})
			return true
		}
	}
	return false
}

type diskUse struct {
	used, inodes           int64
	freeBlocks, freeInodes uint64
}

func (x *execution) disk() (diskUse, bool) {
	var st unix.Statfs_t
	if err := unix.Fstatfs(x.s.scratch, &st); err != nil {
		return diskUse{}, false
	}
	d := diskUse{
		used:       int64(st.Blocks-st.Bfree) * st.Bsize,
		inodes:     int64(st.Files - st.Ffree),
		freeBlocks: st.Bfree,
		freeInodes: st.Ffree,
	}
	x.mu.Lock()
	x.usage.DiskPeakBytes = max(x.usage.DiskPeakBytes, d.used)
	x.mu.Unlock()
	return d, true
}

// fdHolder finds a process holding its whole descriptor ceiling: its
// highest allowed descriptor is open and its table is full. Init is
// skipped; it holds only a few.
func (x *execution) fdHolder() (count int64) {
	ceiling := x.s.ceilings().FDs
	pids, err := x.s.group.Procs()
	if err != nil {
		return 0
	}
	last := strconv.FormatInt(ceiling-1, 10)
	for _, p := range pids {
		if p == x.s.pid {
			continue
		}
		dir := "/proc/" + strconv.Itoa(p) + "/fd/"
		var st unix.Stat_t
		if unix.Lstat(dir+last, &st) != nil {
			continue
		}
		f, err := os.Open(dir)
		if err != nil {
			continue
		}
		names, _ := f.Readdirnames(-1)
		f.Close()
		if int64(len(names)) >= ceiling {
			return int64(len(names))
		}
	}
	return 0
}

func (x *execution) noteUsage(memPeak, mem, pids, cpuNanos int64) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.usage.MemoryPeakBytes = max(x.usage.MemoryPeakBytes, memPeak, mem)
	x.usage.PidsPeak = max(x.usage.PidsPeak, pids)
	x.usage.CPUMillis = (cpuNanos - x.base.nanos) / 1e6
}

// sample takes one reading and keeps it as evidence.
func (x *execution) sample() (result.Sample, bool) {
	c, err := x.s.group.Counters()
	if err != nil {
		return result.Sample{}, false
	}
	d, dok := x.disk()
	return x.keepSample(c, d, dok), true
}

// keepSample keeps a reading already taken as evidence.
func (x *execution) keepSample(c cgroup.Counters, d diskUse, dok bool) result.Sample {
	smp := result.Sample{
		Millis:      time.Since(x.start).Milliseconds(),
		MemoryBytes: c.MemoryBytes,
		Pids:        c.Pids,
		CPUMillis:   (c.CPUUsageNanos - x.base.nanos) / 1e6,
	}
	if dok {
		smp.DiskBytes, smp.DiskInodes = d.used, d.inodes
	}
	x.noteUsage(c.MemoryPeakBytes, c.MemoryBytes, c.Pids, c.CPUUsageNanos)
	x.mu.Lock()
	x.samples = append(x.samples, smp)
	if len(x.samples) > evidenceKept {
		x.samples = x.samples[len(x.samples)-evidenceKept:]
	}
	x.mu.Unlock()
	return smp
}

// Sample reads the sandbox's current resource use from the host: memory
// (everything its cgroup is charged, kernel objects included), processes,
// CPU time since creation, and scratch disk.
//
// It counts as an exec while it reads, so that Destroy's teardown (which
// closes what it reads) waits for it; on a sandbox being destroyed it is
// ErrDead.
func (s *Sandbox) Sample() (result.Sample, error) {
	s.mu.Lock()
	if s.killed {
		s.mu.Unlock()
		return result.Sample{}, ErrDead
	}
	s.execs.Add(1)
	s.mu.Unlock()
	defer s.execs.Done()
	c, err := s.group.Counters()
	if err != nil {
		return result.Sample{}, err
	}
	smp := result.Sample{MemoryBytes: c.MemoryBytes, Pids: c.Pids, CPUMillis: c.CPUUsageNanos / 1e6}
	var st unix.Statfs_t
	if !s.opened.Load() {
		return smp, nil // still starting: no disk reading yet
	}
	if err := unix.Fstatfs(s.scratch, &st); err == nil {
		smp.DiskBytes = int64(st.Blocks-st.Bfree) * st.Bsize
		smp.DiskInodes = int64(st.Files - st.Ffree)
	}
	return smp, nil
}
