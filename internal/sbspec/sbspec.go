// Package sbspec holds the plain values a sandbox is asked for — its
// ceilings, the host paths bound into it, the user its commands run as —
// with their defaults and checks, apart from the runtime that enforces
// them. Package config checks a file against these and hands them on;
// package sandbox takes the same values as its own Limits, Mount and User,
// which have the same fields, so the conversion between the two is checked
// by the compiler and a field added to one side only stops the build.
//
// It links only the standard library: config, and whatever reads a
// config, need not link the sandbox runtime (cgroups, seccomp, init) to
// know what a valid sandbox is.
package sbspec

import (
	"errors"
	"fmt"
	"os"
	"path"
	"strings"
	"time"
)

// HomeDir is the sandbox user's home and the default working directory.
const HomeDir = "/workspace"

// Limits are the ceilings of one sandbox; see sandbox.Limits for what
// each covers and how it is enforced.
type Limits struct {
	// Memory is the memory+swap ceiling of the whole sandbox, in bytes.
	Memory int64
	// Pids caps processes and threads of the whole sandbox, init's
	// included.
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
	// unthrottled.
	CPUMilli int64
	// CPUTime is the CPU budget of one command; 0 means none.
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
	MinMemory = 8 << 20
	// MinPids leaves the command and three children room beside init's
	// three or four threads: at 4, init's fourth thread, when its
	// runtime made one, was a pids breach of a command that never
	// forked (5 runs in 100).
	MinPids = 8
	MinDisk = 64 << 10
	MinFDs  = 16
	MaxFDs  = 1 << 20
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
	check(l.Memory >= MinMemory, "memory: %d bytes is below the minimum of %d", l.Memory, MinMemory)
	check(l.Pids >= MinPids, "pids: %d is below the minimum of %d (the count includes airlock's init, three or four threads)", l.Pids, MinPids)
	check(l.Disk >= MinDisk, "disk: %d bytes is below the minimum of %d", l.Disk, MinDisk)
	check(l.Inodes >= 0, "inodes: %d is negative", l.Inodes)
	check(l.FDs >= MinFDs && l.FDs <= MaxFDs, "fds: %d is outside %d..%d", l.FDs, MinFDs, MaxFDs)
	check(l.Output > 0, "output: %d bytes must be positive", l.Output)
	check(l.Time > 0, "time: %v must be positive", l.Time)
	check(l.CPUMilli >= 0, "cpu: %d millicores is negative", l.CPUMilli)
	check(l.CPUTime >= 0, "cpu-time: %v is negative", l.CPUTime)
	return errors.Join(errs...)
}

// User is the identity commands run as, inside the sandbox's id range.
// Isolation backends: the kernel-namespace runtime (the default) and
// gVisor (runsc's systrap platform).
const (
	IsolationNamespaces = "namespaces"
	IsolationGVisor     = "gvisor"
)

// gVisor's floors: its own processes (runsc, the sentry, the gofer) count
// in a sandbox's memory and pids, so less leaves it too little to start.
const (
	GVisorMinMemory = 64 << 20
	GVisorMinPids   = 64
)

type User struct {
	UID, GID uint32
}

// Mount is a host file or directory bound read-only into a sandbox. It is
// never writable, and nosuid and nodev like every bind.
type Mount struct {
	// Source is the absolute host path. Init reaches it with the
	// sandbox's unprivileged ids, so it must be readable by others.
	Source string
	// Target is the absolute path inside; it may not be in or over the
	// paths airlock builds (/, /proc, /dev, /etc, /tmp, /workspace, the
	// host's system directories).
	Target string
}

// reservedTargets are the paths a mount may not cover or land inside.
var reservedTargets = []string{"/proc", "/dev", "/sys", "/etc", "/tmp", "/workspace", "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/run", "/var", "/root", "/home"}

// CheckTarget reports why a mount or a volume cannot be at target
// inside a sandbox, or nil: it must be absolute and clean, and not in or
// over what airlock builds.
func CheckTarget(target string) error {
	if !path.IsAbs(target) || path.Clean(target) != target || len(target) > 4095 || strings.ContainsRune(target, 0) {
		return fmt.Errorf("mount target %q: want an absolute, clean path", target)
	}
	if target == "/" {
		return fmt.Errorf("mount target %q: the root is airlock's", target)
	}
	for _, r := range reservedTargets {
		if target == r || strings.HasPrefix(target, r+"/") || strings.HasPrefix(r, target+"/") {
			return fmt.Errorf("mount target %q: %s is built by airlock; choose another place, like /srv or /opt", target, r)
		}
	}
	return nil
}

// Check reports why m cannot be mounted, or nil. It looks at the host
// path too: it must exist and not be a symlink.
func (m Mount) Check() error {
	if !path.IsAbs(m.Source) || path.Clean(m.Source) != m.Source || len(m.Source) > 4095 || strings.ContainsRune(m.Source, 0) {
		return fmt.Errorf("mount source %q: want an absolute, clean path", m.Source)
	}
	if err := CheckTarget(m.Target); err != nil {
		return err
	}
	fi, err := os.Lstat(m.Source)
	if err != nil {
		return fmt.Errorf("mount source: %w", err)
	}
	if fi.Mode()&os.ModeSymlink != 0 {
		return fmt.Errorf("mount source %q is a symlink; name what it points to", m.Source)
	}
	if !fi.IsDir() && !fi.Mode().IsRegular() {
		return fmt.Errorf("mount source %q is neither a directory nor a regular file", m.Source)
	}
	// Init binds the source with the sandbox's unprivileged ids: others
	// must be able to reach and read it.
	need := os.FileMode(0o004)
	if fi.IsDir() {
		need = 0o005
	}
	if fi.Mode().Perm()&need != need {
		return fmt.Errorf("mount source %q is not readable by others (mode %v); the sandbox reads it with unprivileged ids", m.Source, fi.Mode().Perm())
	}
	for d := path.Dir(m.Source); d != "/"; d = path.Dir(d) {
		if di, err := os.Stat(d); err == nil && di.Mode().Perm()&0o001 == 0 {
			return fmt.Errorf("mount source %q: %s cannot be traversed by others (mode %v); the sandbox reads it with unprivileged ids", m.Source, d, di.Mode().Perm())
		}
	}
	return nil
}
