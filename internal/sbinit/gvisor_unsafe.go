package sbinit

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// GVisorPath is where the init program lies inside a gVisor sandbox (a
// read-only bind of the host's file) and init's argv[0] there: runsc
// starts it as the container's process, with no program of airlock's
// before its exec.
const GVisorPath = "/.airlock-init"

// GVisorIDsEnv names the variable of a gVisor init's environment that
// holds the commands' uid and gid and init's own uid, as "uid:gid:inituid"
// (FormatGVisorIDs).
const GVisorIDsEnv = "AIRLOCK_INIT_IDS"

// FormatGVisorIDs writes the ids a gVisor init confines itself to.
func FormatGVisorIDs(uid, gid, initUID int) string {
	return fmt.Sprintf("%d:%d:%d", uid, gid, initUID)
}

func parseGVisorIDs(s string) (uid, gid, initUID int, err error) {
	parts := strings.Split(s, ":")
	if len(parts) != 3 {
		return 0, 0, 0, fmt.Errorf("%s=%q: want uid:gid:inituid", GVisorIDsEnv, s)
	}
	var ids [3]int
	for i, p := range parts {
		n, err := strconv.ParseUint(p, 10, 16)
		if err != nil {
			return 0, 0, 0, fmt.Errorf("%s=%q: %w", GVisorIDsEnv, s, err)
		}
		ids[i] = int(n)
	}
	if ids[0] == ids[2] || ids[2] == 0 {
		return 0, 0, 0, fmt.Errorf("%s=%q: init's uid must be neither root nor the commands'", GVisorIDsEnv, s)
	}
	return ids[0], ids[1], ids[2], nil
}

// confineInGVisor does for a gVisor init what the namespace backend's
// program does before init's exec (see builder.confine), where gVisor
// needs it. runsc starts init as its own uid with the commands' gid, no
// supplementary group, no_new_privs, an empty bounding set and CAP_SETUID
// alone, as an ambient capability (the bundle, see sandbox's
// startGVisor); each is checked here, on this thread, whose credentials
// every thread of init was cloned with. Then two all-thread calls: the
// commands' uid becomes init's effective one, with a real and saved uid
// of its own, so that no command can signal it; and every capability is
// dropped, which run checks. The rest (not dumpable) is run's, as for the
// other backend. No seccomp filter or Landlock: gVisor's application
// kernel is the boundary here (see docs/isolation.md).
//
// Each all-thread call signals every other thread of init and waits for
// it, through gVisor's kernel: two calls rather than the nine of setting
// each of these here took 3-4 ms off a sandbox's start (docs/benchmarks.md).
func confineInGVisor(ids string) error {
	uid, gid, initUID, err := parseGVisorIDs(ids)
	if err != nil {
		return err
	}
	bad := func(format string, a ...any) error {
		return fmt.Errorf("init's "+format+": runsc did not start init as the bundle says", a...)
	}
	// With the bounding set empty, an exec as root gains no capability
	// (its permitted set is the bounding and inheritable sets, the
	// latter emptied below), which is what the other backend's
	// SECBIT_NOROOT does; gVisor has no securebits but SECBIT_KEEP_CAPS.
	// Read from the guest kernel's /proc in one go, not with a prctl per
	// capability (41 trips to gVisor's kernel); nothing but init runs yet.
	if bnd, err := boundingSet(); err != nil || bnd != 0 {
		return bad("bounding set is %#x (%v)", bnd, err)
	}
	if r, e, s := unix.Getresuid(); r != initUID || e != initUID || s != initUID {
		return bad("uids are %d %d %d, want %d", r, e, s, initUID)
	}
	if r, e, s := unix.Getresgid(); r != gid || e != gid || s != gid {
		return bad("gids are %d %d %d, want %d", r, e, s, gid)
	}
	if groups, err := unix.Getgroups(); err != nil || len(groups) != 0 {
		return bad("supplementary groups are %v (%v), want none", groups, err)
	}
	if nnp, err := unix.PrctlRetInt(unix.PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0); err != nil || nnp != 1 {
		return bad("no_new_privs is %d (%v), want 1", nnp, err)
	}
	// The syscall package's call applies to every thread of init.
	if err := syscall.Setresuid(initUID, uid, initUID); err != nil {
		return fmt.Errorf("setresuid: %w", err)
	}
	// No capability left in any set; the ambient set goes with the
	// inheritable one.
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var none [2]unix.CapUserData
	if err := allThreads(unix.SYS_CAPSET, uintptr(unsafe.Pointer(&hdr)), uintptr(unsafe.Pointer(&none[0])), 0); err != nil {
		return fmt.Errorf("capset: %w", err)
	}
	if set, err := unix.PrctlRetInt(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_IS_SET, unix.CAP_SETUID, 0, 0); err != nil || set != 0 {
		return fmt.Errorf("CAP_SETUID is still ambient (%d, %v)", set, err)
	}
	return nil
}

// allThreads makes a system call on every thread of init, or, in a binary
// linked with cgo (a test binary under the race detector as its own
// init), on this one: the thread every command is forked from.
func allThreads(trap, a1, a2, a3 uintptr) error {
	_, _, errno := syscall.AllThreadsSyscall(trap, a1, a2, a3)
	if errno == syscall.ENOTSUP {
		_, _, errno = syscall.RawSyscall(trap, a1, a2, a3)
	}
	if errno != 0 {
		return errno
	}
	return nil
}

// boundingSet reads init's capability bounding set from
// /proc/self/status (the main thread's; every thread of init was
// cloned with the credentials runsc started it with).
func boundingSet() (uint64, error) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, err
	}
	return statusCapBnd(string(b))
}

// statusCapBnd reads the CapBnd line of a /proc/PID/status.
func statusCapBnd(status string) (uint64, error) {
	for line := range strings.SplitSeq(status, "\n") {
		if v, ok := strings.CutPrefix(line, "CapBnd:"); ok {
			return strconv.ParseUint(strings.TrimSpace(v), 16, 64)
		}
	}
	return 0, fmt.Errorf("no CapBnd line in /proc/self/status")
}
