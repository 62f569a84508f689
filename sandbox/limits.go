package sandbox

import (
	"errors"
	"fmt"
	"time"
)

// Limits are the ceilings of one sandbox. Every one is enforced by the
// kernel (cgroup, tmpfs size, rlimit) or by the host's own clock and
// counters, never by code inside the sandbox.
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
func DefaultLimits() Limits {
	return Limits{
		Memory:   512 << 20,
		Pids:     256,
		Disk:     256 << 20,
		FDs:      1024,
		Output:   16 << 20,
		Time:     5 * time.Minute,
		CPUMilli: 1000,
	}
}

// Ceilings below these leave too little for a shell to start; they are
// refused rather than producing confusing failures.
const (
	minMemory = 8 << 20
	// minPids leaves the command and three children room beside init's
	// three or four threads: at 4, init's fourth thread, when its
	// runtime made one, was a pids breach of a command that never
	// forked (5 runs in 100).
	minPids = 8
	minDisk = 64 << 10
	minFDs  = 16
	maxFDs  = 1 << 20
	// inodeBytes is the disk space one derived inode stands for.
	inodeBytes = 16 << 10
	minInodes  = 1024
)

// Validate reports the first ceiling that is out of range, naming it as the
// CLI flag does.
func (l Limits) Validate() error {
	var errs []error
	check := func(ok bool, format string, args ...any) {
		if !ok {
			errs = append(errs, fmt.Errorf(format, args...))
		}
	}
	check(l.Memory >= minMemory, "memory: %d bytes is below the minimum of %d", l.Memory, minMemory)
	check(l.Pids >= minPids, "pids: %d is below the minimum of %d (the count includes airlock's init, three or four threads)", l.Pids, minPids)
	check(l.Disk >= minDisk, "disk: %d bytes is below the minimum of %d", l.Disk, minDisk)
	check(l.Inodes >= 0, "inodes: %d is negative", l.Inodes)
	check(l.FDs >= minFDs && l.FDs <= maxFDs, "fds: %d is outside %d..%d", l.FDs, minFDs, maxFDs)
	check(l.Output > 0, "output: %d bytes must be positive", l.Output)
	check(l.Time > 0, "time: %v must be positive", l.Time)
	check(l.CPUMilli >= 0, "cpu: %d millicores is negative", l.CPUMilli)
	check(l.CPUTime >= 0, "cpu-time: %v is negative", l.CPUTime)
	return errors.Join(errs...)
}

// inodes is the inode ceiling of the scratch tmpfs.
func (l Limits) inodes() int64 {
	if l.Inodes > 0 {
		return l.Inodes
	}
	return max(l.Disk/inodeBytes, minInodes)
}
