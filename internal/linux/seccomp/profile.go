//go:build linux

package seccomp

import (
	"fmt"
	"slices"

	"golang.org/x/sys/unix"
)

// Action is a seccomp filter return value: one of the SECCOMP_RET_* actions
// in the upper 16 bits and, for [ActErrno], the errno in the lower 16.
type Action uint32

const (
	// ActAllow lets the syscall run.
	ActAllow Action = unix.SECCOMP_RET_ALLOW
	// ActKillProcess kills the whole process as if by an uncatchable SIGSYS.
	ActKillProcess Action = unix.SECCOMP_RET_KILL_PROCESS
)

// maxErrno is the largest errno the kernel passes through from a filter
// (MAX_ERRNO in include/linux/err.h); larger data values are clamped.
const maxErrno = 4095

// ActErrno makes the syscall fail with errno e without running it.
func ActErrno(e unix.Errno) Action {
	return Action(unix.SECCOMP_RET_ERRNO | (uint32(e) & unix.SECCOMP_RET_DATA))
}

// Errno reports the errno of an ERRNO action and whether a is one.
func (a Action) Errno() (unix.Errno, bool) {
	if uint32(a)&unix.SECCOMP_RET_ACTION_FULL != unix.SECCOMP_RET_ERRNO {
		return 0, false
	}
	return unix.Errno(uint32(a) & unix.SECCOMP_RET_DATA), true
}

func (a Action) String() string {
	switch a {
	case ActAllow:
		return "allow"
	case ActKillProcess:
		return "kill_process"
	}
	if e, ok := a.Errno(); ok {
		if name := unix.ErrnoName(e); name != "" {
			return "errno(" + name + ")"
		}
		return fmt.Sprintf("errno(%d)", uint32(e))
	}
	return fmt.Sprintf("action(%#x)", uint32(a))
}

// valid reports whether the compiler accepts a as an outcome. Only the
// actions this package needs are accepted; ERRNO(0) is rejected because it
// would make a refused syscall look as if it had succeeded.
func (a Action) valid() bool {
	if e, ok := a.Errno(); ok {
		return e >= 1 && e <= maxErrno
	}
	return a == ActAllow || a == ActKillProcess
}

// Op says how a [Cond] compares an argument with its values.
type Op uint8

const (
	// OpIn holds when the masked argument equals one of the values.
	OpIn Op = iota + 1
	// OpNotIn holds when the masked argument equals none of the values.
	OpNotIn
)

func (o Op) String() string {
	switch o {
	case OpIn:
		return "in"
	case OpNotIn:
		return "not in"
	}
	return fmt.Sprintf("op(%d)", uint8(o))
}

// Cond tests one syscall argument.
//
// Only the low 32 bits of the argument are compared. Every argument this
// profile inspects is one the kernel itself reads as a 32-bit value: socket's
// domain, type and protocol and personality's persona are int or unsigned
// int, ioctl's request is declared unsigned int, and legacy clone uses only
// lower_32_bits(flags) (all CLONE_NEW* bits live there). Comparing the low
// word therefore decides on exactly the value the kernel acts on, whatever
// the caller puts in the high word. Comparing all 64 bits would be wrong for
// deny rules: ioctl(fd, TIOCSTI|1<<32, ...) would not equal TIOCSTI, pass the
// filter, and still reach the kernel as TIOCSTI.
type Cond struct {
	// Arg is the argument index, 0 to 5.
	Arg int
	// Mask is ANDed with the argument before comparing; 0 means all 32
	// bits.
	Mask uint32
	Op   Op
	// Values are compared with the masked argument; at least one.
	Values []uint32
}

func (c Cond) mask() uint32 {
	if c.Mask == 0 {
		return ^uint32(0)
	}
	return c.Mask
}

// Case applies Action when every condition in When holds.
type Case struct {
	When   []Cond
	Action Action
}

// Rule says what happens to one syscall.
type Rule struct {
	// Name is the syscall's name, for messages and review.
	Name string
	// Nr is the syscall number on the profile's architecture.
	Nr uint32
	// Cases are tried in order; the first whose conditions all hold
	// decides.
	Cases []Case
	// Action applies when Cases is empty or none of them matches.
	Action Action
}

// Syscall names a syscall number on one architecture.
type Syscall struct {
	Name string
	Nr   uint32
}

// Profile is a seccomp allowlist for one architecture.
type Profile struct {
	// Arch is the GOARCH the syscall numbers belong to.
	Arch string
	// AuditArch is the AUDIT_ARCH_* value seccomp_data.arch must have;
	// any other value kills the process.
	AuditArch uint32
	// KillX32 kills the process for any syscall number with the x32 bit
	// (0x40000000) set. Only meaningful on amd64.
	KillX32 bool
	// DefaultAction applies to every syscall without a rule.
	DefaultAction Action
	// FutureFrom, when not zero, is the first syscall number newer than
	// anything the profile was reviewed against; FutureAction applies from
	// there on. ENOSYS there (rather than EPERM) is what libc and language
	// runtimes expect of a kernel that lacks a call, so they fall back to
	// an older one instead of failing (the clone3 and faccessat2 breakage
	// container runtimes met with EPERM).
	FutureFrom   uint32
	FutureAction Action
	// Rules are the syscalls the profile decides explicitly.
	Rules []Rule
	// Refused are syscalls that must get DefaultAction. Compile fails if
	// any rule names one of them, so an addition to the allowlist cannot
	// silently undo a reviewed refusal.
	Refused []Syscall
}

// refusal is a family of syscalls the profile leaves out of the allowlist, so
// they fail with EPERM, together with the attack that refusing them stops.
type refusal struct {
	syscalls []string
	stops    string
}

// refusals lists every syscall the profile deliberately refuses. Each
// architecture table maps the names that exist there to numbers; a name the
// architecture lacks (iopl on arm64, say) is simply absent there.
var refusals = []refusal{
	// Namespaces. clone with CLONE_NEW* flags is refused by the clone rule
	// and clone3 by ENOSYS (see cloneRule and clone3Rule).
	{
		syscalls: []string{"unshare", "setns"},
		stops: "creating namespaces, above all user namespaces, which hand an " +
			"unprivileged process full capabilities over fresh kernel objects and " +
			"so expose netfilter, mount and other privileged-only kernel code that " +
			"most recent local privilege escalations went through; and joining " +
			"other namespaces through an inherited or leaked namespace fd",
	},
	// Mount table changes.
	{
		syscalls: []string{
			"mount", "umount2", "pivot_root", "chroot", "move_mount",
			"open_tree", "open_tree_attr", "fsopen", "fsconfig", "fsmount",
			"fspick", "mount_setattr",
		},
		stops: "reshaping the filesystem view: unmounting or over-mounting the " +
			"mounts that hide host paths, remounting read-only binds read-write, " +
			"cloning mount trees, and chroot-based escapes; reading mount " +
			"information (statmount, listmount) stays allowed",
	},
	// Kernel keyrings.
	{
		syscalls: []string{"keyctl", "add_key", "request_key"},
		stops: "the kernel keyring is not namespaced, so a sandboxed process " +
			"could read, replace or fill keys that belong to the same uid " +
			"outside the sandbox (Kerberos, NFS, fscrypt keys); keyctl also has " +
			"a long record of privilege escalation bugs",
	},
	// Kernel programmability and introspection.
	{
		syscalls: []string{"bpf", "perf_event_open", "lookup_dcookie"},
		stops: "loading eBPF programs (the verifier and JIT are a favourite " +
			"privilege escalation target) and perf events, which leak kernel " +
			"addresses, give precise side channels and let a process watch " +
			"others",
	},
	// Exploitation primitives.
	{
		syscalls: []string{"userfaultfd"},
		stops: "userfaultfd lets a process stall the kernel at a page fault of " +
			"its choosing, the standard way to widen the race window of some " +
			"other kernel bug until it is reliably exploitable",
	},
	// A second syscall interface.
	{
		syscalls: []string{"io_uring_setup", "io_uring_enter", "io_uring_register"},
		stops: "io_uring performs opens, socket creation and I/O from kernel " +
			"context without passing through this filter again (so the socket " +
			"rule would not apply), and it has been among the largest sources of " +
			"kernel privilege escalations",
	},
	// Replacing or extending the kernel, and rebooting.
	{
		syscalls: []string{
			"kexec_load", "kexec_file_load", "init_module", "finit_module",
			"delete_module", "reboot",
		},
		stops: "loading kernel code, swapping in another kernel, and rebooting " +
			"or halting the machine",
	},
	// Reaching into other processes.
	{
		syscalls: []string{
			"ptrace", "process_vm_readv", "process_vm_writev", "kcmp",
			"pidfd_getfd", "process_madvise",
		},
		stops: "reading and writing the memory, registers and file descriptors " +
			"of other processes in the sandbox, including the init process that " +
			"holds the sandbox's control descriptors; ptrace can also rewrite a " +
			"tracee's syscalls after the filter has approved them",
	},
	// Machine-wide administration.
	{
		syscalls: []string{
			"acct", "swapon", "swapoff", "syslog", "vhangup", "quotactl",
			"quotactl_fd", "sethostname", "setdomainname", "nfsservctl",
		},
		stops: "machine-wide administration: process accounting to a file of the " +
			"caller's choosing, swap devices, reading or clearing the kernel log " +
			"(which leaks kernel addresses), hanging up terminals, disk quotas, " +
			"the host or domain name, and the NFS server",
	},
	// The system clock.
	{
		syscalls: []string{"settimeofday", "clock_settime", "clock_adjtime", "adjtimex"},
		stops: "setting or slewing the clock, which is shared with the host and " +
			"breaks certificate checks, timeouts and logs; adjtimex and " +
			"clock_adjtime can be read-only, but the mode lives in a struct in " +
			"memory that a filter cannot read, so they are refused whole",
	},
	// Raw hardware and x86 segment tricks.
	{
		syscalls: []string{"iopl", "ioperm", "modify_ldt"},
		stops: "direct I/O port access, and LDT changes, which only 16-bit and " +
			"Wine-style code needs and whose kernel code has had several " +
			"privilege escalations (espfix, CVE-2015-5157)",
	},
	// File handles.
	{
		syscalls: []string{"open_by_handle_at", "name_to_handle_at"},
		stops: "opening files by handle bypasses path lookup entirely, so a " +
			"guessed or leaked handle reaches any inode on the filesystem, " +
			"outside every bind mount and chroot (the \"shocker\" container " +
			"escape); name_to_handle_at is the half that makes handles",
	},
	// Obsolete interfaces.
	{
		syscalls: []string{"uselib", "ustat", "sysfs", "_sysctl"},
		stops: "legacy interfaces that nothing current calls and that only add " +
			"attack surface (uselib was itself a privilege escalation, " +
			"CVE-2004-1235)",
	},
	// Filesystem-wide monitoring.
	{
		syscalls: []string{"fanotify_init"},
		stops: "watching, and with permission events blocking, file accesses " +
			"across whole mounts and filesystems, including other processes'",
	},
	// Security module state.
	{
		syscalls: []string{"lsm_set_self_attr"},
		stops: "changing the process's LSM (AppArmor, SELinux, Smack) context; " +
			"reading it (lsm_get_self_attr, lsm_list_modules) stays allowed",
	},
	// NUMA memory placement.
	{
		syscalls: []string{
			"mbind", "set_mempolicy", "set_mempolicy_home_node", "get_mempolicy",
			"migrate_pages", "move_pages",
		},
		stops: "moving the pages of other processes between NUMA nodes and " +
			"pinning memory to nodes shared with other tenants; Docker allows " +
			"these only with CAP_SYS_NICE",
	},
	// Namespace enumeration.
	{
		syscalls: []string{"listns"},
		stops: "enumerating namespaces outside the sandbox, which is useful only " +
			"as a prelude to joining them; not yet reviewed beyond that",
	},
}

// Values of personality(2) (include/uapi/linux/personality.h).
const (
	perLinux      = 0x0000000
	perLinux32    = 0x0000008
	perUname26    = 0x0020000
	perQuery      = 0xffffffff
	addrNoRandom  = 0x0040000 // ADDR_NO_RANDOMIZE
	readImpliesEx = 0x0400000 // READ_IMPLIES_EXEC
)

// namespaceFlags are the clone flags that create new namespaces.
//
// CLONE_NEWTIME (0x80) lies inside the exit-signal byte of legacy clone, so
// no valid clone call can carry it (signals stop at 64); refusing the bit
// costs nothing and keeps the mask right if that ever changes.
const namespaceFlags = unix.CLONE_NEWNS | unix.CLONE_NEWUTS | unix.CLONE_NEWIPC |
	unix.CLONE_NEWUSER | unix.CLONE_NEWPID | unix.CLONE_NEWNET |
	unix.CLONE_NEWCGROUP | unix.CLONE_NEWTIME

// sockTypeMask is SOCK_TYPE_MASK: the kernel strips SOCK_NONBLOCK and
// SOCK_CLOEXEC (and rejects any other high bit) before looking at the type.
const sockTypeMask = 0xf

// archTable holds what differs between architectures.
type archTable struct {
	name      string
	auditArch uint32 // 0 if the package does not support the architecture
	killX32   bool
	// cloneFlagsArg is the index of clone's flags argument. It is 0 on
	// amd64 and arm64 (clone(flags, stack, ...)); s390 swaps the first two.
	cloneFlagsArg int
	// Numbers of the syscalls with conditional or special rules.
	clone, clone3, socket, socketpair, ioctl, personality, ioSetup uint32
	// allowed are allowed unconditionally.
	allowed []Syscall
	// refused maps each refused syscall name that exists on the
	// architecture to its number.
	refused map[string]uint32
}

// DefaultProfile returns airlock's profile for runtime.GOARCH. Each call
// returns a fresh copy that the caller may modify.
func DefaultProfile() *Profile {
	return native.profile()
}

func (t *archTable) profile() *Profile {
	p := &Profile{
		Arch:          t.name,
		AuditArch:     t.auditArch,
		KillX32:       t.killX32,
		DefaultAction: ActErrno(unix.EPERM),
	}
	if t.auditArch == 0 {
		return p
	}
	for _, s := range t.allowed {
		p.Rules = append(p.Rules, Rule{Name: s.Name, Nr: s.Nr, Action: ActAllow})
	}
	p.Rules = append(p.Rules,
		cloneRule(t.clone, t.cloneFlagsArg),
		clone3Rule(t.clone3),
		socketRule(t.socket),
		socketpairRule(t.socketpair),
		ioctlRule(t.ioctl),
		personalityRule(t.personality),
		ioSetupRule(t.ioSetup),
	)
	slices.SortFunc(p.Rules, func(a, b Rule) int { return int(a.Nr) - int(b.Nr) })
	for _, f := range refusals {
		for _, name := range f.syscalls {
			if nr, ok := t.refused[name]; ok {
				p.Refused = append(p.Refused, Syscall{Name: name, Nr: nr})
			}
		}
	}
	highest := p.Rules[len(p.Rules)-1].Nr
	for _, r := range p.Refused {
		highest = max(highest, r.Nr)
	}
	p.FutureFrom, p.FutureAction = highest+1, ActErrno(unix.ENOSYS)
	return p
}

// ioSetupRule refuses io_setup, the old asynchronous I/O interface's
// context setup, with ENOSYS. Its events are reserved against one count
// for the whole host (fs.aio-max-nr, 65,536 by default) that no cgroup or
// user namespace divides: one sandbox reserved all of it, and the host's
// own io_setup then failed with EAGAIN. ENOSYS is a kernel without AIO,
// which libaio's users (databases among them) answer by falling back to
// threads. The other io_* calls stay allowed: without a context they can
// do nothing.
func ioSetupRule(nr uint32) Rule {
	return Rule{Name: "io_setup", Nr: nr, Action: ActErrno(unix.ENOSYS)}
}

// cloneRule allows clone unless it would create a namespace. Threads (the Go
// runtime, pthreads) and fork/vfork-style children (os/exec passes
// CLONE_VFORK|CLONE_VM|CLONE_PIDFD) never set those bits.
func cloneRule(nr uint32, flagsArg int) Rule {
	return Rule{
		Name: "clone",
		Nr:   nr,
		Cases: []Case{{
			When:   []Cond{{Arg: flagsArg, Mask: namespaceFlags, Op: OpIn, Values: []uint32{0}}},
			Action: ActAllow,
		}},
		// Namespaces: same reason as unshare and setns.
		Action: ActErrno(unix.EPERM),
	}
}

// clone3Rule refuses clone3 with ENOSYS. Its flags live in a struct in
// memory, which a seccomp filter cannot read, so the namespace check of
// cloneRule cannot be applied. ENOSYS (rather than EPERM) is what glibc and
// the Go runtime take to mean "old kernel" and fall back to clone, whose
// flags the filter can check.
func clone3Rule(nr uint32) Rule {
	return Rule{Name: "clone3", Nr: nr, Action: ActErrno(unix.ENOSYS)}
}

// socketRule allows the socket families ordinary programs need and refuses
// the rest with the errno a kernel without that feature would give, so that
// programs take their usual fallback path:
//
//   - AF_UNIX: any type.
//   - AF_NETLINK: only NETLINK_ROUTE (interface and address listing, used by
//     getaddrinfo and Go's net.Interfaces). Other netlink protocols (audit,
//     netfilter, xfrm, generic netlink, sock_diag) fail with
//     EPROTONOSUPPORT: they reach large, privileged kernel subsystems.
//   - AF_INET, AF_INET6: only SOCK_STREAM, SOCK_DGRAM and SOCK_SEQPACKET.
//     SOCK_RAW and friends fail with EPERM, as they would without
//     CAP_NET_RAW: raw sockets let a process forge packets and sniff
//     traffic. Protocols other than 0, TCP, UDP, ICMP and ICMPv6 (MPTCP,
//     SCTP, DCCP, ...) fail with EPROTONOSUPPORT, the answer of a kernel
//     built without them, which Go's net package and others treat as "use
//     TCP": those stacks are loaded on demand and see little use.
//   - Any other family (AF_PACKET, AF_VSOCK, AF_BLUETOOTH, AF_ALG, AF_KEY,
//     ...) fails with EAFNOSUPPORT, as if it were not compiled in: packet
//     sockets sniff and inject frames, and the rarer families are where
//     module autoloading has exposed the most exploitable kernel code.
//
// The type is compared after masking with SOCK_TYPE_MASK (0xf), exactly as
// the kernel does, so SOCK_NONBLOCK and SOCK_CLOEXEC cannot be used to dodge
// the check.
func socketRule(nr uint32) Rule {
	domain := func(v ...uint32) Cond { return Cond{Arg: 0, Op: OpIn, Values: v} }
	inet := domain(unix.AF_INET, unix.AF_INET6)
	return Rule{
		Name: "socket",
		Nr:   nr,
		Cases: []Case{
			{When: []Cond{domain(unix.AF_UNIX)}, Action: ActAllow},
			{
				When:   []Cond{domain(unix.AF_NETLINK), {Arg: 2, Op: OpIn, Values: []uint32{unix.NETLINK_ROUTE}}},
				Action: ActAllow,
			},
			{When: []Cond{domain(unix.AF_NETLINK)}, Action: ActErrno(unix.EPROTONOSUPPORT)},
			{
				// Only the everyday protocols: any other protocol
				// number (SCTP, DCCP, L2TP, UDP-Lite, MPTCP...) would
				// make the kernel autoload a rarely used module on
				// demand, exposing its bugs to the sandbox.
				When: []Cond{inet, {Arg: 2, Op: OpNotIn, Values: []uint32{
					0, unix.IPPROTO_TCP, unix.IPPROTO_UDP, unix.IPPROTO_ICMP, unix.IPPROTO_ICMPV6,
				}}},
				Action: ActErrno(unix.EPROTONOSUPPORT),
			},
			{
				When: []Cond{inet, {
					Arg: 1, Mask: sockTypeMask, Op: OpIn,
					Values: []uint32{unix.SOCK_STREAM, unix.SOCK_DGRAM, unix.SOCK_SEQPACKET},
				}},
				Action: ActAllow,
			},
			{When: []Cond{inet}, Action: ActErrno(unix.EPERM)},
		},
		Action: ActErrno(unix.EAFNOSUPPORT),
	}
}

// socketpairRule allows only AF_UNIX pairs, the only family that supports
// socketpair at all; other families fail with EAFNOSUPPORT as in socketRule.
func socketpairRule(nr uint32) Rule {
	return Rule{
		Name: "socketpair",
		Nr:   nr,
		Cases: []Case{{
			When:   []Cond{{Arg: 0, Op: OpIn, Values: []uint32{unix.AF_UNIX}}},
			Action: ActAllow,
		}},
		Action: ActErrno(unix.EAFNOSUPPORT),
	}
}

// ioctlRule allows every ioctl except two that inject input into a
// terminal:
//
//   - TIOCSTI pushes bytes into a terminal's input queue, so a sandboxed
//     command sharing the user's terminal could type commands into the
//     shell that started it once it exits.
//   - TIOCLINUX has subcommands that paste the console selection as input
//     (the same attack on virtual consoles) and read console memory.
//
// The request is compared on its low 32 bits only, which is what the kernel
// uses (the parameter is unsigned int): a filter comparing all 64 bits would
// let TIOCSTI|1<<32 through to a kernel that then runs TIOCSTI.
func ioctlRule(nr uint32) Rule {
	return Rule{
		Name: "ioctl",
		Nr:   nr,
		Cases: []Case{{
			When:   []Cond{{Arg: 1, Op: OpIn, Values: []uint32{unix.TIOCSTI, unix.TIOCLINUX}}},
			Action: ActErrno(unix.EPERM),
		}},
		Action: ActAllow,
	}
}

// personalityRule allows the personalities Docker allows: PER_LINUX,
// PER_LINUX32 (for 32-bit tools such as linux32/setarch), UNAME26 and their
// combination, and 0xffffffff, which only queries. Everything else fails
// with EPERM; in particular READ_IMPLIES_EXEC (makes every readable mapping
// executable, undoing W^X), ADDR_NO_RANDOMIZE (turns off ASLR for what the
// process executes next) and MMAP_PAGE_ZERO (maps page zero, turning kernel
// NULL dereferences into exploitable bugs).
func personalityRule(nr uint32) Rule {
	return Rule{
		Name: "personality",
		Nr:   nr,
		Cases: []Case{{
			When: []Cond{{Arg: 0, Op: OpIn, Values: []uint32{
				perLinux, perLinux32, perUname26, perUname26 | perLinux32, perQuery,
			}}},
			Action: ActAllow,
		}},
		Action: ActErrno(unix.EPERM),
	}
}
