package sandbox

import (
	"fmt"
	"time"

	"github.com/airlockhq/airlock/internal/linux/cgroup"
	"github.com/airlockhq/airlock/internal/sbspec"
)

// Limits are the ceilings of one sandbox. Every one is enforced by the
// kernel (cgroup, tmpfs size, rlimit) or by the host's own clock and
// counters, never by code inside the sandbox. Its fields are those of
// sbspec.Limits, where the defaults and the checks are, so that config can
// check a file without linking the runtime.
type Limits struct {
	// Memory is the memory+swap ceiling of the whole sandbox, in bytes.
	// Files written to /workspace, /tmp and /dev/shm live in memory and
	// count here too.
	Memory int64
	// Pids caps processes and threads of the whole sandbox, airlock's
	// init included: it is the cgroup's pids.max, the kernel's own count.
	// Init is three or four threads (its Go runtime adds one now and
	// then), so the command and its children have Pids-4 at least.
	Pids int64
	// Disk is the writable space of /workspace, /tmp and /dev/shm
	// together, in bytes.
	Disk int64
	// Inodes caps the number of files there; 0 derives it from Disk.
	Inodes int64
	// FDs is RLIMIT_NOFILE of every process.
	FDs int64
	// Output caps stdout+stderr bytes of one command.
	Output int64
	// Time is the wall-clock ceiling of one command.
	Time time.Duration
	// CPUMilli throttles CPU bandwidth, in thousandths of a core; 0 means
	// unthrottled. Throttling is not a breach.
	CPUMilli int64
	// CPUTime is the CPU budget of one command (all its processes); 0
	// means none.
	CPUTime time.Duration
}

// DefaultLimits are the ceilings used when the caller sets none.
func DefaultLimits() Limits { return Limits(sbspec.DefaultLimits()) }

// inodeBytes is the disk space one derived inode stands for, and
// minInodes the fewest a derived ceiling gives.
const (
	inodeBytes = 16 << 10
	minInodes  = 1024
)

// Validate reports the first ceiling that is out of range, naming it as the
// CLI flag does. The minimums are sbspec's (MinMemory and the rest).
func (l Limits) Validate() error { return sbspec.Limits(l).Validate() }

// inodes is the inode ceiling of the scratch tmpfs.
func (l Limits) inodes() int64 {
	if l.Inodes > 0 {
		return l.Inodes
	}
	return max(l.Disk/inodeBytes, minInodes)
}

// ceilings are the limits of what runs in the sandbox now.
func (s *Sandbox) ceilings() Limits {
	if l := s.lowered.Load(); l != nil {
		return *l
	}
	return s.limits
}

// Lower tightens the sandbox's ceilings to l for everything that runs in
// it from now on: memory, pids and CPU bandwidth in its cgroup, where the
// kernel holds the whole sandbox to them, and the ceilings of each
// command (time, output, CPU time). A ceiling may only go down, so a
// caller given a sandbox of some limits can never get more than they:
// every field of l must be at most the sandbox's, and disk, inodes and
// descriptors, fixed when the sandbox was built, must be unchanged. A
// breach reports the lowered ceiling. The runtime's ledger keeps the
// ceilings the sandbox was built with until it is destroyed.
func (s *Sandbox) Lower(l Limits) error {
	// From the reading of the ceilings to the store of the new ones: two
	// calls at once must not both be checked against the same ceilings,
	// the second then raising the cgroup back above the first's.
	s.lowerMu.Lock()
	defer s.lowerMu.Unlock()
	cur := s.ceilings()
	if err := l.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	switch {
	case l.Disk != cur.Disk || l.Inodes != cur.Inodes || l.FDs != cur.FDs:
		return fmt.Errorf("%w: disk, inodes and fds are fixed when the sandbox is built", ErrInvalid)
	case l.Memory > cur.Memory, l.Pids > cur.Pids, l.Output > cur.Output, l.Time > cur.Time,
		cur.CPUMilli > 0 && (l.CPUMilli == 0 || l.CPUMilli > cur.CPUMilli),
		cur.CPUTime > 0 && (l.CPUTime == 0 || l.CPUTime > cur.CPUTime):
		return fmt.Errorf("%w: a sandbox's ceilings may only be lowered", ErrInvalid)
	}
	var g cgroup.Limits
	if l.Memory < cur.Memory {
		g.MemoryBytes = l.Memory
	}
	if l.Pids < cur.Pids {
		g.Pids = l.Pids
	}
	if l.CPUMilli != cur.CPUMilli {
		g.CPUMilli = l.CPUMilli
	}
	if g != (cgroup.Limits{}) {
		if err := s.group.Lower(g); err != nil {
			return err
		}
	}
	s.lowered.Store(&l)
	return nil
}
