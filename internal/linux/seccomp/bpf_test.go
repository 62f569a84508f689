//go:build linux

package seccomp

import (
	"strings"
	"sync"
	"testing"

	"golang.org/x/sys/unix"
)

// Values for test cases that x/sys/unix does not name on every architecture.
const (
	auditArchI386 = 0x40000003 // AUDIT_ARCH_I386
	auditArchArm  = 0x40000028 // AUDIT_ARCH_ARM
	fionread      = 0x541b     // FIONREAD
	tcgets        = 0x5401     // TCGETS
	netlinkAudit  = 9          // NETLINK_AUDIT
	mmapPageZero  = 0x0100000  // MMAP_PAGE_ZERO
)

var (
	ePERM            = ActErrno(unix.EPERM)
	eNOSYS           = ActErrno(unix.ENOSYS)
	eAFNOSUPPORT     = ActErrno(unix.EAFNOSUPPORT)
	ePROTONOSUPPORT  = ActErrno(unix.EPROTONOSUPPORT)
	compiledDefault  = sync.OnceValues(func() ([]unix.SockFilter, error) { return DefaultProfile().Compile() })
	defaultForReview = DefaultProfile()
)

func defaultProgram(t testing.TB) (*Profile, []unix.SockFilter) {
	t.Helper()
	prog, err := compiledDefault()
	if err != nil {
		t.Fatalf("DefaultProfile().Compile(): %v", err)
	}
	return defaultForReview, prog
}

// call builds seccomp_data for a native syscall.
func call(p *Profile, nr uint32, args ...uint64) seccompData {
	d := seccompData{nr: nr, arch: p.AuditArch}
	copy(d.args[:], args)
	return d
}

func TestDefaultProfileDecisions(t *testing.T) {
	p, prog := defaultProgram(t)
	x32Read := ePERM // arm64 has no x32: just an unknown number
	if p.KillX32 {
		x32Read = ActKillProcess
	}
	threadFlags := uint64(unix.CLONE_VM | unix.CLONE_FS | unix.CLONE_FILES | unix.CLONE_SIGHAND |
		unix.CLONE_SYSVSEM | unix.CLONE_THREAD | unix.CLONE_SETTLS |
		unix.CLONE_PARENT_SETTID | unix.CLONE_CHILD_CLEARTID)
	execFlags := uint64(unix.CLONE_VFORK | unix.CLONE_VM | unix.CLONE_PIDFD | uint64(unix.SIGCHLD))

	tests := []struct {
		name string
		d    seccompData
		want Action
	}{
		{"i386 arch", seccompData{nr: unix.SYS_READ, arch: auditArchI386}, ActKillProcess},
		{"arm arch", seccompData{nr: unix.SYS_READ, arch: auditArchArm}, ActKillProcess},
		{"zero arch", seccompData{nr: unix.SYS_READ}, ActKillProcess},
		{"x32 read", call(p, x32SyscallBit|unix.SYS_READ), x32Read},
		{"x32 bit alone", call(p, x32SyscallBit), x32Read},
		{"syscall -1", call(p, nrSkip), eNOSYS},
		{"read", call(p, unix.SYS_READ), ActAllow},
		{"write", call(p, unix.SYS_WRITE), ActAllow},
		{"exit_group", call(p, unix.SYS_EXIT_GROUP), ActAllow},
		{"futex", call(p, unix.SYS_FUTEX), ActAllow},
		{"mount", call(p, unix.SYS_MOUNT), ePERM},
		{"umount2", call(p, unix.SYS_UMOUNT2), ePERM},
		{"unshare newuser", call(p, unix.SYS_UNSHARE, unix.CLONE_NEWUSER), ePERM},
		{"unshare nothing", call(p, unix.SYS_UNSHARE, 0), ePERM},
		{"setns", call(p, unix.SYS_SETNS), ePERM},
		{"keyctl", call(p, unix.SYS_KEYCTL), ePERM},
		{"add_key", call(p, unix.SYS_ADD_KEY), ePERM},
		{"bpf", call(p, unix.SYS_BPF), ePERM},
		{"ptrace", call(p, unix.SYS_PTRACE), ePERM},
		{"process_vm_writev", call(p, unix.SYS_PROCESS_VM_WRITEV), ePERM},
		{"perf_event_open", call(p, unix.SYS_PERF_EVENT_OPEN), ePERM},
		{"userfaultfd", call(p, unix.SYS_USERFAULTFD), ePERM},
		{"io_uring_setup", call(p, unix.SYS_IO_URING_SETUP), ePERM},
		{"open_by_handle_at", call(p, unix.SYS_OPEN_BY_HANDLE_AT), ePERM},
		{"fsopen", call(p, unix.SYS_FSOPEN), ePERM},
		{"kexec_load", call(p, unix.SYS_KEXEC_LOAD), ePERM},
		{"finit_module", call(p, unix.SYS_FINIT_MODULE), ePERM},
		{"clock_settime", call(p, unix.SYS_CLOCK_SETTIME), ePERM},
		{"clone3", call(p, unix.SYS_CLONE3), eNOSYS},
		{"io_setup", call(p, unix.SYS_IO_SETUP), eNOSYS},
		{"clone newuser", call(p, unix.SYS_CLONE, unix.CLONE_NEWUSER|uint64(unix.SIGCHLD)), ePERM},
		{"clone newnet with high garbage", call(p, unix.SYS_CLONE, 0xdead<<32|unix.CLONE_NEWNET), ePERM},
		{"clone newtime bit", call(p, unix.SYS_CLONE, unix.CLONE_NEWTIME), ePERM},
		{"clone thread", call(p, unix.SYS_CLONE, threadFlags), ActAllow},
		{"clone os/exec vfork", call(p, unix.SYS_CLONE, execFlags), ActAllow},
		{"clone fork", call(p, unix.SYS_CLONE, uint64(unix.SIGCHLD)), ActAllow},
		{"clone high word only", call(p, unix.SYS_CLONE, 0xffffffff<<32|uint64(unix.SIGCHLD)), ActAllow},
		{"socket AF_PACKET", call(p, unix.SYS_SOCKET, unix.AF_PACKET, unix.SOCK_RAW, 0x300), eAFNOSUPPORT},
		{"socket AF_PACKET high word", call(p, unix.SYS_SOCKET, 1<<32|unix.AF_PACKET, unix.SOCK_RAW), eAFNOSUPPORT},
		{"socket AF_VSOCK", call(p, unix.SYS_SOCKET, unix.AF_VSOCK, unix.SOCK_STREAM), eAFNOSUPPORT},
		{"socket AF_UNSPEC", call(p, unix.SYS_SOCKET, unix.AF_UNSPEC, unix.SOCK_STREAM), eAFNOSUPPORT},
		{"socket netlink audit", call(p, unix.SYS_SOCKET, unix.AF_NETLINK, unix.SOCK_RAW, netlinkAudit), ePROTONOSUPPORT},
		{"socket netlink route", call(p, unix.SYS_SOCKET, unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_ROUTE), ActAllow},
		{"socket inet raw", call(p, unix.SYS_SOCKET, unix.AF_INET, unix.SOCK_RAW, unix.IPPROTO_ICMP), ePERM},
		{"socket inet raw nonblock", call(p, unix.SYS_SOCKET, unix.AF_INET, unix.SOCK_RAW|unix.SOCK_NONBLOCK, unix.IPPROTO_TCP), ePERM},
		{"socket inet SOCK_PACKET", call(p, unix.SYS_SOCKET, unix.AF_INET, unix.SOCK_PACKET, 0), ePERM},
		{"socket inet mptcp", call(p, unix.SYS_SOCKET, unix.AF_INET, unix.SOCK_STREAM, unix.IPPROTO_MPTCP), ePROTONOSUPPORT},
		{"socket inet6 mptcp", call(p, unix.SYS_SOCKET, unix.AF_INET6, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, unix.IPPROTO_MPTCP), ePROTONOSUPPORT},
		{"socket inet stream", call(p, unix.SYS_SOCKET, unix.AF_INET, unix.SOCK_STREAM, 0), ActAllow},
		{"socket inet stream cloexec nonblock", call(p, unix.SYS_SOCKET, unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, unix.IPPROTO_TCP), ActAllow},
		{"socket inet dgram", call(p, unix.SYS_SOCKET, unix.AF_INET, unix.SOCK_DGRAM, unix.IPPROTO_UDP), ActAllow},
		{"socket inet ping", call(p, unix.SYS_SOCKET, unix.AF_INET, unix.SOCK_DGRAM, unix.IPPROTO_ICMP), ActAllow},
		{"socket inet6 stream", call(p, unix.SYS_SOCKET, unix.AF_INET6, unix.SOCK_STREAM, 0), ActAllow},
		{"socket inet6 raw", call(p, unix.SYS_SOCKET, unix.AF_INET6, unix.SOCK_RAW, unix.IPPROTO_ICMPV6), ePERM},
		{"socket inet high word", call(p, unix.SYS_SOCKET, 7<<32|unix.AF_INET, unix.SOCK_STREAM, 0), ActAllow},
		{"socket unix stream", call(p, unix.SYS_SOCKET, unix.AF_UNIX, unix.SOCK_STREAM, 0), ActAllow},
		{"socket unix dgram", call(p, unix.SYS_SOCKET, unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0), ActAllow},
		{"socketpair unix", call(p, unix.SYS_SOCKETPAIR, unix.AF_UNIX, unix.SOCK_STREAM, 0), ActAllow},
		{"socketpair inet", call(p, unix.SYS_SOCKETPAIR, unix.AF_INET, unix.SOCK_STREAM, 0), eAFNOSUPPORT},
		{"ioctl TIOCSTI", call(p, unix.SYS_IOCTL, 0, unix.TIOCSTI), ePERM},
		{"ioctl TIOCSTI high bit", call(p, unix.SYS_IOCTL, 0, 1<<32|unix.TIOCSTI), ePERM},
		{"ioctl TIOCSTI high word", call(p, unix.SYS_IOCTL, 0, 0xffffffff<<32|unix.TIOCSTI), ePERM},
		{"ioctl TIOCLINUX", call(p, unix.SYS_IOCTL, 0, unix.TIOCLINUX), ePERM},
		{"ioctl FIONREAD", call(p, unix.SYS_IOCTL, 3, fionread), ActAllow},
		{"ioctl TCGETS", call(p, unix.SYS_IOCTL, 0, tcgets), ActAllow},
		{"ioctl TIOCSTI as fd", call(p, unix.SYS_IOCTL, unix.TIOCSTI, tcgets), ActAllow},
		{"personality linux", call(p, unix.SYS_PERSONALITY, perLinux), ActAllow},
		{"personality linux32", call(p, unix.SYS_PERSONALITY, perLinux32), ActAllow},
		{"personality uname26", call(p, unix.SYS_PERSONALITY, perUname26), ActAllow},
		{"personality uname26|linux32", call(p, unix.SYS_PERSONALITY, perUname26|perLinux32), ActAllow},
		{"personality query", call(p, unix.SYS_PERSONALITY, perQuery), ActAllow},
		{"personality linux high word", call(p, unix.SYS_PERSONALITY, 1<<32), ActAllow},
		{"personality ADDR_NO_RANDOMIZE", call(p, unix.SYS_PERSONALITY, addrNoRandom), ePERM},
		{"personality READ_IMPLIES_EXEC", call(p, unix.SYS_PERSONALITY, readImpliesEx), ePERM},
		{"personality MMAP_PAGE_ZERO", call(p, unix.SYS_PERSONALITY, mmapPageZero), ePERM},
		// Newer than the reviewed table: ENOSYS, so callers fall back.
		{"unknown 999", call(p, 999), eNOSYS},
		{"unknown 0x3fffffff", call(p, 0x3fffffff), eNOSYS},
		{"rseq_slice_yield (unreviewed)", call(p, unix.SYS_RSEQ_SLICE_YIELD), eNOSYS},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := check(t, p, prog, tt.d); got != tt.want {
				t.Errorf("got %v, want %v", got, tt.want)
			}
		})
	}
}

// TestDefaultProfileSweep compares program and profile for every syscall
// number the kernels know and for the edges of the number space, with
// assorted argument patterns.
func TestDefaultProfileSweep(t *testing.T) {
	p, prog := defaultProgram(t)
	argSets := [][]uint64{
		nil,
		{unix.AF_INET, unix.SOCK_STREAM, 0},
		{unix.AF_NETLINK, unix.SOCK_RAW, 4},
		{unix.CLONE_NEWNS, unix.TIOCSTI, unix.IPPROTO_MPTCP},
		{^uint64(0), ^uint64(0), ^uint64(0), ^uint64(0), ^uint64(0), ^uint64(0)},
	}
	var nrs []uint32
	for nr := uint32(0); nr < 1100; nr++ {
		nrs = append(nrs, nr)
	}
	nrs = append(nrs, 0x3fffffff, 0x40000000, 0x40000001, 0x400001ff, 0x7fffffff, 0x80000000, 0xfffffffe, 0xffffffff)
	for _, nr := range nrs {
		for _, args := range argSets {
			check(t, p, prog, call(p, nr, args...))
		}
	}
}

func TestDefaultProgramShape(t *testing.T) {
	_, prog := defaultProgram(t)
	t.Logf("default program: %d instructions", len(prog))
	if len(prog) >= unix.BPF_MAXINSNS {
		t.Fatalf("program has %d instructions, want < %d", len(prog), unix.BPF_MAXINSNS)
	}
	checkJumpTargets(t, prog)
	if err := verify(prog); err != nil {
		t.Errorf("verify: %v", err)
	}
}

// checkJumpTargets independently asserts that every jump lands inside prog
// and that the program ends in a return.
func checkJumpTargets(t *testing.T, prog []unix.SockFilter) {
	t.Helper()
	for pc, ins := range prog {
		if ins.Code&0x07 != unix.BPF_JMP {
			continue
		}
		var targets []uint64
		if ins.Code&0xf0 == unix.BPF_JA {
			targets = []uint64{uint64(pc) + 1 + uint64(ins.K)}
		} else {
			targets = []uint64{uint64(pc) + 1 + uint64(ins.Jt), uint64(pc) + 1 + uint64(ins.Jf)}
		}
		for _, tgt := range targets {
			if tgt >= uint64(len(prog)) {
				t.Errorf("instruction %d (%+v) jumps to %d, past the end (%d)", pc, ins, tgt, len(prog))
			}
		}
	}
	if last := prog[len(prog)-1]; last.Code != unix.BPF_RET|unix.BPF_K {
		t.Errorf("last instruction is %+v, want a return", last)
	}
}

// farProfile has so many alternating rules that the binary search's upper
// jumps, and the value lists of its conditional rules, span far more than
// 255 instructions.
func farProfile() *Profile {
	p := &Profile{Arch: "test", AuditArch: 0xc000003e, DefaultAction: ActErrno(unix.EPERM), KillX32: true}
	for nr := uint32(0); nr < 1200; nr += 2 {
		act := ActAllow
		if nr%6 == 0 {
			act = ActErrno(unix.EIO)
		}
		p.Rules = append(p.Rules, Rule{Name: "r", Nr: nr, Action: act})
	}
	var many []uint32
	for v := uint32(0); v < 400; v++ {
		many = append(many, v*3)
	}
	p.Rules = append(p.Rules,
		Rule{Name: "in", Nr: 1301, Action: ActErrno(unix.EINVAL), Cases: []Case{
			{When: []Cond{{Arg: 2, Op: OpIn, Values: many}}, Action: ActAllow},
		}},
		Rule{Name: "notin", Nr: 1303, Action: ActErrno(unix.EINVAL), Cases: []Case{
			{When: []Cond{{Arg: 3, Op: OpNotIn, Values: many}, {Arg: 3, Mask: 1, Op: OpIn, Values: []uint32{1}}}, Action: ActAllow},
		}},
	)
	return p
}

func TestLongJumps(t *testing.T) {
	p := farProfile()
	prog, err := p.Compile()
	if err != nil {
		t.Fatalf("Compile: %v", err)
	}
	checkJumpTargets(t, prog)
	trampolines := 0
	for _, ins := range prog {
		if ins.Code == opJa {
			trampolines++
		}
	}
	t.Logf("far program: %d instructions, %d trampolines", len(prog), trampolines)
	if trampolines == 0 {
		t.Fatalf("far program has no JA trampolines; the test no longer exercises long jumps")
	}
	for nr := uint32(0); nr < 1400; nr++ {
		check(t, p, prog, call(p, nr))
	}
	for v := uint64(0); v < 1300; v++ {
		check(t, p, prog, call(p, 1301, 0, 0, v))
		check(t, p, prog, call(p, 1303, 0, 0, 0, v))
	}
}

// TestAssemblerTrampolines checks each form of a conditional jump in
// isolation: both targets near, far true target, far false target, and both
// far. "pad" is 300 filler instructions.
func TestAssemblerTrampolines(t *testing.T) {
	for _, tc := range []struct {
		name   string
		layout []string
		jas    int
	}{
		{"near", []string{"yes", "no"}, 0},
		{"far true", []string{"no", "pad", "yes"}, 1},
		{"far false", []string{"yes", "pad", "no"}, 1},
		{"far both", []string{"pad", "yes", "no"}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const retYes, retNo = 100, 200
			a := &assembler{}
			yes, no := a.newLabel(), a.newLabel()
			a.stmt(opLdAbsW, offNr)
			a.jump(opJeqK, 7, yes, no)
			for _, part := range tc.layout {
				switch part {
				case "pad":
					for range 300 {
						a.stmt(opAndK, ^uint32(0))
					}
				case "yes":
					a.bind(yes)
					a.ret(retYes)
				case "no":
					a.bind(no)
					a.ret(retNo)
				}
			}
			prog, err := a.assemble()
			if err != nil {
				t.Fatalf("assemble: %v", err)
			}
			checkJumpTargets(t, prog)
			if err := verify(prog); err != nil {
				t.Fatalf("verify: %v", err)
			}
			jas := 0
			for _, ins := range prog {
				if ins.Code == opJa {
					jas++
				}
			}
			if jas != tc.jas {
				t.Errorf("got %d trampolines, want %d", jas, tc.jas)
			}
			for _, tt := range []struct{ nr, want uint32 }{{7, retYes}, {8, retNo}} {
				got, err := emulate(prog, seccompData{nr: tt.nr})
				if err != nil {
					t.Fatalf("emulate nr %d: %v", tt.nr, err)
				}
				if got != tt.want {
					t.Errorf("nr %d: got %d, want %d", tt.nr, got, tt.want)
				}
			}
		})
	}
}

func TestAssemblerRejects(t *testing.T) {
	t.Run("backward", func(t *testing.T) {
		a := &assembler{}
		l := a.newLabel()
		a.bind(l)
		a.jump(opJeqK, 1, l, next)
		a.ret(ActAllow)
		if _, err := a.assemble(); err == nil || !strings.Contains(err.Error(), "backward") {
			t.Errorf("assemble error = %v, want a backward jump error", err)
		}
	})
	t.Run("unbound", func(t *testing.T) {
		a := &assembler{}
		a.jump(opJeqK, 1, a.newLabel(), next)
		a.ret(ActAllow)
		if _, err := a.assemble(); err == nil || !strings.Contains(err.Error(), "unbound") {
			t.Errorf("assemble error = %v, want an unbound label error", err)
		}
	})
	t.Run("bound twice", func(t *testing.T) {
		a := &assembler{}
		l := a.newLabel()
		a.bind(l)
		a.ret(ActAllow)
		a.bind(l)
		a.ret(ActAllow)
		if _, err := a.assemble(); err == nil || !strings.Contains(err.Error(), "twice") {
			t.Errorf("assemble error = %v, want a label bound twice error", err)
		}
	})
}

func TestVerifyRejects(t *testing.T) {
	ret := unix.SockFilter{Code: opRetK}
	tests := []struct {
		name string
		prog []unix.SockFilter
	}{
		{"empty", nil},
		{"no final return", []unix.SockFilter{ret, {Code: opLdAbsW}}},
		{"unaligned load", []unix.SockFilter{{Code: opLdAbsW, K: 2}, ret}},
		{"load past seccomp_data", []unix.SockFilter{{Code: opLdAbsW, K: 64}, ret}},
		{"jump past end", []unix.SockFilter{{Code: opJeqK, Jt: 1}, ret}},
		{"ja past end", []unix.SockFilter{{Code: opJa, K: 1}, ret}},
		{"unknown opcode", []unix.SockFilter{{Code: unix.BPF_LDX | unix.BPF_W | unix.BPF_MSH}, ret}},
		{"too long", make([]unix.SockFilter, unix.BPF_MAXINSNS+1)},
	}
	for _, tt := range tests {
		if err := verify(tt.prog); err == nil {
			t.Errorf("%s: verify accepted the program", tt.name)
		}
	}
}

func TestCompileRejects(t *testing.T) {
	base := func() *Profile {
		return &Profile{Arch: "test", AuditArch: 0xc000003e, DefaultAction: ActErrno(unix.EPERM),
			Rules:   []Rule{{Name: "read", Nr: 0, Action: ActAllow}},
			Refused: []Syscall{{Name: "mount", Nr: 165}}}
	}
	tests := []struct {
		name   string
		modify func(p *Profile)
		want   string
	}{
		{"no arch", func(p *Profile) { p.AuditArch = 0 }, "no profile for architecture"},
		{"errno 0 default", func(p *Profile) { p.DefaultAction = ActErrno(0) }, "invalid default action"},
		{"duplicate", func(p *Profile) { p.Rules = append(p.Rules, Rule{Name: "read2", Nr: 0, Action: ActAllow}) }, "both have number 0"},
		{"refused", func(p *Profile) { p.Rules = append(p.Rules, Rule{Name: "mnt", Nr: 165, Action: ActAllow}) }, "which the profile refuses as mount"},
		{"x32 number", func(p *Profile) {
			p.KillX32 = true
			p.Rules = append(p.Rules, Rule{Name: "x", Nr: x32SyscallBit | 1, Action: ActAllow})
		}, "x32 check"},
		{"unnamed", func(p *Profile) { p.Rules[0].Name = "" }, "has no name"},
		{"bad action", func(p *Profile) { p.Rules[0].Action = Action(unix.SECCOMP_RET_TRACE) }, "invalid action"},
		{"empty case", func(p *Profile) { p.Rules[0].Cases = []Case{{Action: ActAllow}} }, "has no conditions"},
		{"bad arg", func(p *Profile) {
			p.Rules[0].Cases = []Case{{When: []Cond{{Arg: 6, Op: OpIn, Values: []uint32{1}}}, Action: ActAllow}}
		}, "out of range"},
		{"bad op", func(p *Profile) {
			p.Rules[0].Cases = []Case{{When: []Cond{{Arg: 0, Values: []uint32{1}}}, Action: ActAllow}}
		}, "invalid operator"},
		{"no values", func(p *Profile) {
			p.Rules[0].Cases = []Case{{When: []Cond{{Arg: 0, Op: OpIn}}, Action: ActAllow}}
		}, "no values"},
		{"value outside mask", func(p *Profile) {
			p.Rules[0].Cases = []Case{{When: []Cond{{Arg: 0, Mask: 0xf, Op: OpIn, Values: []uint32{0x10}}}, Action: ActAllow}}
		}, "can never match"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := base()
			tt.modify(p)
			_, err := p.Compile()
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Compile error = %v, want one containing %q", err, tt.want)
			}
		})
	}
	if _, err := base().Compile(); err != nil {
		t.Errorf("base profile: Compile: %v", err)
	}
}

func TestActionString(t *testing.T) {
	tests := []struct {
		a    Action
		want string
	}{
		{ActAllow, "allow"},
		{ActKillProcess, "kill_process"},
		{ActErrno(unix.EPERM), "errno(EPERM)"},
		{ActErrno(unix.ENOSYS), "errno(ENOSYS)"},
		{Action(unix.SECCOMP_RET_TRAP), "action(0x30000)"},
	}
	for _, tt := range tests {
		if got := tt.a.String(); got != tt.want {
			t.Errorf("Action(%#x).String() = %q, want %q", uint32(tt.a), got, tt.want)
		}
	}
}

var farCompiled = sync.OnceValues(func() ([]unix.SockFilter, error) { return farProfile().Compile() })

// FuzzProgram feeds arbitrary seccomp_data through the default program and
// the long-jump test program: each run must end in a return (never fall off
// the end or load outside seccomp_data), agree with the x/net/bpf VM, and
// match the profile's own answer.
func FuzzProgram(f *testing.F) {
	p, prog := defaultProgram(f)
	far := farProfile()
	farProg, err := farCompiled()
	if err != nil {
		f.Fatalf("far profile: %v", err)
	}
	f.Add(uint32(unix.SYS_READ), p.AuditArch, uint64(0), uint64(0), uint64(0), uint64(0), uint64(0), uint64(0))
	f.Add(uint32(unix.SYS_SOCKET), p.AuditArch, uint64(unix.AF_INET), uint64(unix.SOCK_RAW), uint64(0), uint64(0), uint64(0), uint64(0))
	f.Add(uint32(unix.SYS_CLONE), p.AuditArch, uint64(unix.CLONE_NEWUSER), uint64(0), uint64(0), uint64(0), uint64(0), uint64(0))
	f.Add(uint32(unix.SYS_IOCTL), p.AuditArch, uint64(0), uint64(1<<32|unix.TIOCSTI), uint64(0), uint64(0), uint64(0), uint64(0))
	f.Add(uint32(x32SyscallBit|unix.SYS_READ), p.AuditArch, uint64(0), uint64(0), uint64(0), uint64(0), uint64(0), uint64(0))
	f.Add(uint32(unix.SYS_READ), uint32(auditArchI386), uint64(0), uint64(0), uint64(0), uint64(0), uint64(0), uint64(0))
	f.Add(uint32(1301), uint32(0xc000003e), uint64(0), uint64(0), uint64(9), uint64(0), uint64(0), uint64(0))

	valid := map[Action]bool{ActAllow: true, ActKillProcess: true, ePERM: true, eNOSYS: true, eAFNOSUPPORT: true, ePROTONOSUPPORT: true}
	f.Fuzz(func(t *testing.T, nr, arch uint32, a0, a1, a2, a3, a4, a5 uint64) {
		args := []uint64{a0, a1, a2, a3, a4, a5}
		// Half the inputs get the native arch, or the fuzzer would
		// spend nearly all its time on the arch check.
		for _, native := range []bool{false, true} {
			d := seccompData{nr: nr, arch: arch}
			if native {
				d.arch = p.AuditArch
			}
			copy(d.args[:], args)
			if got := check(t, p, prog, d); !valid[got] {
				t.Fatalf("%+v: default program returned %v, not one of the profile's actions", d, got)
			}
			if native {
				d.arch = far.AuditArch
			}
			check(t, far, farProg, d)
		}
	})
}
