package seccomp

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The integration tests re-execute the test binary as a helper process that
// installs the filter on itself and reports what it could and could not do.
// helperEnv selects the helper's mode; helperDirEnv names a scratch directory.
const (
	helperEnv    = "AIRLOCK_SECCOMP_TEST_HELPER"
	helperDirEnv = "AIRLOCK_SECCOMP_TEST_DIR"
)

func TestMain(m *testing.M) {
	if mode := os.Getenv(helperEnv); mode != "" {
		os.Exit(helperMain(mode))
	}
	os.Exit(m.Run())
}

// helperReport is what a helper prints on stdout as JSON.
type helperReport struct {
	// Results maps a probe name to "ok", an errno name such as "EPERM",
	// or another error text.
	Results map[string]string
	// Notes carry details for failure messages (stderr of programs, ...).
	Notes map[string]string
	// Skip, if set, asks the parent to skip the test.
	Skip string
}

func newReport() *helperReport {
	return &helperReport{Results: map[string]string{}, Notes: map[string]string{}}
}

// outcome turns an error into a report value.
func outcome(err error) string {
	if err == nil {
		return "ok"
	}
	var errno syscall.Errno
	if errors.As(err, &errno) {
		if name := unix.ErrnoName(errno); name != "" {
			return name
		}
		return fmt.Sprintf("errno %d", uint32(errno))
	}
	return err.Error()
}

func errnoOutcome(errno syscall.Errno) string {
	if errno == 0 {
		return "ok"
	}
	return outcome(errno)
}

func helperMain(mode string) int {
	// A failing x32 probe kills the process with SIGSYS; keep it from
	// leaving a core file behind.
	_ = unix.Setrlimit(unix.RLIMIT_CORE, &unix.Rlimit{})
	rep := newReport()
	var err error
	switch mode {
	case "attacks":
		err = helperAttacks(rep)
	case "programs":
		err = helperPrograms(rep)
	case "x32":
		err = helperX32(rep)
	case "nonnp":
		err = helperNoNNP(rep)
	case "tsyncfail":
		err = helperTSyncFail(rep)
	default:
		err = fmt.Errorf("unknown helper mode %q", mode)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		return 2
	}
	if err := json.NewEncoder(os.Stdout).Encode(rep); err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		return 2
	}
	return 0
}

// setNNPAndInstall sets no_new_privs on the calling thread, which must be
// locked, and installs the default profile.
func setNNPAndInstall() error {
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("PR_SET_NO_NEW_PRIVS: %w", err)
	}
	prog, err := DefaultProfile().Compile()
	if err != nil {
		return err
	}
	return Install(prog)
}

// seccompMode returns the "Seccomp:" field of a /proc status file.
func seccompMode(statusPath string) string {
	f, err := os.Open(statusPath)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if v, ok := strings.CutPrefix(s.Text(), "Seccomp:"); ok {
			return strings.TrimSpace(v)
		}
	}
	return "missing"
}

const absentPath = "/nonexistent-airlock-seccomp-probe"

func helperAttacks(rep *helperReport) error {
	runtime.LockOSThread()

	// Threads that exist before Install: TSYNC must filter them too.
	type preThread struct {
		start chan struct{}
		done  chan [2]string // seccomp mode, unshare outcome
	}
	var pre []preThread
	tids := make(chan int, 4)
	for range 4 {
		pt := preThread{start: make(chan struct{}), done: make(chan [2]string, 1)}
		pre = append(pre, pt)
		go func() {
			runtime.LockOSThread()
			tids <- unix.Gettid()
			<-pt.start
			mode := seccompMode("/proc/thread-self/status")
			pt.done <- [2]string{mode, outcome(unix.Unshare(unix.CLONE_NEWUSER))}
		}()
	}
	self := unix.Gettid()
	for range pre {
		if tid := <-tids; tid == self {
			return errors.New("a locked goroutine shares the installing thread")
		}
	}

	if err := setNNPAndInstall(); err != nil {
		return err
	}

	// Every thread, including the blocked pre-install ones, must now be
	// in seccomp mode 2 (filter).
	tasks, _ := filepath.Glob("/proc/self/task/*/status")
	var unfiltered []string
	for _, st := range tasks {
		if mode := seccompMode(st); mode != "2" {
			unfiltered = append(unfiltered, st+": "+mode)
		}
	}
	rep.Results["threads without filter"] = strconv.Itoa(len(unfiltered))
	rep.Notes["threads"] = fmt.Sprintf("%d threads; unfiltered: %q", len(tasks), unfiltered)

	for i, pt := range pre {
		close(pt.start)
		r := <-pt.done
		rep.Results[fmt.Sprintf("pre-install thread %d seccomp mode", i)] = r[0]
		rep.Results[fmt.Sprintf("pre-install thread %d unshare(CLONE_NEWUSER)", i)] = r[1]
	}

	raw := func(trap uintptr, args ...uintptr) string {
		var a [6]uintptr
		copy(a[:], args)
		_, _, errno := unix.Syscall6(trap, a[0], a[1], a[2], a[3], a[4], a[5])
		return errnoOutcome(errno)
	}
	cstr := func(s string) uintptr {
		p, _ := unix.BytePtrFromString(s)
		return addr(p)
	}
	sock := func(domain, typ, proto int) string {
		fd, err := unix.Socket(domain, typ, proto)
		if err == nil {
			unix.Close(fd)
		}
		return outcome(err)
	}

	// Probes that the filter must refuse. Each is chosen so that, were
	// the filter missing, it would fail harmlessly with another errno
	// (or succeed without lasting effect) rather than change the host.
	rep.Results["unshare(CLONE_NEWUSER)"] = outcome(unix.Unshare(unix.CLONE_NEWUSER))
	rep.Results["unshare(CLONE_NEWNS)"] = outcome(unix.Unshare(unix.CLONE_NEWNS))
	rep.Results["setns"] = raw(unix.SYS_SETNS, ^uintptr(0), 0)
	rep.Results["mount"] = outcome(unix.Mount("none", absentPath, "tmpfs", 0, ""))
	rep.Results["umount2"] = outcome(unix.Unmount(absentPath, 0))
	rep.Results["chroot"] = outcome(unix.Chroot(absentPath))
	rep.Results["pivot_root"] = outcome(unix.PivotRoot(absentPath, absentPath))
	rep.Results["fsopen"] = raw(unix.SYS_FSOPEN, cstr("no-such-fs"), 0)
	sessionKeyring := unix.KEY_SPEC_SESSION_KEYRING
	rep.Results["keyctl"] = raw(unix.SYS_KEYCTL, unix.KEYCTL_GET_KEYRING_ID, uintptr(sessionKeyring), 0)
	rep.Results["add_key"] = raw(unix.SYS_ADD_KEY, 0, 0, 0, 0, 0)
	rep.Results["bpf"] = raw(unix.SYS_BPF, unix.BPF_MAP_CREATE, 0, 0)
	rep.Results["perf_event_open"] = raw(unix.SYS_PERF_EVENT_OPEN, 0, 0, ^uintptr(0), ^uintptr(0), 0)
	rep.Results["userfaultfd"] = raw(unix.SYS_USERFAULTFD, ^uintptr(0))
	rep.Results["io_uring_setup"] = raw(unix.SYS_IO_URING_SETUP, 0, 0)
	rep.Results["ptrace(PTRACE_ATTACH)"] = raw(unix.SYS_PTRACE, unix.PTRACE_ATTACH, 0x7ffffff0)
	rep.Results["process_vm_readv"] = raw(unix.SYS_PROCESS_VM_READV, 0x7ffffff0, 0, 0, 0, 0, 0)
	rep.Results["open_by_handle_at"] = raw(unix.SYS_OPEN_BY_HANDLE_AT, ^uintptr(0), 0, 0)
	rep.Results["sethostname"] = raw(unix.SYS_SETHOSTNAME, cstr("x"), 10000)
	rep.Results["settimeofday(NULL, NULL)"] = raw(unix.SYS_SETTIMEOFDAY, 0, 0)
	rep.Results["syslog(SIZE_BUFFER)"] = raw(unix.SYS_SYSLOG, 10, 0, 0)
	rep.Results["clone3"] = raw(unix.SYS_CLONE3, 0, 0)
	var aio uintptr
	rep.Results["io_setup"] = raw(unix.SYS_IO_SETUP, 128, addr(&aio))
	rep.Results["socket(AF_PACKET)"] = sock(unix.AF_PACKET, unix.SOCK_RAW, 0)
	rep.Results["socket(AF_VSOCK)"] = sock(unix.AF_VSOCK, unix.SOCK_STREAM, 0)
	rep.Results["socket(AF_INET, SOCK_RAW)"] = sock(unix.AF_INET, unix.SOCK_RAW, unix.IPPROTO_ICMP)
	rep.Results["socket(AF_INET, IPPROTO_MPTCP)"] = sock(unix.AF_INET, unix.SOCK_STREAM, unix.IPPROTO_MPTCP)
	rep.Results["socket(AF_NETLINK, NETLINK_AUDIT)"] = sock(unix.AF_NETLINK, unix.SOCK_RAW, unix.NETLINK_AUDIT)
	rep.Results["socketpair(AF_INET)"] = raw(unix.SYS_SOCKETPAIR, unix.AF_INET, unix.SOCK_STREAM, 0, 0)
	rep.Results["personality(READ_IMPLIES_EXEC)"] = raw(unix.SYS_PERSONALITY, readImpliesEx)
	rep.Results["personality(ADDR_NO_RANDOMIZE)"] = raw(unix.SYS_PERSONALITY, addrNoRandom)
	// Not a terminal, so without the filter these would fail with ENOTTY
	// instead of typing into anything.
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		return err
	}
	defer devnull.Close()
	var c byte = 'x'
	rep.Results["ioctl(TIOCSTI)"] = raw(unix.SYS_IOCTL, devnull.Fd(), unix.TIOCSTI, addr(&c))
	rep.Results["ioctl(TIOCSTI|1<<32)"] = raw(unix.SYS_IOCTL, devnull.Fd(), 1<<32|unix.TIOCSTI, addr(&c))
	rep.Results["ioctl(TIOCLINUX)"] = raw(unix.SYS_IOCTL, devnull.Fd(), unix.TIOCLINUX, addr(&c))
	// clone with a namespace flag, through os/exec.
	cmd := exec.Command("/bin/true")
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: unix.CLONE_NEWUSER}
	rep.Results["exec with CLONE_NEWUSER"] = outcome(cmd.Run())

	// What must keep working.
	rep.Results["exec /bin/true"] = outcome(exec.Command("/bin/true").Run())
	out, err := exec.Command("/bin/sh", "-c", "echo hello | cat").Output()
	if err == nil && string(out) != "hello\n" {
		err = fmt.Errorf("output %q", out)
	}
	rep.Results["sh pipeline"] = outcome(err)
	rep.Results["goroutines"] = outcome(goroutineWork())
	rep.Results["tcp loopback"] = outcome(tcpEcho())
	rep.Results["udp socket"] = outcome(func() error {
		c, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err == nil {
			c.Close()
		}
		return err
	}())
	rep.Results["net.Interfaces (netlink route)"] = outcome(func() error { _, err := net.Interfaces(); return err }())
	rep.Results["socketpair(AF_UNIX)"] = outcome(func() error {
		fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err == nil {
			unix.Close(fds[0])
			unix.Close(fds[1])
		}
		return err
	}())
	rep.Results["ioctl(FIONREAD)"] = outcome(func() error {
		r, w, err := os.Pipe()
		if err != nil {
			return err
		}
		defer r.Close()
		defer w.Close()
		if _, err := w.Write([]byte("abc")); err != nil {
			return err
		}
		n, err := unix.IoctlGetInt(int(r.Fd()), unix.TIOCINQ)
		if err == nil && n != 3 {
			err = fmt.Errorf("FIONREAD = %d, want 3", n)
		}
		return err
	}())
	rep.Results["personality(query)"] = raw(unix.SYS_PERSONALITY, perQuery)
	rep.Results["clone thread after install"] = outcome(func() error {
		done := make(chan int)
		go func() {
			runtime.LockOSThread() // forces a new OS thread for the next goroutine
			defer runtime.UnlockOSThread()
			done <- unix.Gettid()
		}()
		<-done
		return nil
	}())
	return nil
}

// goroutineWork makes the runtime create threads, grow stacks, collect
// garbage and return memory to the kernel.
func goroutineWork() error {
	const n = 1000
	var wg sync.WaitGroup
	results := make(chan int, n)
	want := 0
	for i := range n {
		want += i % 256
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 64<<10)
			buf[i%len(buf)] = byte(i)
			time.Sleep(time.Millisecond)
			results <- int(buf[i%len(buf)])
		}()
	}
	wg.Wait()
	close(results)
	got := 0
	for v := range results {
		got += v
	}
	runtime.GC()
	debug.FreeOSMemory()
	if got != want {
		return fmt.Errorf("goroutines summed to %d, want %d", got, want)
	}
	return nil
}

func tcpEcho() error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		io.Copy(c, c)
	}()
	c, err := net.DialTimeout("tcp", ln.Addr().String(), 10*time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write([]byte("ping")); err != nil {
		return err
	}
	buf := make([]byte, 4)
	if _, err := io.ReadFull(c, buf); err != nil {
		return err
	}
	if string(buf) != "ping" {
		return fmt.Errorf("echo returned %q", buf)
	}
	return nil
}

// helperPrograms runs ordinary programs under the filter.
func helperPrograms(rep *helperReport) error {
	runtime.LockOSThread()
	if err := setNNPAndInstall(); err != nil {
		return err
	}
	dir := os.Getenv(helperDirEnv)
	for _, p := range programProbes(dir) {
		if _, err := exec.LookPath(p.argv[0]); err != nil {
			rep.Results[p.name] = "missing"
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		cmd := exec.CommandContext(ctx, p.argv[0], p.argv[1:]...)
		cmd.Dir = dir
		var outBuf bytes.Buffer
		cmd.Stdout, cmd.Stderr = &outBuf, &outBuf
		err := cmd.Run()
		cancel()
		rep.Results[p.name] = outcome(err)
		if err != nil {
			rep.Notes[p.name] = outBuf.String()
		}
	}
	return nil
}

type programProbe struct {
	name string
	argv []string
}

func programProbes(dir string) []programProbe {
	return []programProbe{
		{"sh+coreutils", []string{"sh", "-c", "ls / >/dev/null && cat /proc/self/status | grep -q '^Seccomp:.*2' && " +
			"id >/dev/null && echo a > f && cp f g && sort g | wc -l >/dev/null && rm f g && " +
			"{ sleep 0.01 & wait $!; }"}},
		{"python3", []string{"python3", "-c", "import threading, subprocess, socket, os\n" +
			"t = threading.Thread(target=lambda: None); t.start(); t.join()\n" +
			"assert subprocess.run(['true']).returncode == 0\n" +
			"s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen(); s.close()\n" +
			"r, w = os.pipe(); pid = os.fork()\n" +
			"if pid == 0: os._exit(0)\n" +
			"os.waitpid(pid, 0)\n"}},
		{"git", []string{"sh", "-c", "git init -q repo && cd repo && git -c user.name=t -c user.email=t@t " +
			"commit -q --allow-empty -m x && git log --oneline >/dev/null"}},
		{"curl", []string{"curl", "--version"}},
		{"node", []string{"node", "-e", "require('child_process').execFileSync('true');" +
			"require('fs').writeFileSync('n.txt', 'x'); require('fs').readFileSync('n.txt');" +
			"new Promise(r => setTimeout(r, 10)).then(() => {})"}},
		{"gcc compile and run", []string{"sh", "-c", "printf 'int main(void){return 0;}' > t.c && gcc -o t t.c && ./t"}},
	}
}

// helperX32 makes an x32 syscall after installing the filter, which must
// kill the process.
func helperX32(rep *helperReport) error {
	runtime.LockOSThread()
	if err := setNNPAndInstall(); err != nil {
		return err
	}
	_, _, errno := unix.RawSyscall(x32SyscallBit|unix.SYS_GETPID, 0, 0, 0)
	rep.Results["x32 getpid"] = "survived: " + errnoOutcome(errno)
	return nil
}

// helperNoNNP installs without no_new_privs and without CAP_SYS_ADMIN.
func helperNoNNP(rep *helperReport) error {
	runtime.LockOSThread()
	if nnp, err := unix.PrctlRetInt(unix.PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0); err != nil || nnp != 0 {
		rep.Skip = fmt.Sprintf("no_new_privs already set (%d, %v)", nnp, err)
		return nil
	}
	// Drop the effective capabilities of this thread only: capset acts on
	// the calling thread.
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return fmt.Errorf("capget: %w", err)
	}
	data[0].Effective, data[1].Effective = 0, 0
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return fmt.Errorf("capset: %w", err)
	}
	prog, err := DefaultProfile().Compile()
	if err != nil {
		return err
	}
	err = Install(prog)
	rep.Results["errno"] = outcome(err)
	if err != nil {
		rep.Results["message"] = err.Error()
	}
	return nil
}

// helperTSyncFail gives one thread a filter of its own, so that TSYNC from
// another thread must fail and name it.
func helperTSyncFail(rep *helperReport) error {
	runtime.LockOSThread()
	ready := make(chan error)
	release := make(chan struct{})
	var tid int
	go func() {
		runtime.LockOSThread()
		tid = unix.Gettid()
		err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
		if err == nil {
			allowAll := []unix.SockFilter{{Code: opRetK, K: uint32(ActAllow)}}
			_, errno := setModeFilter(0, allowAll)
			if errno != 0 {
				err = errno
			}
		}
		ready <- err
		<-release
	}()
	if err := <-ready; err != nil {
		return fmt.Errorf("installing the per-thread filter: %w", err)
	}
	err := setNNPAndInstall()
	close(release)
	rep.Notes["tid"] = strconv.Itoa(tid)
	rep.Results["is ErrThreadSync"] = strconv.FormatBool(errors.Is(err, ErrThreadSync))
	rep.Results["names thread"] = strconv.FormatBool(err != nil && strings.Contains(err.Error(), fmt.Sprintf("thread %d ", tid)))
	if err != nil {
		rep.Notes["message"] = err.Error()
	}
	return nil
}

// runHelper runs the test binary in a helper mode and decodes its report.
// The returned error is the child's exit error, if any.
func runHelper(t *testing.T, mode string) (*helperReport, error) {
	t.Helper()
	if _, err := unix.PrctlRetInt(unix.PR_GET_SECCOMP, 0, 0, 0, 0); err == unix.EINVAL {
		t.Skip("kernel built without seccomp")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, exe)
	cmd.Env = append(os.Environ(), helperEnv+"="+mode, helperDirEnv+"="+dir)
	cmd.Dir = dir
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	runErr := cmd.Run()
	if stdout.Len() == 0 {
		return nil, fmt.Errorf("%w; stderr:\n%s", runErr, stderr.String())
	}
	rep := newReport()
	if err := json.Unmarshal(stdout.Bytes(), rep); err != nil {
		t.Fatalf("helper %s: bad report %q: %v; stderr:\n%s", mode, stdout.String(), err, stderr.String())
	}
	if runErr != nil {
		t.Fatalf("helper %s: %v; stderr:\n%s", mode, runErr, stderr.String())
	}
	if rep.Skip != "" {
		t.Skip(rep.Skip)
	}
	return rep, nil
}

func TestInstallBlocksAttacks(t *testing.T) {
	rep, err := runHelper(t, "attacks")
	if err != nil {
		t.Fatalf("helper: %v", err)
	}
	refused := func(errnos ...string) []string { return errnos }
	ok := []string{"ok"}
	tests := []struct {
		probe string
		want  []string
	}{
		{"threads without filter", []string{"0"}},
		{"unshare(CLONE_NEWUSER)", refused("EPERM")},
		{"unshare(CLONE_NEWNS)", refused("EPERM")},
		{"setns", refused("EPERM")},
		{"mount", refused("EPERM")},
		{"umount2", refused("EPERM")},
		{"chroot", refused("EPERM")},
		{"pivot_root", refused("EPERM")},
		{"fsopen", refused("EPERM")},
		{"keyctl", refused("EPERM")},
		{"add_key", refused("EPERM")},
		{"bpf", refused("EPERM")},
		{"perf_event_open", refused("EPERM")},
		{"userfaultfd", refused("EPERM")},
		{"io_uring_setup", refused("EPERM")},
		{"ptrace(PTRACE_ATTACH)", refused("EPERM")},
		{"process_vm_readv", refused("EPERM")},
		{"open_by_handle_at", refused("EPERM")},
		{"sethostname", refused("EPERM")},
		{"settimeofday(NULL, NULL)", refused("EPERM")},
		{"syslog(SIZE_BUFFER)", refused("EPERM")},
		{"clone3", refused("ENOSYS")},
		{"io_setup", refused("ENOSYS")},
		{"socket(AF_PACKET)", refused("EAFNOSUPPORT")},
		{"socket(AF_VSOCK)", refused("EAFNOSUPPORT")},
		{"socket(AF_INET, SOCK_RAW)", refused("EPERM")},
		{"socket(AF_INET, IPPROTO_MPTCP)", refused("EPROTONOSUPPORT")},
		{"socket(AF_NETLINK, NETLINK_AUDIT)", refused("EPROTONOSUPPORT")},
		{"socketpair(AF_INET)", refused("EAFNOSUPPORT")},
		{"personality(READ_IMPLIES_EXEC)", refused("EPERM")},
		{"personality(ADDR_NO_RANDOMIZE)", refused("EPERM")},
		{"ioctl(TIOCSTI)", refused("EPERM")},
		{"ioctl(TIOCSTI|1<<32)", refused("EPERM")},
		{"ioctl(TIOCLINUX)", refused("EPERM")},
		{"exec with CLONE_NEWUSER", refused("EPERM")},
		{"exec /bin/true", ok},
		{"sh pipeline", ok},
		{"goroutines", ok},
		{"tcp loopback", ok},
		{"udp socket", ok},
		{"net.Interfaces (netlink route)", ok},
		{"socketpair(AF_UNIX)", ok},
		{"ioctl(FIONREAD)", ok},
		{"personality(query)", ok},
		{"clone thread after install", ok},
	}
	for i := range 4 {
		tests = append(tests,
			struct {
				probe string
				want  []string
			}{fmt.Sprintf("pre-install thread %d seccomp mode", i), []string{"2"}},
			struct {
				probe string
				want  []string
			}{fmt.Sprintf("pre-install thread %d unshare(CLONE_NEWUSER)", i), refused("EPERM")},
		)
	}
	for _, tt := range tests {
		got, found := rep.Results[tt.probe]
		if !found {
			t.Errorf("%s: no result", tt.probe)
			continue
		}
		if !slices.Contains(tt.want, got) {
			t.Errorf("%s: got %q, want one of %q", tt.probe, got, tt.want)
		}
	}
	t.Logf("helper: %s", rep.Notes["threads"])
}

func TestInstallRunsPrograms(t *testing.T) {
	if testing.Short() {
		t.Skip("runs external programs")
	}
	rep, err := runHelper(t, "programs")
	if err != nil {
		t.Fatalf("helper: %v", err)
	}
	for _, p := range programProbes("") {
		got := rep.Results[p.name]
		switch got {
		case "ok":
		case "missing":
			t.Logf("%s: not installed, skipped", p.name)
		default:
			t.Errorf("%s under the filter: got %q, want ok; output:\n%s", p.name, got, rep.Notes[p.name])
		}
	}
}

func TestInstallKillsX32(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		t.Skip("x32 exists only on amd64")
	}
	rep, err := runHelper(t, "x32")
	if err == nil {
		t.Fatalf("x32 syscall did not kill the helper: %v", rep.Results)
	}
	var exitErr *exec.ExitError
	if !errors.As(err, &exitErr) {
		t.Fatalf("helper: %v", err)
	}
	ws, ok := exitErr.Sys().(syscall.WaitStatus)
	if !ok || !ws.Signaled() || ws.Signal() != syscall.SIGSYS {
		t.Errorf("helper ended with %v, want death by SIGSYS", err)
	}
}

func TestInstallWithoutNoNewPrivs(t *testing.T) {
	rep, err := runHelper(t, "nonnp")
	if err != nil {
		t.Fatalf("helper: %v", err)
	}
	if got := rep.Results["errno"]; got != "EACCES" {
		t.Errorf("Install without no_new_privs: got %q, want EACCES", got)
	}
	if msg := rep.Results["message"]; !strings.Contains(msg, "no_new_privs") {
		t.Errorf("error %q does not mention no_new_privs", msg)
	}
}

func TestInstallReportsTSyncFailure(t *testing.T) {
	rep, err := runHelper(t, "tsyncfail")
	if err != nil {
		t.Fatalf("helper: %v", err)
	}
	for _, probe := range []string{"is ErrThreadSync", "names thread"} {
		if got := rep.Results[probe]; got != "true" {
			t.Errorf("%s: got %q, want true (error %q, thread %s)", probe, got, rep.Notes["message"], rep.Notes["tid"])
		}
	}
}

func TestInstallRejectsBadLength(t *testing.T) {
	for _, n := range []int{0, unix.BPF_MAXINSNS + 1} {
		if err := Install(make([]unix.SockFilter, n)); err == nil {
			t.Errorf("Install of %d instructions: got nil error", n)
		}
	}
}
