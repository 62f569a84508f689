//go:build linux

package seccomp

import (
	"runtime"
	"testing"
)

// runtimeNeeds are the syscalls that the Go runtime, os/exec,
// syscall.ForkExec and the net package make in a running program, plus what
// any dynamically linked program needs to start. Losing one would break the
// init process or everything it runs.
var runtimeNeeds = []string{
	"read", "write", "openat", "close", "fstat", "newfstatat", "lseek", "pread64", "fcntl", "dup3",
	"mmap", "munmap", "mprotect", "madvise", "mincore", "brk",
	"futex", "sched_yield", "sched_getaffinity", "nanosleep", "gettid", "getpid", "getppid", "tgkill", "kill",
	"rt_sigaction", "rt_sigprocmask", "rt_sigreturn", "sigaltstack", "setitimer",
	"timer_create", "timer_settime", "timer_delete", "clock_gettime",
	"epoll_create1", "epoll_ctl", "epoll_pwait", "epoll_pwait2", "eventfd2", "pipe2",
	"execve", "execveat", "exit", "exit_group", "wait4", "waitid",
	"pidfd_open", "pidfd_send_signal", "prlimit64", "setsid", "setpgid", "prctl", "capget",
	"set_robust_list", "set_tid_address", "rseq", "getrandom", "uname",
	"connect", "bind", "listen", "accept4", "getsockopt", "setsockopt", "getsockname", "getpeername",
	"recvmsg", "sendmsg", "recvfrom", "sendto", "shutdown", "faccessat", "faccessat2", "readlinkat",
	"getdents64", "statx", "getcwd", "chdir", "seccomp",
}

func TestRuntimeNeedsAllowed(t *testing.T) {
	p, prog := defaultProgram(t)
	names := map[string]Rule{}
	for _, r := range p.Rules {
		names[r.Name] = r
	}
	needs := runtimeNeeds
	if runtime.GOARCH == "amd64" {
		// The Go runtime and glibc set the thread pointer with it.
		needs = append(needs, "arch_prctl")
	}
	for _, name := range needs {
		r, ok := names[name]
		if !ok {
			t.Errorf("%s: no rule, want it allowed", name)
			continue
		}
		if got := check(t, p, prog, call(p, r.Nr)); got != ActAllow {
			t.Errorf("%s: got %v, want allow", name, got)
		}
	}
}

func TestEveryRuleAndRefusal(t *testing.T) {
	p, prog := defaultProgram(t)
	for _, r := range p.Rules {
		if len(r.Cases) > 0 {
			continue
		}
		if got := check(t, p, prog, call(p, r.Nr)); got != r.Action {
			t.Errorf("%s (%d): got %v, want %v", r.Name, r.Nr, got, r.Action)
		}
	}
	for _, s := range p.Refused {
		if got := check(t, p, prog, call(p, s.Nr)); got != ePERM {
			t.Errorf("refused %s (%d): got %v, want errno(EPERM)", s.Name, s.Nr, got)
		}
	}
}

func TestRefusalData(t *testing.T) {
	seen := map[string]bool{}
	for i, f := range refusals {
		if len(f.syscalls) == 0 || f.stops == "" {
			t.Errorf("refusal family %d: needs syscalls and the attack it stops", i)
		}
		for _, name := range f.syscalls {
			if seen[name] {
				t.Errorf("%s is listed in two refusal families", name)
			}
			seen[name] = true
		}
	}
	p := DefaultProfile()
	for _, r := range p.Rules {
		if seen[r.Name] {
			t.Errorf("%s has a rule but is also in a refusal family", r.Name)
		}
	}
	// Every refused name must resolve on amd64, the reference
	// architecture; arm64 lacks a few x86-only and obsolete calls.
	absent := map[string]map[string]bool{
		"amd64": {},
		"arm64": {"iopl": true, "ioperm": true, "modify_ldt": true, "uselib": true, "ustat": true, "sysfs": true, "_sysctl": true},
	}[runtime.GOARCH]
	if absent == nil {
		t.Skipf("no expectations for %s", runtime.GOARCH)
	}
	resolved := map[string]bool{}
	for _, s := range p.Refused {
		resolved[s.Name] = true
	}
	for name := range seen {
		if resolved[name] == absent[name] {
			t.Errorf("%s: resolved=%v on %s, want %v", name, resolved[name], runtime.GOARCH, !absent[name])
		}
	}
	for name := range native.refused {
		if !seen[name] {
			t.Errorf("%s is numbered in the %s table but is in no refusal family", name, runtime.GOARCH)
		}
	}
}

func TestDefaultProfileIsFresh(t *testing.T) {
	a, b := DefaultProfile(), DefaultProfile()
	a.Rules[0].Action = ActKillProcess
	a.Rules = a.Rules[:1]
	if len(b.Rules) < 200 || b.Rules[0].Action == ActKillProcess {
		t.Errorf("modifying one DefaultProfile changed another: %d rules, first %v", len(b.Rules), b.Rules[0].Action)
	}
	if b.Arch != runtime.GOARCH {
		t.Errorf("Arch = %q, want %q", b.Arch, runtime.GOARCH)
	}
}
