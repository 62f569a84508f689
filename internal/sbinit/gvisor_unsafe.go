package sbinit

import (
	"fmt"
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
// needs it: runsc starts init as uid 0 of the sandbox with CAP_SETUID and
// CAP_SETGID only, and an empty bounding set. It empties the
// supplementary groups, and takes the commands' gid and uid as its
// effective ones with a real and saved uid of its own, so that no command
// can signal it; with no uid 0 left the kernel (gVisor's, as Linux) drops
// every capability, and the explicit capset makes sure. The rest (no
// new privileges, not dumpable, the check that no capability is left)
// is run's, as for the other backend. No seccomp filter or Landlock:
// gVisor's application kernel is the boundary here (see docs/isolation.md).
func confineInGVisor(ids string) error {
	uid, gid, initUID, err := parseGVisorIDs(ids)
	if err != nil {
		return err
	}
	// The bounding set goes first, on every thread (a thread's
	// credentials are its own): with it empty, an exec as root gains no
	// capability (its permitted set is the bounding and inheritable sets,
	// both empty), which is what the other backend's SECBIT_NOROOT does;
	// gVisor has no securebits but SECBIT_KEEP_CAPS. runsc gives init
	// only the three capabilities it needs here; dropping them from the
	// bounding set leaves them effective until the capset below. Then
	// every capability the kernel knows is checked to be out of it.
	for _, c := range []uintptr{unix.CAP_SETUID, unix.CAP_SETGID, unix.CAP_SETPCAP} {
		if err := allThreads(unix.SYS_PRCTL, unix.PR_CAPBSET_DROP, c, 0); err != nil {
			return fmt.Errorf("drop capability %d from the bounding set: %w", c, err)
		}
	}
	for c := 0; c < 64; c++ {
		in, err := unix.PrctlRetInt(unix.PR_CAPBSET_READ, uintptr(c), 0, 0, 0)
		if err == unix.EINVAL {
			break // past the kernel's last capability
		}
		if err != nil || in != 0 {
			return fmt.Errorf("capability %d is still in init's bounding set (%v): runsc did not start init as the bundle says", c, err)
		}
	}
	// The syscall package's calls apply to every thread of init.
	if err := syscall.Setgroups(nil); err != nil {
		return fmt.Errorf("setgroups: %w", err)
	}
	if err := syscall.Setresgid(gid, gid, gid); err != nil {
		return fmt.Errorf("setresgid: %w", err)
	}
	if err := syscall.Setresuid(initUID, uid, initUID); err != nil {
		return fmt.Errorf("setresuid: %w", err)
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var none [2]unix.CapUserData
	if err := allThreads(unix.SYS_CAPSET, uintptr(unsafe.Pointer(&hdr)), uintptr(unsafe.Pointer(&none[0])), 0); err != nil {
		return fmt.Errorf("capset: %w", err)
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
