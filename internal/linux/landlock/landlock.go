package landlock

import (
	"encoding/binary"
	"errors"
	"fmt"
	"path/filepath"
	"syscall"

	"golang.org/x/sys/unix"
)

// ABI returns the Landlock ABI version of the running kernel, or 0 when the
// kernel lacks Landlock or has it disabled. The result may be higher than
// the version Restrict uses.
func ABI() int {
	v, err := createRuleset(nil, 0, unix.LANDLOCK_CREATE_RULESET_VERSION)
	if err != nil {
		// ENOSYS: not built in; EOPNOTSUPP: built in but not enabled
		// at boot. Nothing else is expected for this query, and no
		// answer means no Landlock either way.
		return 0
	}
	return v
}

// errata returns the kernel's bit mask of fixed Landlock errata, or 0 on
// kernels that predate the query.
func errata() uint64 {
	v, err := createRuleset(nil, 0, unix.LANDLOCK_CREATE_RULESET_ERRATA)
	if err != nil {
		return 0
	}
	return uint64(v)
}

// Rules says which file hierarchies a restricted process may use, and how.
// Every filesystem access not granted here is denied: a path in none of the
// lists can still be looked up and stat'ed (Landlock does not restrict
// that), but not opened, listed, executed, created, removed or renamed.
//
// A path names a hierarchy: a directory with everything beneath it, or a
// single file. Paths must be absolute; symbolic links are followed, so the
// rule lands on what the link points to. Paths that do not exist are
// skipped. A path may appear in several lists; its rights add up. On a
// non-directory only the rights that make sense for a file are granted
// (execute, read, write, truncate, device ioctl).
type Rules struct {
	// ReadOnly hierarchies may be read, listed and executed.
	ReadOnly []string
	// ReadWrite hierarchies get every filesystem right the ABI in use
	// knows: read, write, execute, create and remove any kind of file,
	// rename and link within and between ReadWrite hierarchies (refer,
	// ABI 2), truncate (ABI 3) and device ioctls (ABI 5).
	ReadWrite []string
	// WriteFiles are files, or hierarchies of existing files, that may be
	// opened for reading and writing, truncated and (for devices) used
	// with ioctl, but in which nothing may be created or removed: for
	// example /dev/null, /dev/zero, /dev/full, /dev/ptmx and /dev/pts.
	WriteFiles []string
	// CallingThreadFallback restricts only the calling thread when the Go
	// runtime cannot reach all threads (a binary linked with cgo). It is
	// for callers that start every child from one locked OS thread, the
	// calling one, so that every child is confined either way.
	CallingThreadFallback bool
	// Privileged says the caller holds CAP_SYS_ADMIN in its user
	// namespace, with which the kernel enforces Landlock without
	// no_new_privs: Restrict then leaves no_new_privs alone, sparing one
	// call on every thread. A caller that sets it sets no_new_privs
	// itself where it needs it (see seccomp's TSYNC, which sets it on
	// every thread of a caller that has it).
	Privileged bool
}

// Rights granted by each list of Rules, before masking to the ABI in use
// and, for non-directories, to accessFile.
const (
	rightsReadOnly   = accessExecute | accessReadFile | accessReadDir
	rightsWriteFiles = accessReadFile | accessWriteFile | accessTruncate | accessIoctlDev
	rightsReadWrite  = ^uint64(0) // masked to every right of the ABI
)

// check rejects rules that cannot be meant: empty or relative paths.
func (r Rules) check() error {
	for _, list := range [][]string{r.ReadOnly, r.ReadWrite, r.WriteFiles} {
		for _, p := range list {
			if p == "" || !filepath.IsAbs(p) {
				return fmt.Errorf("landlock: path %q is not absolute", p)
			}
		}
	}
	return nil
}

// Restrict confines the calling process, all of its threads and every
// process it starts afterwards to r, as far as the kernel supports.
//
// It uses the newest Landlock ABI known to both the kernel and this package
// (currently at most 7) and returns that version. It handles every
// filesystem right of that ABI, so rights the kernel does not know are
// simply left out, and with ABI 6 or later it also sets the scopes
// LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET (no connecting to abstract UNIX
// sockets created outside the sandbox) and LANDLOCK_SCOPE_SIGNAL (no
// signalling processes outside the sandbox); the signal scope is left out
// on kernels that lack the fix for Landlock erratum 2 (see below). Network
// rights are not handled.
//
// When the kernel has no Landlock, Restrict applies nothing and returns
// 0, nil. On error nothing has been restricted unless the error says so;
// a caller that needs the confinement should treat any error as fatal.
//
// Restrict sets no_new_privs on every thread, which Landlock requires of an
// unprivileged caller and which is harmless when already set, unless
// Rules.Privileged. It must not run concurrently with itself.
//
// Thread-by-thread enforcement has one visible effect: each OS thread ends
// up in its own, identical, Landlock domain. With the signal scope, a
// process started from one thread cannot be signalled from another thread
// (kill fails with EPERM), because neither domain is an ancestor of the
// other; likewise, commands started from different threads cannot signal
// each other. A caller that signals its children should start and signal
// them all from one locked OS thread. (Kernels newer than ABI 7 offer
// LANDLOCK_RESTRICT_SELF_TSYNC, which puts all threads in one domain; this
// package does not use it yet.)
func Restrict(r Rules) (abi int, err error) {
	if err := r.check(); err != nil {
		return 0, err
	}
	abi = min(ABI(), maxABI)
	if abi < 1 {
		return 0, nil
	}
	handled := handledAccessFS(abi)
	attr := rulesetAttr{handledAccessFS: handled}
	size := uintptr(rulesetAttrSizeV1)
	if abi >= 6 {
		attr.scoped = scopeAbstractUnixSocket
		if errata()&erratumSignalScope != 0 {
			attr.scoped |= scopeSignal
		}
		size = rulesetAttrSizeV6
	}
	fd, err := createRuleset(&attr, size, 0)
	if err != nil {
		return 0, fmt.Errorf("landlock: create ruleset (ABI %d): %w", abi, err)
	}
	defer unix.Close(fd)

	for _, g := range []struct {
		paths  []string
		rights uint64
	}{
		{r.ReadOnly, rightsReadOnly},
		{r.ReadWrite, rightsReadWrite},
		{r.WriteFiles, rightsWriteFiles},
	} {
		for _, p := range g.paths {
			if err := addRule(fd, p, g.rights&handled); err != nil {
				return 0, err
			}
		}
	}

	// Landlock domains belong to threads, not processes:
	// landlock_restrict_self and PR_SET_NO_NEW_PRIVS change only the
	// calling thread's credentials, and a child inherits the domain of
	// the thread that forked it. A Go program runs goroutines on several
	// OS threads and may fork from any of them, so restricting only the
	// current thread would leave the others, and every command started
	// from them, unconfined. AllThreadsSyscall runs the call on every
	// thread the runtime has (new threads are cloned from restricted ones
	// and inherit the domain) and kills the program if the threads
	// disagree, so the result is all threads or none.
	if r.Privileged {
		_, _, errno := syscall.AllThreadsSyscall(unix.SYS_LANDLOCK_RESTRICT_SELF, uintptr(fd), 0, 0)
		if errno == syscall.ENOTSUP && r.CallingThreadFallback {
			if _, _, errno := syscall.RawSyscall(unix.SYS_LANDLOCK_RESTRICT_SELF, uintptr(fd), 0, 0); errno != 0 {
				return 0, fmt.Errorf("landlock: restrict self: %w", errno)
			}
		} else if errno != 0 {
			return 0, allThreadsErr("restrict self", errno)
		}
		return abi, nil
	}
	if _, _, errno := syscall.AllThreadsSyscall6(unix.SYS_PRCTL, unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0, 0); errno == syscall.ENOTSUP && r.CallingThreadFallback {
		if _, _, errno := syscall.RawSyscall(unix.SYS_PRCTL, unix.PR_SET_NO_NEW_PRIVS, 1, 0); errno != 0 {
			return 0, fmt.Errorf("landlock: set no_new_privs: %w", errno)
		}
		if _, _, errno := syscall.RawSyscall(unix.SYS_LANDLOCK_RESTRICT_SELF, uintptr(fd), 0, 0); errno != 0 {
			return 0, fmt.Errorf("landlock: restrict self: %w", errno)
		}
		return abi, nil
	} else if errno != 0 {
		return 0, allThreadsErr("set no_new_privs", errno)
	}
	if _, _, errno := syscall.AllThreadsSyscall(unix.SYS_LANDLOCK_RESTRICT_SELF, uintptr(fd), 0, 0); errno != 0 {
		return 0, fmt.Errorf("landlock: no_new_privs is set but %w", allThreadsErr("restrict self", errno))
	}
	return abi, nil
}

// allThreadsErr explains an AllThreadsSyscall failure.
func allThreadsErr(op string, errno syscall.Errno) error {
	if errno == syscall.ENOTSUP {
		return fmt.Errorf("landlock: %s on all threads: %w (the Go runtime refuses AllThreadsSyscall in binaries linked with cgo; build with CGO_ENABLED=0)", op, errno)
	}
	return fmt.Errorf("landlock: %s on all threads: %w", op, errno)
}

// addRule grants rights on the hierarchy at path, skipping paths that do
// not exist and dropping directory-only rights on non-directories.
func addRule(rulesetFD int, path string, rights uint64) error {
	if rights == 0 {
		return nil
	}
	// O_PATH opens without needing read permission and without side
	// effects (no device open), and is what Landlock expects.
	fd, err := unix.Open(path, unix.O_PATH|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("landlock: open %s: %w", path, err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("landlock: stat %s: %w", path, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		rights &= accessFile
		if rights == 0 {
			return nil
		}
	}
	if err := addPathRule(rulesetFD, rights, fd); err != nil {
		return fmt.Errorf("landlock: add rule for %s: %w", path, err)
	}
	return nil
}

// Ruleset is a Landlock ruleset prepared for a process that confines
// itself with raw system calls rather than through Restrict: a child
// between its clone and its exec, one thread that everything it starts
// inherits (see forkexec.Prog). It holds what landlock_create_ruleset
// takes and the rights each kind of rule gets on the running kernel.
type Ruleset struct {
	// ABI is the Landlock ABI in use; 0 when the kernel has none, and
	// nothing is to be restricted.
	ABI int
	// Attr is struct landlock_ruleset_attr; its size is len(Attr).
	Attr []byte
	// handled is every filesystem right the ruleset handles.
	handled uint64
}

// NewRuleset prepares a ruleset for the running kernel with the newest ABI
// both it and this package know (see Restrict), for a process whose every
// thread will be in one domain. It therefore sets the signal scope (ABI 6)
// whether or not the kernel has the fix for erratum 2, which concerns only
// threads of one process in different domains.
func NewRuleset() Ruleset {
	abi := min(ABI(), maxABI)
	if abi < 1 {
		return Ruleset{}
	}
	rs := Ruleset{ABI: abi, handled: handledAccessFS(abi)}
	attr := rulesetAttr{handledAccessFS: rs.handled}
	size := uintptr(rulesetAttrSizeV1)
	if abi >= 6 {
		attr.scoped = scopeAbstractUnixSocket | scopeSignal
		size = rulesetAttrSizeV6
	}
	rs.Attr = binary.NativeEndian.AppendUint64(nil, attr.handledAccessFS)
	if size > rulesetAttrSizeV1 {
		rs.Attr = binary.NativeEndian.AppendUint64(rs.Attr, attr.handledAccessNet)
		rs.Attr = binary.NativeEndian.AppendUint64(rs.Attr, attr.scoped)
	}
	return rs
}

// Kinds of rule, as Rules names them.
const (
	ReadOnly   = rightsReadOnly
	ReadWrite  = rightsReadWrite
	WriteFiles = rightsWriteFiles
	// Exec is what running a program needs of its file: to open it for
	// reading and to execute it.
	Exec = accessReadFile | accessExecute
)

// Rights returns the rights a rule of kind (ReadOnly, ReadWrite,
// WriteFiles or Exec) grants on a directory (dir) or on a file, as the
// kernel accepts them: only the rights the ruleset handles, and on a file
// only those that apply to one. 0 means no rule is needed.
func (rs Ruleset) Rights(kind uint64, dir bool) uint64 {
	r := kind & rs.handled
	if !dir {
		r &= accessFile
	}
	return r
}
