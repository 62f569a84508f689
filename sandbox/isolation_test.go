package sandbox

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/linux/netns"
	"github.com/airlockhq/airlock/internal/sbinit"
	"github.com/airlockhq/airlock/internal/testutil"

	"golang.org/x/sys/unix"

	"github.com/airlockhq/airlock/result"
)

func TestEchoAndExitCodes(t *testing.T) {
	for _, be := range append(backends(t), oneCommandBackend(t)...) {
		t.Run(be.name, func(t *testing.T) {
			tests := []struct {
				name    string
				argv    []string
				outcome result.Outcome
				code    int
				signal  int
				stdout  string
			}{
				{"echo", []string{"echo", "hello"}, result.Exited, 0, 0, "hello\n"},
				{"exit code", []string{"sh", "-c", "exit 3"}, result.Exited, 3, 0, ""},
				{"signal", []string{"sh", "-c", "kill -TERM $$"}, result.Signaled, 0, 15, ""},
				{"not found", []string{"no-such-command"}, result.Exited, 127, 0, ""},
				{"not executable", []string{"/etc/passwd"}, result.Exited, 126, 0, ""},
			}
			for _, tt := range tests {
				t.Run(tt.name, func(t *testing.T) {
					r := run(t, runOpts{spec: be.spec}, tt.argv...)
					if r.Outcome != tt.outcome || r.ExitCode != tt.code || r.Signal != tt.signal {
						t.Fatalf("got %s code %d signal %d (error %q, stderr %q), want %s code %d signal %d",
							r.Outcome, r.ExitCode, r.Signal, r.Error, r.Stderr, tt.outcome, tt.code, tt.signal)
					}
					if tt.stdout != "" && string(r.Stdout) != tt.stdout {
						t.Fatalf("got stdout %q, want %q", r.Stdout, tt.stdout)
					}
				})
			}
		})
	}
}

func TestStdinAndEnv(t *testing.T) {
	for _, be := range append(backends(t), oneCommandBackend(t)...) {
		t.Run(be.name, func(t *testing.T) {
			t.Setenv("AIRLOCK_TEST_HOST_SECRET", "s3cr3t")
			r := run(t, runOpts{stdin: []byte("from stdin\n"), env: []string{"FOO=bar", "HOME=/tmp"}, spec: be.spec},
				"sh", "-c", "cat; env | sort")
			out := string(r.Stdout)
			if !strings.HasPrefix(out, "from stdin\n") {
				t.Fatalf("stdin not forwarded: %q", out)
			}
			for _, want := range []string{"FOO=bar", "HOME=/tmp", "PATH=", "LANG=C.UTF-8", "TERM=dumb"} {
				if !strings.Contains(out, want) {
					t.Errorf("env lacks %q: %q", want, out)
				}
			}
			if strings.Contains(out, "s3cr3t") || strings.Contains(out, "AIRLOCK_TEST_HOST_SECRET") {
				t.Errorf("host environment leaked into the sandbox: %q", out)
			}
		})
	}
}

func TestIdentityAndUIDRange(t *testing.T) {
	var initUID uint32
	var base uint32
	var threads map[string]string // init's threads: tid → "Uid: … Gid: …"
	r := run(t, runOpts{during: func(sb *Sandbox) {
		base = sb.HostIDBase()
		initUID, _ = procUID(sb.InitPid())
		threads = threadIDs(t, sb.InitPid())
	}}, "sh", "-c", "id; cat /proc/self/uid_map /proc/self/gid_map; hostname; stat -c '%u:%g' / /etc /etc/passwd /dev /workspace")
	out := string(r.Stdout)
	if !strings.Contains(out, "uid=1000(sandbox) gid=1000(sandbox) groups=1000(sandbox)") {
		t.Errorf("id: got %q", out)
	}
	if want := fmt.Sprintf("0 %d 65536", base); !strings.Contains(strings.Join(strings.Fields(out), " "), want) {
		t.Errorf("uid_map: got %q, want %q", out, want)
	}
	if base < 1<<16 {
		t.Errorf("sandbox range starts at host uid %d, inside ordinary host ids", base)
	}
	// Init's real uid is its own, the last of the range, and never host
	// root; its effective uid is the commands' (see initproto.Setup).
	if want := base + 65535; initUID != want {
		t.Errorf("init runs as host uid %d, want %d (never host root)", initUID, want)
	}
	// Every thread of init has the same ids once it has confined itself:
	// real and saved uid its own, effective and file-system uid and all
	// four gids the commands'. (Init starts with the commands' gid and
	// builds the sandbox with a file-system gid of 0 on its main thread.)
	want := fmt.Sprintf("Uid: %d %d %d %d Gid: %d %d %d %d", base+65535, base+1000, base+65535, base+1000, base+1000, base+1000, base+1000, base+1000)
	if len(threads) < 2 {
		t.Errorf("init has %d threads, want its Go runtime's few", len(threads))
	}
	for tid, ids := range threads {
		if ids != want {
			t.Errorf("init thread %s: %q, want %q", tid, ids, want)
		}
	}
	// What init made is root's inside, the workspace the user's.
	if !strings.Contains(out, "0:0\n0:0\n0:0\n0:0\n1000:1000\n") {
		t.Errorf("owners of /, /etc, /etc/passwd, /dev, /workspace: %q, want root's but the workspace", out)
	}
}

// threadIDs returns the Uid and Gid lines of each thread of pid, by tid.
func threadIDs(t *testing.T, pid int) map[string]string {
	t.Helper()
	dir := fmt.Sprintf("/proc/%d/task", pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, e := range ents {
		b, err := os.ReadFile(dir + "/" + e.Name() + "/status")
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, "Uid:") || strings.HasPrefix(l, "Gid:") {
				ids = append(ids, strings.Join(strings.Fields(l), " "))
			}
		}
		out[e.Name()] = strings.Join(ids, " ")
	}
	return out
}

func TestConcurrentSandboxesHaveDistinctRanges(t *testing.T) {
	rt := testRuntime(t)
	const n = 6
	var mu sync.Mutex
	seen := map[uint32]bool{}
	var sbs []*Sandbox
	for range n {
		sb, err := rt.Create(t.Context(), Spec{Limits: DefaultLimits()})
		if err != nil {
			t.Fatal(err)
		}
		sbs = append(sbs, sb)
		mu.Lock()
		if seen[sb.HostIDBase()] {
			t.Errorf("uid range %d handed out twice", sb.HostIDBase())
		}
		seen[sb.HostIDBase()] = true
		mu.Unlock()
	}
	for _, sb := range sbs {
		tr := traceOf(t, sb)
		if err := sb.Destroy(t.Context()); err != nil {
			t.Error(err)
		}
		tr.assertGone(t)
	}
}

func nsInode(t *testing.T, path string) uint64 { return testutil.Inode(t, path) }

func TestNamespaces(t *testing.T) {
	run(t, runOpts{during: func(sb *Sandbox) {
		for _, ns := range []string{"user", "pid", "mnt", "ipc", "uts", "cgroup", "net"} {
			host := nsInode(t, "/proc/self/ns/"+ns)
			in := nsInode(t, fmt.Sprintf("/proc/%d/ns/%s", sb.InitPid(), ns))
			if host == in {
				t.Errorf("%s namespace shared with the host", ns)
			}
		}
		// The network namespace belongs to the host's user namespace, so
		// the sandbox's root has no power over it.
		owner, err := unix.IoctlRetInt(int(sb.NetNS().Fd()), unix.NS_GET_USERNS)
		if err != nil {
			t.Fatal(err)
		}
		defer unix.Close(owner)
		var st unix.Stat_t
		if err := unix.Fstat(owner, &st); err != nil {
			t.Fatal(err)
		}
		if host := nsInode(t, "/proc/self/ns/user"); st.Ino != host {
			t.Errorf("network namespace owned by user namespace %d, want the host's %d", st.Ino, host)
		}
	}}, "true")
}

func TestNetworkIsLoopbackOnly(t *testing.T) {
	for _, be := range append(backends(t), oneCommandBackend(t)...) {
		t.Run(be.name, func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			accepted := make(chan struct{}, 1)
			go func() {
				if c, err := ln.Accept(); err == nil {
					c.Close()
					accepted <- struct{}{}
				}
			}()
			port := ln.Addr().(*net.TCPAddr).Port
			r := run(t, runOpts{spec: be.spec}, "sh", "-c", "cat /proc/net/dev; cat /proc/net/route")
			out := string(r.Stdout)
			if strings.Count(out, ":") != 1 || !strings.Contains(out, "lo:") {
				t.Errorf("interfaces: got %q, want only lo", out)
			}
			rep, _ := attackOn(t, be, "connect", fmt.Sprint(port))
			if rep.OK {
				t.Errorf("connected to the host's loopback listener from inside")
			}
			select {
			case <-accepted:
				t.Errorf("host listener accepted a connection from the sandbox")
			case <-time.After(100 * time.Millisecond):
			}
		})
	}
}

// TestOwnTCPTable: where the kernel has per-namespace TCP tables, a
// sandbox's network namespace has one of its own (netns.UseTemplate), so
// that its connections share no hash chain with the host's and reading
// its sockets does not walk the host's whole table.
func TestOwnTCPTable(t *testing.T) {
	if _, err := os.Stat("/proc/sys/net/ipv4/tcp_child_ehash_entries"); err != nil {
		t.Skip("no per-namespace TCP tables on this kernel (Linux 6.1 and later)")
	}
	r := run(t, runOpts{}, "cat", "/proc/sys/net/ipv4/tcp_ehash_entries")
	if got, want := strings.TrimSpace(string(r.Stdout)), strconv.Itoa(netns.ChildEhashEntries); got != want {
		t.Errorf("the sandbox's tcp_ehash_entries = %q (stderr %q), want a table of its own, %s", got, r.Stderr, want)
	}
}

func TestFilesystem(t *testing.T) {
	r := run(t, runOpts{}, "sh", "-c", `
		ls -A /etc | tr '\n' ' '; echo
		ls -A / | tr '\n' ' '; echo
		pwd
		echo x > /workspace/f && echo x > /tmp/f && echo x > /dev/shm/f && echo writable
		cat /proc/self/mountinfo
		ls /dev | tr '\n' ' '; echo
		stat -c %a /tmp
		cat /proc/self/cgroup
	`)
	out := string(r.Stdout)
	lines := strings.Split(out, "\n")
	if r.Outcome != result.Exited || r.ExitCode != 0 {
		t.Fatalf("got %s %d: %s", r.Outcome, r.ExitCode, r.Stderr)
	}
	for _, f := range strings.Fields(lines[0]) {
		switch f {
		case "passwd", "group", "hosts", "hostname", "resolv.conf", "nsswitch.conf", "ld.so.cache", "ssl", "pki", "alternatives":
		default:
			t.Errorf("unexpected /etc entry %q (only generated files and CA certificates belong there)", f)
		}
	}
	for _, must := range []string{"usr", "proc", "dev", "etc", "tmp", "workspace"} {
		if !strings.Contains(" "+lines[1]+" ", " "+must+" ") {
			t.Errorf("/ lacks %s: %q", must, lines[1])
		}
	}
	if lines[2] != "/workspace" {
		t.Errorf("working directory %q, want /workspace", lines[2])
	}
	if lines[3] != "writable" {
		t.Errorf("scratch not writable: %q", lines[3])
	}
	if strings.Contains(out, testStateDir) || strings.Contains(out, "airlock-scratch") {
		t.Errorf("mountinfo reveals host paths: %q", out)
	}
	// The cgroup namespace is rooted at the sandbox's own cgroup.
	if strings.Contains(out, testCgroup) {
		t.Errorf("/proc/self/cgroup reveals the host's cgroup tree: %q", out)
	}
	for _, dev := range []string{"null", "zero", "full", "random", "urandom", "pts", "shm", "ptmx"} {
		if !strings.Contains(out, dev) {
			t.Errorf("/dev lacks %s", dev)
		}
	}
	if strings.Contains(out, " tty ") || strings.Contains(out, "console") || strings.Contains(out, "sda") {
		t.Errorf("/dev has host devices: %q", out)
	}
}

// TestProcMasked reads, from inside, every /proc entry that airlock hides,
// and checks that each one this host's kernel has is there and shows
// nothing (kernel addresses, timers, keys); and that the kernel's tunables
// and hardware interfaces are read-only mounts.
func TestProcMasked(t *testing.T) {
	masked := []string{
		"acpi", "asound", "interrupts", "kcore", "keys", "latency_stats",
		"timer_list", "timer_stats", "sched_debug", "scsi", "kmsg",
		"kallsyms", "kpagecount", "kpageflags", "kpagecgroup", "pagetypeinfo",
		"slabinfo", "vmallocinfo", "sysrq-trigger", "config.gz",
	}
	readOnly := []string{"bus", "fs", "irq", "sys", "driver", "tty"}
	script := `for n in ` + strings.Join(masked, " ") + `; do
		p=/proc/$n
		if [ -d $p ]; then echo "$n dir $(ls -A $p | wc -l)"
		elif [ -e $p ]; then echo "$n file $(head -c 64 $p 2>/dev/null | wc -c)"
		else echo "$n none"; fi
	done
	cat /proc/self/mountinfo`
	r := run(t, runOpts{}, "sh", "-c", script)
	if r.Outcome != result.Exited || r.ExitCode != 0 {
		t.Fatalf("got %s %d: %s", r.Outcome, r.ExitCode, r.Stderr)
	}
	seen := map[string]string{}
	mounts := map[string]string{} // mount point -> its options
	for _, l := range strings.Split(string(r.Stdout), "\n") {
		f := strings.Fields(l)
		switch {
		case len(f) == 3 && (f[1] == "dir" || f[1] == "file" || f[1] == "none"):
			seen[f[0]] = f[1] + " " + f[2]
		case len(f) > 5 && strings.HasPrefix(f[4], "/proc/"):
			mounts[f[4]] = f[5]
		}
	}
	hidden := 0
	for _, n := range masked {
		fi, err := os.Lstat("/proc/" + n)
		if err != nil {
			continue // this kernel has none
		}
		hidden++
		want := "file 0"
		if fi.IsDir() {
			want = "dir 0"
		}
		if seen[n] != want {
			t.Errorf("/proc/%s inside: %q, want %q (the host has it)", n, seen[n], want)
		}
	}
	if hidden == 0 {
		t.Fatal("the host has none of the masked /proc entries; the test proves nothing")
	}
	for _, n := range readOnly {
		if _, err := os.Lstat("/proc/" + n); err != nil {
			continue
		}
		if o := mounts["/proc/"+n]; !strings.HasPrefix(o, "ro,") {
			t.Errorf("/proc/%s inside mounted %q, want read-only", n, o)
		}
	}
}

// escapeAttempts are attacks of the test program that must all fail; the
// errnos accepted are what a kernel may answer for a refused call.
var escapeAttempts = func() []escapeAttempt {
	eperm := []unix.Errno{unix.EPERM, unix.EACCES}
	return []escapeAttempt{
		{[]string{"unshare-user"}, eperm},
		{[]string{"unshare-net"}, eperm},
		{[]string{"mount-tmpfs"}, eperm},
		{[]string{"remount-root-rw"}, eperm},
		{[]string{"mount-cgroup"}, eperm},
		{[]string{"write-cgroup"}, append(eperm, unix.ENOENT, unix.EROFS)},
		{[]string{"chroot"}, eperm},
		{[]string{"ptrace-init"}, eperm},
		{[]string{"read-init-mem"}, eperm},
		{[]string{"read-init-environ"}, eperm},
		{[]string{"open-init-ctrl"}, eperm},
		{[]string{"write-sysctl"}, append(eperm, unix.EROFS)},
		// ENOENT: kernels without CONFIG_MAGIC_SYSRQ have no such file.
		{[]string{"sysrq"}, append(eperm, unix.EROFS, unix.ENOENT)},
		{[]string{"mknod"}, eperm},
		{[]string{"write-usr"}, append(eperm, unix.EROFS)},
		{[]string{"write-etc"}, append(eperm, unix.EROFS)},
		{[]string{"keyctl"}, eperm},
		{[]string{"bpf"}, eperm},
		{[]string{"perf"}, eperm},
		{[]string{"userfaultfd"}, eperm},
		{[]string{"io-uring"}, eperm},
		{[]string{"clone3"}, []unix.Errno{unix.ENOSYS}},
		{[]string{"socket-packet"}, append(eperm, unix.EAFNOSUPPORT)},
		{[]string{"socket-raw"}, append(eperm, unix.EAFNOSUPPORT, unix.EPROTONOSUPPORT)},
		{[]string{"socket-mptcp"}, append(eperm, unix.EAFNOSUPPORT, unix.EPROTONOSUPPORT)},
		{[]string{"socket-netlink-audit"}, append(eperm, unix.EAFNOSUPPORT, unix.EPROTONOSUPPORT)},
		{[]string{"tiocsti"}, eperm},
		{[]string{"tiocsti", "high"}, eperm},
		{[]string{"setuid-root"}, eperm},
	}
}()

type escapeAttempt struct {
	args  []string
	errno []unix.Errno
}

// gvisorEscapes are the outcomes of escapeAttempts under gVisor where
// they differ from the namespace backend's: the guest kernel's own answers
// (docs/isolation.md lists both). A nil list means the call succeeds, on
// the guest kernel's own object: keyctl makes a key in gVisor's keyring,
// which holds nothing of the host's.
var gvisorEscapes = map[string][]unix.Errno{
	// gVisor refuses a new user namespace to a multithreaded process.
	"unshare-user": {unix.EINVAL},
	"keyctl":       nil,
	"perf":         {unix.ENODEV},
	"userfaultfd":  {unix.ENOSYS},
	"io-uring":     {unix.ENOSYS},
	// No seccomp filter inside gVisor: its clone3 refuses the probe's
	// flags itself.
	"clone3":               {unix.EINVAL},
	"tiocsti":              {unix.ENOTTY},
	"tiocsti-high":         {unix.ENOTTY},
	"socket-netlink-audit": {unix.EPROTONOSUPPORT},
	"socket-packet":        {unix.EPERM},
	"socket-raw":           {unix.EPERM},
	"socket-mptcp":         {unix.EAFNOSUPPORT},
	"write-cgroup":         {unix.ENOENT},
	"write-sysctl":         {unix.EACCES},
	"sysrq":                {unix.EACCES},
	"write-usr":            {unix.EACCES},
	"write-etc":            {unix.EACCES},
	"read-init-mem":        {unix.EACCES},
	"read-init-environ":    {unix.EACCES},
	"open-init-ctrl":       {unix.EACCES},
}

func TestEscapeAttempts(t *testing.T) {
	for _, be := range append(backends(t), oneCommandBackend(t)...) {
		for _, tt := range escapeAttempts {
			name := strings.Join(tt.args, "-")
			if be.direct && strings.Contains(name, "init") {
				// No init: the guest's first process is the attack
				// program itself.
				continue
			}
			t.Run(be.name+"/"+name, func(t *testing.T) {
				if be.gvisor {
					if errnos, ok := gvisorEscapes[name]; ok {
						tt.errno = errnos
					}
				}
				rep, r := attackOn(t, be, tt.args...)
				tt.check(t, rep, r)
			})
		}
	}
}

func (tt escapeAttempt) check(t *testing.T, rep report, r *result.Result) {
	t.Helper()
	if r.Outcome != result.Exited || r.ExitCode != 0 {
		t.Fatalf("attack program: %s %d: %s", r.Outcome, r.ExitCode, r.Stderr)
	}
	if tt.errno == nil {
		if !rep.OK {
			t.Fatalf("%v failed with errno %d (%s); it succeeds on this backend's own kernel, and the list of outcomes says so", tt.args, rep.Errno, rep.Error)
		}
		return
	}
	if rep.OK {
		t.Fatalf("%v succeeded inside the sandbox (value %q)", tt.args, rep.Value)
	}
	ok := false
	for _, e := range tt.errno {
		ok = ok || rep.Errno == int(e)
	}
	if !ok {
		t.Fatalf("%v failed with errno %d (%s), want one of %v", tt.args, rep.Errno, rep.Error, tt.errno)
	}
}

func TestSocketTCPAllowed(t *testing.T) {
	rep, _ := attack(t, "socket-tcp")
	if !rep.OK {
		t.Fatalf("plain TCP socket refused: %s", rep.Error)
	}
}

func TestInt80IsKilled(t *testing.T) {
	// Control: without the filter, does this kernel (or hypervisor) route
	// int 0x80 at all? Some fault it (SIGSEGV, which the Go runtime turns
	// into exit status 2) before any filter runs.
	ctl := run(t, runOpts{stdin: testProg(t), spec: func(s *Spec) { s.NoSeccomp = true }}, withProg("int80")...)
	_, r := attack(t, "int80")
	if r.Outcome == result.Signaled && r.Signal == int(unix.SIGSYS) {
		return
	}
	if strings.Contains(string(ctl.Stderr), "signal SIGSEGV") && strings.Contains(string(r.Stderr), "signal SIGSEGV") {
		t.Skip("this kernel faults int 0x80 itself, with or without the filter; the filter's arch check is covered by the seccomp package's tests")
	}
	t.Fatalf("i386 syscall: got %s code %d signal %d stdout %q (control without filter: %s %d), want killed by SIGSYS",
		r.Outcome, r.ExitCode, r.Signal, r.Stdout, ctl.Outcome, ctl.ExitCode)
}

// TestInitSurvivesSignals has a command send init every signal by every
// path there is. The kernel must refuse each send (a command shares none
// of init's real and saved uids), and from the host init must be alive and
// the sandbox still able to run a command. SIGIO through F_SETOWN is
// refused silently, so the host's check is what covers it.
func TestInitSurvivesSignals(t *testing.T) {
	for _, be := range backends(t) {
		t.Run(be.name, func(t *testing.T) {
			rt := testRuntime(t)
			users := []*User{nil, {UID: 0, GID: 0}, {UID: 65535, GID: 65535}}
			if be.gvisor {
				users = slices.DeleteFunc(users, func(u *User) bool { return u != nil && u.UID == 0 }) // refused
			}
			for _, user := range users {
				t.Run(fmt.Sprintf("user %v", user), func(t *testing.T) {
					sb, err := rt.Create(t.Context(), Spec{Limits: DefaultLimits(), User: user, Isolation: isolationOf(be)})
					if err != nil {
						t.Fatal(err)
					}
					tr := traceOf(t, sb)
					r := sb.Exec(t.Context(), ExecRequest{Argv: withProg("kill-init"), Stdin: bytes.NewReader(testProg(t)), Capture: true, KeepAlive: true})
					var rep report
					if err := json.Unmarshal(bytes.TrimSpace(r.Stdout), &rep); err != nil {
						t.Fatalf("bad report %q (%s %q): %v", r.Stdout, r.Outcome, r.Stderr, err)
					}
					if !rep.OK {
						t.Errorf("the kernel let a command signal init: %s", rep.Value)
					}
					if err := unix.Kill(sb.InitPid(), 0); err != nil {
						t.Errorf("init is gone: %v", err)
					}
					if r := sb.Exec(t.Context(), ExecRequest{Argv: []string{"true"}}); r.Outcome != result.Exited || r.ExitCode != 0 {
						t.Errorf("the sandbox runs nothing after the signals: %s %d %s", r.Outcome, r.ExitCode, r.Error)
					}
					if err := sb.Destroy(t.Context()); err != nil {
						t.Fatal(err)
					}
					tr.assertGone(t)
				})
			}
		})
	}
}

func TestNoCapabilities(t *testing.T) {
	rep, _ := attack(t, "caps")
	for _, line := range strings.Split(rep.Value, "\n") {
		for _, field := range []string{"CapInh:", "CapPrm:", "CapEff:", "CapBnd:", "CapAmb:"} {
			if v, ok := strings.CutPrefix(line, field); ok && strings.TrimSpace(v) != "0000000000000000" {
				t.Errorf("%s %s, want none", field, strings.TrimSpace(v))
			}
		}
		if v, ok := strings.CutPrefix(line, "NoNewPrivs:"); ok && strings.TrimSpace(v) != "1" {
			t.Errorf("NoNewPrivs %s, want 1", strings.TrimSpace(v))
		}
		if v, ok := strings.CutPrefix(line, "Seccomp:"); ok && strings.TrimSpace(v) != "2" {
			t.Errorf("Seccomp mode %s, want 2 (filter)", strings.TrimSpace(v))
		}
	}
}

func TestHostProcessesInvisible(t *testing.T) {
	for _, be := range append(backends(t), oneCommandBackend(t)...) {
		t.Run(be.name, func(t *testing.T) {
			r := run(t, runOpts{spec: be.spec}, "sh", "-c", "ls /proc | grep -c '^[0-9]'")
			// init, sh, grep, ls: a handful, none of the host's.
			if n := strings.TrimSpace(string(r.Stdout)); len(n) > 1 {
				t.Errorf("sandbox sees %s processes", n)
			}
		})
	}
}

func TestHugeCommandLineRefused(t *testing.T) {
	for _, be := range append([]backend{{name: IsolationNamespaces}}, oneCommandBackend(t)...) {
		t.Run(be.name, func(t *testing.T) {
			r := run(t, runOpts{spec: be.spec}, "echo", strings.Repeat("x", 300<<10))
			if r.Outcome != result.Error || !strings.Contains(r.Error, "exceed") {
				t.Fatalf("got %s %q, want a clear error", r.Outcome, r.Error)
			}
		})
	}
}

// TestCloneInProcess covers the CLI's path, where the runtime clones inits
// itself instead of through the spawner.
func TestCloneInProcess(t *testing.T) {
	requireRoot(t)
	testRuntime(t)
	rt, err := New(t.Context(), Options{StateDir: testStateDir, CgroupParent: testCgroup, InitPath: testutil.InitPath(t), CloneInProcess: true})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	sb, err := rt.Create(t.Context(), Spec{Limits: DefaultLimits()})
	if err != nil {
		t.Fatal(err)
	}
	tr := traceOf(t, sb)
	r := sb.Exec(t.Context(), ExecRequest{Argv: []string{"sh", "-c", "id -u; cat /proc/self/uid_map"}, Capture: true})
	if err := sb.Destroy(t.Context()); err != nil {
		t.Fatal(err)
	}
	tr.assertGone(t)
	if r.Outcome != result.Exited || !strings.HasPrefix(string(r.Stdout), "1000\n") {
		t.Fatalf("got %s %q %s", r.Outcome, r.Stdout, r.Error)
	}
}

// TestKeepAlive runs several commands in one sandbox, as a session will:
// files persist between them, and a background process that keeps the
// output pipe open does not hold the first command's result back.
func TestKeepAlive(t *testing.T) {
	rt := testRuntime(t)
	sb, err := rt.Create(t.Context(), Spec{Limits: DefaultLimits()})
	if err != nil {
		t.Fatal(err)
	}
	tr := traceOf(t, sb)
	r1 := sb.Exec(t.Context(), ExecRequest{Argv: []string{"sh", "-c", "echo kept > /workspace/f; sleep 30 & echo started"}, Capture: true, KeepAlive: true})
	r2 := sb.Exec(t.Context(), ExecRequest{Argv: []string{"cat", "/workspace/f"}, Capture: true, KeepAlive: true})
	if err := sb.Destroy(t.Context()); err != nil {
		t.Fatal(err)
	}
	tr.assertGone(t)
	if r1.Outcome != result.Exited || string(r1.Stdout) != "started\n" {
		t.Fatalf("first: %s %q %s", r1.Outcome, r1.Stdout, r1.Error)
	}
	if r2.Outcome != result.Exited || string(r2.Stdout) != "kept\n" {
		t.Fatalf("second: %s %q %s", r2.Outcome, r2.Stdout, r2.Error)
	}
}

// TestInitReapsOrphans leaves a process behind that init inherits when its
// parent ends, and checks from the host that init reaps it once it exits:
// no zombie stays in the sandbox, holding a pid of its ceiling.
func TestInitReapsOrphans(t *testing.T) {
	rt := testRuntime(t)
	sb, err := rt.Create(t.Context(), Spec{Limits: DefaultLimits()})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Destroy(t.Context())
	r := sb.Exec(t.Context(), ExecRequest{Argv: []string{"sh", "-c", "sleep 0.3 & exit 0"}, KeepAlive: true})
	if r.Outcome != result.Exited || r.ExitCode != 0 {
		t.Fatalf("sh: %s %d %s", r.Outcome, r.ExitCode, r.Error)
	}
	kids := childrenOf(t, sb.InitPid())
	if len(kids) != 1 || kids[0].comm != "sleep" || kids[0].state == "Z" {
		t.Fatalf("init's children after sh ended: %+v, want the running orphan sleep", kids)
	}
	deadline := time.Now().Add(2 * time.Second)
	for {
		kids = childrenOf(t, sb.InitPid())
		if len(kids) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("init's children 2 s on (the orphan slept 0.3 s): %+v", kids)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

type proc struct{ pid, comm, state string }

// childrenOf lists, from the host's /proc, the processes whose parent is
// pid.
func childrenOf(t *testing.T, pid int) []proc {
	t.Helper()
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var out []proc
	for _, e := range ents {
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue // not a process, or gone
		}
		// pid (comm) state ppid ...; comm may hold spaces and parens.
		i := bytes.LastIndexByte(b, ')')
		j := bytes.IndexByte(b, '(')
		if i < 0 || j < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:]))
		if len(f) > 1 && f[1] == strconv.Itoa(pid) {
			out = append(out, proc{pid: e.Name(), comm: string(b[j+1 : i]), state: f[0]})
		}
	}
	return out
}

// TestInitHoldsNoHostFiles lists init's descriptors from the host: its
// control socket, its diagnostics pipe, the runtime's anonymous objects
// (epoll, eventfd, pidfds), and files only on the sandbox's own mounts —
// never a file or directory of a host mount.
func TestInitHoldsNoHostFiles(t *testing.T) {
	run(t, runOpts{during: func(sb *Sandbox) {
		pid := sb.InitPid()
		own := map[string]bool{}
		mi, err := os.ReadFile(fmt.Sprintf("/proc/%d/mountinfo", pid))
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(mi), "\n") {
			if f := strings.Fields(line); len(f) > 0 {
				own[f[0]] = true
			}
		}
		dir := fmt.Sprintf("/proc/%d/fd", pid)
		ents, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range ents {
			target, err := os.Readlink(dir + "/" + e.Name())
			if err != nil {
				continue
			}
			if strings.HasPrefix(target, "pipe:") || strings.HasPrefix(target, "socket:") || strings.HasPrefix(target, "anon_inode:") {
				continue
			}
			info, _ := os.ReadFile(fmt.Sprintf("/proc/%d/fdinfo/%s", pid, e.Name()))
			mnt := ""
			for _, l := range strings.Split(string(info), "\n") {
				if v, ok := strings.CutPrefix(l, "mnt_id:"); ok {
					mnt = strings.TrimSpace(v)
				}
			}
			if !own[mnt] {
				t.Errorf("init holds fd %s -> %s on host mount %s", e.Name(), target, mnt)
			}
		}
	}}, "true")
}

// TestInitThreadsConfined reads, from the host, the status of every thread
// of a ready sandbox's init: each has no capabilities, no_new_privs, the
// seccomp filter, and the uid change (a real and saved uid that is not
// the commands' effective one), not only the thread that forks commands.
func TestInitThreadsConfined(t *testing.T) {
	rt := testRuntime(t)
	sb, err := rt.Create(t.Context(), Spec{Limits: DefaultLimits()})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Destroy(t.Context())
	// Run something first (keeping the sandbox): forking a command is
	// what a thread the runtime started late could miss.
	if r := sb.Exec(t.Context(), ExecRequest{Argv: []string{"true"}, KeepAlive: true}); r.Outcome != result.Exited || r.ExitCode != 0 {
		t.Fatalf("true: %s %d %s", r.Outcome, r.ExitCode, r.Error)
	}
	dir := fmt.Sprintf("/proc/%d/task", sb.InitPid())
	tasks, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(tasks) < 2 {
		t.Fatalf("init has %d threads; the test needs more than one", len(tasks))
	}
	for _, task := range tasks {
		b, err := os.ReadFile(filepath.Join(dir, task.Name(), "status"))
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]func(string) bool{
			"CapEff:":     func(v string) bool { return v == "0000000000000000" },
			"CapPrm:":     func(v string) bool { return v == "0000000000000000" },
			"CapInh:":     func(v string) bool { return v == "0000000000000000" },
			"CapAmb:":     func(v string) bool { return v == "0000000000000000" },
			"CapBnd:":     func(v string) bool { return v == "0000000000000000" },
			"NoNewPrivs:": func(v string) bool { return v == "1" },
			"Seccomp:":    func(v string) bool { return v == "2" },
			// real, effective, saved, fs: the real and saved uid differ
			// from the effective one.
			"Uid:": func(v string) bool { f := strings.Fields(v); return len(f) == 4 && f[0] != f[1] && f[2] != f[1] },
		}
		for _, line := range strings.Split(string(b), "\n") {
			for field, ok := range want {
				if v, found := strings.CutPrefix(line, field); found {
					if !ok(strings.TrimSpace(v)) {
						t.Errorf("init thread %s: %s %s", task.Name(), field, strings.TrimSpace(v))
					}
					delete(want, field)
				}
			}
		}
		for field := range want {
			t.Errorf("init thread %s: no %s line", task.Name(), field)
		}
	}
}

// TestTimerSlack checks that an init's large timer slack, meant for its
// Go runtime's own threads (see spawner.InitTimerSlack), stays with them:
// init's main thread, which starts the commands, has the kernel's default
// back, and so does every command and what a command starts, whichever way
// init was cloned. (The kernel shows the slack of a process's main thread
// only; forkexec's tests check that a child is born with the slack asked
// for.)
func TestTimerSlack(t *testing.T) {
	want := fmt.Sprint(sbinit.CommandTimerSlack)
	for name, rt := range map[string]*Runtime{"in process": testRuntime(t), "spawner": spawnerRuntime(t)} {
		t.Run(name, func(t *testing.T) {
			sb, err := rt.Create(t.Context(), Spec{Limits: DefaultLimits()})
			if err != nil {
				t.Fatal(err)
			}
			defer sb.Destroy(t.Context())
			b, err := os.ReadFile(fmt.Sprintf("/proc/%d/timerslack_ns", sb.InitPid()))
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.TrimSpace(string(b)); got != want {
				t.Errorf("init's main thread has timer slack %s, want %s", got, want)
			}
			r := sb.Exec(t.Context(), ExecRequest{Argv: []string{"sh", "-c", "cat /proc/self/timerslack_ns; sh -c 'cat /proc/self/timerslack_ns'"}, Capture: true, KeepAlive: true})
			if r.Outcome != result.Exited || r.ExitCode != 0 {
				t.Fatalf("%s %d %s %s", r.Outcome, r.ExitCode, r.Error, r.Stderr)
			}
			if got := strings.Fields(string(r.Stdout)); len(got) != 2 || got[0] != want || got[1] != want {
				t.Errorf("a command's and its child's timer slack: %q, want %s each", r.Stdout, want)
			}
		})
	}
}
