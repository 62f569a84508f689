package forkexec

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// run starts sp with stdout on a pipe and returns what the child wrote and
// its exit status.
func run(t *testing.T, sp Spec) (string, unix.WaitStatus, error) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if sp.Files == nil {
		sp.Files = []int{-1, int(w.Fd()), int(w.Fd())}
	}
	c, err := Start(sp)
	w.Close()
	if err != nil {
		return "", 0, err
	}
	defer unix.Close(c.PidFD)
	out := new(strings.Builder)
	buf := make([]byte, 4096)
	for {
		n, err := r.Read(buf)
		out.Write(buf[:n])
		if err != nil {
			break
		}
	}
	var ws unix.WaitStatus
	if _, err := unix.Wait4(c.Pid, &ws, 0, nil); err != nil {
		t.Fatal(err)
	}
	return out.String(), ws, nil
}

func TestStart(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name     string
		sp       Spec
		wantOut  string
		wantStep string
		wantErr  syscall.Errno
	}{
		{"runs, stdin closed, in its directory",
			Spec{Path: "/bin/sh", Argv: []string{"sh", "-c", `pwd; [ -e /proc/self/fd/0 ] && echo stdin open; echo "$X"`}, Env: []string{"X=env"}, Dir: dir},
			dir + "\nenv\n", "", 0},
		{"new session",
			Spec{Path: "/bin/sh", Argv: []string{"sh", "-c", `[ "$(cut -d' ' -f6 /proc/self/stat)" = "$$" ] && echo leader`}, Setsid: true},
			"leader\n", "", 0},
		{"timer slack, kept across exec",
			Spec{Path: "/bin/cat", Argv: []string{"cat", "/proc/self/timerslack_ns"}, TimerSlack: 7_000_000},
			"7000000\n", "", 0},
		{"missing program", Spec{Path: "/nonexistent/prog", Argv: []string{"prog"}}, "", "exec", unix.ENOENT},
		{"missing directory", Spec{Path: "/bin/true", Argv: []string{"true"}, Dir: "/nonexistent"}, "", "chdir", unix.ENOENT},
		{"controlling terminal, none on 0", Spec{Path: "/bin/true", Argv: []string{"true"}, Setsid: true, Setctty: true}, "", "set controlling terminal", unix.EBADF},
		{"bad descriptor", Spec{Path: "/bin/true", Argv: []string{"true"}, Files: []int{-1, 9999}}, "", "dup", unix.EBADF},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.sp.UID, tc.sp.GID, tc.sp.CgroupFD = -1, -1, -1
			out, ws, err := run(t, tc.sp)
			if tc.wantStep != "" {
				var fe *Error
				if !errors.As(err, &fe) || fe.Step != tc.wantStep || fe.Errno != tc.wantErr {
					t.Fatalf("Start: %v, want %s: %v", err, tc.wantStep, tc.wantErr)
				}
				return
			}
			if err != nil || out != tc.wantOut || ws.ExitStatus() != 0 {
				t.Fatalf("Start: %v, output %q, status %v; want %q", err, out, ws, tc.wantOut)
			}
		})
	}
}

// TestSetctty starts a child on a pseudo-terminal as its controlling
// terminal: the kernel then names it in the child's stat (tty_nr), and the
// child is its session's leader.
func TestSetctty(t *testing.T) {
	master, err := unix.Open("/dev/ptmx", unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Skipf("no pseudo-terminals: %v", err)
	}
	defer unix.Close(master)
	if err := unix.IoctlSetPointerInt(master, unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	// The check runs in the child; it answers on the terminal itself.
	c, err := Start(Spec{Path: "/bin/sh", Argv: []string{"sh", "-c", `set -- $(cat /proc/$$/stat); [ "$7" != 0 ] && [ "$6" = $$ ] && echo ctty >&0`},
		Files: []int{mustPeer(t, master), -1, -1}, Setsid: true, Setctty: true, UID: -1, GID: -1, CgroupFD: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(c.PidFD)
	var ws unix.WaitStatus
	if _, err := unix.Wait4(c.Pid, &ws, 0, nil); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	n, _ := unix.Read(master, buf)
	if !ws.Exited() || ws.ExitStatus() != 0 || !strings.Contains(string(buf[:max(n, 0)]), "ctty") {
		t.Fatalf("child on a terminal: status %v, wrote %q; want it to hold the terminal as its controlling one", ws, buf[:max(n, 0)])
	}
}

func mustPeer(t *testing.T, master int) int {
	t.Helper()
	fd, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(master), unix.TIOCGPTPEER, unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC)
	if e != 0 {
		t.Fatal(e)
	}
	t.Cleanup(func() { unix.Close(int(fd)) })
	return int(fd)
}

// TestHoldAndRelease starts a held child, checks it has not run, releases
// it; and kills another held one, which is reaped.
func TestHoldAndRelease(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	c, err := Start(Spec{Path: "/bin/echo", Argv: []string{"echo", "released"}, Files: []int{-1, int(w.Fd())}, Hold: true, UID: -1, GID: -1, CgroupFD: -1})
	w.Close()
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(c.PidFD)
	if st, _ := os.ReadFile("/proc/" + strconv.Itoa(c.Pid) + "/cmdline"); strings.Contains(string(st), "echo") {
		t.Fatalf("held child already exec'd: %q", st)
	}
	if err := c.Release(); err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 64)
	n, _ := r.Read(b)
	if string(b[:n]) != "released\n" {
		t.Fatalf("released child wrote %q", b[:n])
	}
	var ws unix.WaitStatus
	_, _ = unix.Wait4(c.Pid, &ws, 0, nil)

	k, err := Start(Spec{Path: "/bin/true", Argv: []string{"true"}, Files: []int{-1}, Hold: true, UID: -1, GID: -1, CgroupFD: -1})
	if err != nil {
		t.Fatal(err)
	}
	pid := k.Pid
	k.Kill()
	if err := unix.Kill(pid, 0); err != unix.ESRCH {
		t.Errorf("killed child: kill(0) = %v, want ESRCH (reaped)", err)
	}
}

// TestNoOtherDescriptors opens a descriptor without close-on-exec, as an
// inherited one would be, and checks that the child holds only its own.
func TestNoOtherDescriptors(t *testing.T) {
	fd, err := unix.Open("/dev/null", unix.O_RDONLY, 0) // no O_CLOEXEC
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	out, _, err := run(t, Spec{Path: "/bin/ls", Argv: []string{"ls", "/proc/self/fd"}, UID: -1, GID: -1, CgroupFD: -1})
	if err != nil {
		t.Fatal(err)
	}
	// ls's own descriptors: 1 and 2 (the pipe), and the one it reads the
	// directory through.
	if got := strings.Fields(out); len(got) > 3 || slices.Contains(got, strconv.Itoa(fd)) {
		t.Errorf("child's descriptors %q; descriptor %d leaked", got, fd)
	}
}

// TestManyStarts starts children back to back, failing and succeeding in
// turn: a child that ran on the caller's stack (vfork) and damaged what
// the caller returns through would crash this test or garble its results.
func TestManyStarts(t *testing.T) {
	if !canShareMemory {
		t.Log("children are copies on this architecture")
	}
	for i := range 100 {
		sp := Spec{Path: "/bin/true", Argv: []string{"true"}, Files: []int{-1}, UID: -1, GID: -1, CgroupFD: -1}
		if i%2 == 1 {
			sp.Dir = "/nonexistent"
		}
		_, _, err := run(t, sp)
		var fe *Error
		if i%2 == 1 && (!errors.As(err, &fe) || fe.Step != "chdir") {
			t.Fatalf("start %d: %v, want a chdir error", i, err)
		}
		if i%2 == 0 && err != nil {
			t.Fatalf("start %d: %v", i, err)
		}
	}
}

// TestStartNetns: the child makes a network namespace other than this
// process's, with lo up, hands over a close-on-exec descriptor of it and
// is gone; a second Wait is refused.
func TestStartNetns(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	if !SharesMemory() {
		if _, err := StartNetns(); err == nil {
			t.Fatal("StartNetns where children cannot share memory")
		}
		t.Skip("children here do not share the caller's memory")
	}
	c, err := StartNetns()
	if err != nil {
		t.Fatal(err)
	}
	ns, err := c.Wait()
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	if _, err := c.Wait(); err == nil {
		t.Error("a second Wait succeeded")
	}
	var st, self unix.Stat_t
	if err := unix.Fstat(int(ns.Fd()), &st); err != nil {
		t.Fatal(err)
	}
	if err := unix.Stat("/proc/self/ns/net", &self); err != nil {
		t.Fatal(err)
	}
	if st.Ino == self.Ino {
		t.Fatal("the namespace is this process's own")
	}
	if flags, err := unix.FcntlInt(ns.Fd(), unix.F_GETFD, 0); err != nil || flags&unix.FD_CLOEXEC == 0 {
		t.Errorf("descriptor flags %#x, %v: want close-on-exec", flags, err)
	}
	// lo is up inside: ask from a thread that has entered it.
	up := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread dies with the goroutine
		if err := unix.Setns(int(ns.Fd()), unix.CLONE_NEWNET); err != nil {
			up <- err
			return
		}
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			up <- err
			return
		}
		defer unix.Close(fd)
		ifr, _ := unix.NewIfreq("lo")
		if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
			up <- err
			return
		}
		if ifr.Uint16()&unix.IFF_UP == 0 {
			up <- fmt.Errorf("lo flags %#x: not up", ifr.Uint16())
			return
		}
		up <- nil
	}()
	if err := <-up; err != nil {
		t.Fatal(err)
	}
	// No child is left: waiting for any child finds none of ours.
	var ws unix.WaitStatus
	if pid, err := unix.Wait4(-1, &ws, unix.WNOHANG|unix.WALL, nil); pid > 0 {
		t.Errorf("a child %d was left (%v)", pid, err)
	}
}

// TestDefaultSignals: a signal this process was started with ignored
// stays ignored across fork and exec, unless DefaultSignals gives the
// child its default action back. The test runs itself again with SIGHUP
// ignored from the start, as nohup would.
func TestDefaultSignals(t *testing.T) {
	if os.Getenv("FORKEXEC_TEST_SIGHUP_IGNORED") == "" {
		cmd := exec.Command("sh", "-c", `trap "" HUP; exec "$@"`, "sh", os.Args[0], "-test.run=^TestDefaultSignals$", "-test.v")
		cmd.Env = append(os.Environ(), "FORKEXEC_TEST_SIGHUP_IGNORED=1")
		if out, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(out), "--- PASS") {
			t.Fatalf("the test with SIGHUP ignored: %v\n%s", err, out)
		}
		return
	}
	for _, tc := range []struct {
		dfl  bool
		want string
	}{{false, "SigIgn:\t0000000000000001\n"}, {true, "SigIgn:\t0000000000000000\n"}} {
		out, ws, err := run(t, Spec{Path: "/bin/grep", Argv: []string{"grep", "SigIgn", "/proc/self/status"}, DefaultSignals: tc.dfl, UID: -1, GID: -1, CgroupFD: -1})
		if err != nil || ws.ExitStatus() != 0 || out != tc.want {
			t.Errorf("DefaultSignals %v: %q %v %v, want %q", tc.dfl, out, ws, err, tc.want)
		}
	}
}
