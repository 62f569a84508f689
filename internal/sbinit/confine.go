package sbinit

import (
	"errors"
	"fmt"
	"syscall"
	"unsafe"

	"github.com/airlockhq/airlock/internal/initproto"
	"github.com/airlockhq/airlock/internal/linux/landlock"
	"github.com/airlockhq/airlock/internal/linux/seccomp"
	"golang.org/x/sys/unix"
)

// confine drops everything init will never need again. Per-thread state
// (capabilities, securebits, no_new_privs, Landlock) is set on the locked
// main thread, from which every command is forked, and on every other
// thread where the runtime allows it; seccomp is synchronised to all threads
// by the kernel. Order matters: the bounding set and securebits need
// CAP_SETPCAP, so they go before the uid change that clears capabilities;
// seccomp goes last because it refuses the calls made before it.
func confine(c *initproto.Setup) error {
	for _, r := range c.Rlimits {
		// syscall.Setrlimit (not unix.) so that the Go runtime stops
		// restoring its own saved RLIMIT_NOFILE in children.
		if err := syscall.Setrlimit(r.Resource, &syscall.Rlimit{Cur: r.Cur, Max: r.Max}); err != nil {
			return fmt.Errorf("rlimit %d: %w", r.Resource, err)
		}
	}
	// With these bits, uid 0 inside is not special to the kernel: exec
	// grants no capabilities and nothing can be re-enabled.
	bits := uintptr(secbitNoroot | secbitNorootLocked | secbitNoSetuidFixup |
		secbitNoSetuidFixupLocked | secbitKeepCapsLocked |
		secbitNoCapAmbientRaise | secbitNoCapAmbientRaiseLocked)
	if err := allThreads(unix.SYS_PRCTL, unix.PR_SET_SECUREBITS, bits, 0); err != nil {
		return fmt.Errorf("securebits: %w", err)
	}
	// The bounding set caps what any later exec could ever gain.
	for capNr := uintptr(0); ; capNr++ {
		err := allThreads(unix.SYS_PRCTL, unix.PR_CAPBSET_DROP, capNr, 0)
		if errors.Is(err, unix.EINVAL) {
			break // past the kernel's last capability
		}
		if err != nil {
			return fmt.Errorf("drop bounding capability %d: %w", capNr, err)
		}
	}
	if err := allThreads(unix.SYS_PRCTL, unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0); err != nil {
		return fmt.Errorf("clear ambient capabilities: %w", err)
	}
	// Host supplementary groups were already cleared when init started;
	// these calls are process-wide in Go.
	if err := syscall.Setgroups(nil); err != nil {
		return fmt.Errorf("setgroups: %w", err)
	}
	if err := syscall.Setresgid(c.GID, c.GID, c.GID); err != nil {
		return fmt.Errorf("setresgid: %w", err)
	}
	if err := syscall.Setresuid(c.UID, c.UID, c.UID); err != nil {
		return fmt.Errorf("setresuid: %w", err)
	}
	// Clear what is left (inheritable, and everything for uid 0).
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := allThreads(unix.SYS_CAPSET, uintptr(unsafe.Pointer(&hdr)), uintptr(unsafe.Pointer(&data[0])), 0); err != nil {
		return fmt.Errorf("capset: %w", err)
	}
	if err := allThreads(unix.SYS_PRCTL, unix.PR_SET_NO_NEW_PRIVS, 1, 0); err != nil {
		return fmt.Errorf("no_new_privs: %w", err)
	}
	// Not dumpable: a command running as the same uid cannot ptrace init,
	// read /proc/1/mem or /proc/1/environ, or open /proc/1/fd/3 to talk to
	// the host over init's control channel.
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return fmt.Errorf("dumpable: %w", err)
	}
	if !c.NoLandlock {
		if _, err := landlock.Restrict(landlock.Rules{
			ReadOnly:   []string{"/"},
			ReadWrite:  []string{"/workspace", "/tmp", "/dev/shm"},
			WriteFiles: []string{"/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/pts"},
			// Commands are forked from this locked thread only.
			CallingThreadFallback: true,
		}); err != nil {
			return fmt.Errorf("landlock: %w", err)
		}
	}
	if !c.NoSeccomp {
		prog, err := seccomp.DefaultProfile().Compile()
		if err != nil {
			return fmt.Errorf("seccomp: %w", err)
		}
		if err := seccomp.Install(prog); err != nil {
			return fmt.Errorf("seccomp: %w", err)
		}
	}
	return nil
}

// Securebits from linux/securebits.h.
const (
	secbitNoroot                  = 1 << 0
	secbitNorootLocked            = 1 << 1
	secbitNoSetuidFixup           = 1 << 2
	secbitNoSetuidFixupLocked     = 1 << 3
	secbitKeepCapsLocked          = 1 << 5
	secbitNoCapAmbientRaise       = 1 << 6
	secbitNoCapAmbientRaiseLocked = 1 << 7
)

// allThreads runs a per-thread syscall on every thread of init. When the
// runtime cannot (a binary built with cgo), it applies it to the calling
// thread only: that is the locked thread every command is forked from, so
// commands are confined either way.
func allThreads(trap, a1, a2, a3 uintptr) error {
	_, _, errno := syscall.AllThreadsSyscall(trap, a1, a2, a3)
	if errno == unix.ENOTSUP {
		_, _, errno = syscall.RawSyscall(trap, a1, a2, a3)
	}
	if errno != 0 {
		return errno
	}
	return nil
}
