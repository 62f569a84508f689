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

// confine drops everything init will never need again. Commands are forked
// only from init's locked main thread, so per-thread state (securebits, the
// capability bounding set, ambient and inheritable capabilities,
// no_new_privs) is set there, directly; the uid and gid change is made on
// every thread by the Go runtime, which clears the capabilities of all of
// them; Landlock and seccomp are applied to every thread (seccomp's TSYNC
// also gives every thread the caller's no_new_privs). Order matters: the
// bounding set and securebits need CAP_SETPCAP, and Landlock without
// no_new_privs CAP_SYS_ADMIN, so they go before the uid change; seccomp
// goes last because it refuses calls made before it.
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
	if err := thisThread(unix.SYS_PRCTL, unix.PR_SET_SECUREBITS, bits, 0); err != nil {
		return fmt.Errorf("securebits: %w", err)
	}
	// The bounding set caps what any later exec could ever gain.
	for capNr := uintptr(0); ; capNr++ {
		err := thisThread(unix.SYS_PRCTL, unix.PR_CAPBSET_DROP, capNr, 0)
		if errors.Is(err, unix.EINVAL) {
			break // past the kernel's last capability
		}
		if err != nil {
			return fmt.Errorf("drop bounding capability %d: %w", capNr, err)
		}
	}
	if err := thisThread(unix.SYS_PRCTL, unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0); err != nil {
		return fmt.Errorf("clear ambient capabilities: %w", err)
	}
	// Landlock before the uid change, while init holds CAP_SYS_ADMIN
	// in its user namespace (see landlock.Rules.Privileged).
	if !c.NoLandlock {
		rw := []string{"/workspace", "/tmp", "/dev/shm"}
		if c.Image != nil && c.Image.Writable {
			// The root's upper layer is the sandbox's own, on its disk
			// tmpfs; /dev and /proc keep their read-only mounts.
			rw = []string{"/"}
		}
		if _, err := landlock.Restrict(landlock.Rules{
			ReadOnly:   []string{"/"},
			ReadWrite:  rw,
			WriteFiles: []string{"/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/pts"},
			// Commands are forked from this locked thread only.
			CallingThreadFallback: true,
			// Still root in its user namespace, init needs no
			// no_new_privs for Landlock; it sets that below, and
			// seccomp's TSYNC carries it to every thread.
			Privileged: true,
		}); err != nil {
			return fmt.Errorf("landlock: %w", err)
		}
	}
	// Supplementary groups were cleared when init was cloned; the uid and
	// gid change every thread. Init keeps a real and saved uid of its own
	// (InitUID) with the commands' uid as its effective one: every command
	// gets UID as all three (see server.start), and then matches none of
	// init's real and saved uids, so the kernel refuses any signal it
	// sends init (kill, tgkill, queued signals with forged codes, pidfds,
	// F_SETOWN). Otherwise a command could kill init with a signal the Go
	// runtime takes for a fault of its own.
	if err := syscall.Setresgid(c.GID, c.GID, c.GID); err != nil {
		return fmt.Errorf("setresgid: %w", err)
	}
	if err := syscall.Setresuid(c.InitUID, c.UID, c.InitUID); err != nil {
		return fmt.Errorf("setresuid: %w", err)
	}
	// Clear what is left (inheritable, and everything for uid 0).
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := thisThread(unix.SYS_CAPSET, uintptr(unsafe.Pointer(&hdr)), uintptr(unsafe.Pointer(&data[0])), 0); err != nil {
		return fmt.Errorf("capset: %w", err)
	}
	if err := thisThread(unix.SYS_PRCTL, unix.PR_SET_NO_NEW_PRIVS, 1, 0); err != nil {
		return fmt.Errorf("no_new_privs: %w", err)
	}
	if c.NoSeccomp {
		// Without a seccomp filter to carry it (TSYNC), every thread
		// gets no_new_privs here.
		if _, _, errno := syscall.AllThreadsSyscall(unix.SYS_PRCTL, unix.PR_SET_NO_NEW_PRIVS, 1, 0); errno != 0 && errno != syscall.ENOTSUP {
			return fmt.Errorf("no_new_privs on all threads: %w", errno)
		}
	}
	// Not dumpable: a command running as the same uid cannot ptrace init,
	// read /proc/1/mem or /proc/1/environ, or open /proc/1/fd/3 to talk to
	// the host over init's control channel.
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return fmt.Errorf("dumpable: %w", err)
	}
	if !c.NoSeccomp {
		prog, err := seccomp.Decode(c.Seccomp)
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

// thisThread makes a per-thread syscall on the calling thread, which is
// locked: it is the thread every command is forked from.
func thisThread(trap, a1, a2, a3 uintptr) error {
	if _, _, errno := syscall.RawSyscall(trap, a1, a2, a3); errno != 0 {
		return errno
	}
	return nil
}
