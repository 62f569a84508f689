package sandbox

import (
	"time"

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
