package sandbox

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/linux/cgroup"
	"github.com/airlockhq/airlock/internal/sbinit"
	"github.com/airlockhq/airlock/result"
	"golang.org/x/sys/unix"
)

// The tests here attack counts the kernel keeps per user or for the whole
// host rather than per cgroup: a sandbox takes all it can of one, holds
// it, and the host checks that it, and other sandboxes, are unharmed.

// holding starts the test program with args in a new sandbox and returns
// the first line it prints, decoded, while it holds what it took; the
// sandbox is destroyed when the test ends.
func holding(t *testing.T, l *Limits, args ...string) (report, *Sandbox) {
	t.Helper()
	if l == nil {
		// The command holds what it took until the test ends: its time
		// is the test's, up to the wait for its report below (an
		// emulated guest took over 20 s to fill the inotify bound).
		l = limits(func(l *Limits) { l.Time = 3 * time.Minute })
	}
	sb, err := testRuntime(t).Create(t.Context(), Spec{Limits: *l})
	if err != nil {
		t.Fatal(err)
	}
	pr, pw := io.Pipe()
	done := make(chan struct{})
	go func() {
		defer close(done)
		r := sb.Exec(t.Context(), ExecRequest{Argv: withProg(args...), Stdin: bytes.NewReader(testProg(t)), Stdout: pw, Stderr: os.Stderr})
		pw.CloseWithError(fmt.Errorf("the command ended: %s %s", r.Outcome, r.Error))
	}()
	t.Cleanup(func() {
		_ = sb.Destroy(t.Context())
		pr.Close()
		<-done
	})
	lines := make(chan string, 1)
	errs := make(chan error, 1)
	go func() {
		line, err := bufio.NewReader(pr).ReadString('\n')
		if err != nil {
			errs <- err
			return
		}
		lines <- line
	}()
	select {
	case line := <-lines:
		var rep report
		if err := json.Unmarshal([]byte(line), &rep); err != nil {
			t.Fatalf("%v: bad report %q: %v", args, line, err)
		}
		return rep, sb
	case err := <-errs:
		t.Fatalf("%v: %v", args, err)
	case <-time.After(2 * time.Minute):
		t.Fatalf("%v: no report", args)
	}
	return report{}, nil
}

// TestInotifyIsTheSandboxs: a sandbox takes every inotify instance and
// watch it can. The kernel counts both per user, and charges a user
// namespace's use at the host's level to the namespace's owner: with
// host root as owner, one sandbox's use was all of root's, and root's
// own inotify_init1 then failed with EMFILE, its inotify_add_watch with
// ENOSPC (systemd's path units, file watchers, tail -f). The sandbox's
// user namespace is owned by its own host uid.
func TestInotifyIsTheSandboxs(t *testing.T) {
	rep, sb := holding(t, nil, "hold-inotify")
	var instances, watches int
	if _, err := fmt.Sscan(rep.Value, &instances, &watches); err != nil || !rep.OK {
		t.Fatalf("inotify hog: %+v", rep)
	}
	t.Logf("the sandbox holds %d inotify instances and %d watches (refused with errno %d)", instances, watches, rep.Errno)
	if instances == 0 || rep.Errno != int(unix.ENOSPC) {
		t.Fatalf("the sandbox did not reach its watch bound: %+v", rep)
	}
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC)
	if err != nil {
		t.Fatalf("the host's inotify_init1 while the sandbox holds %d instances: %v", instances, err)
	}
	defer unix.Close(fd)
	if _, err := unix.InotifyAddWatch(fd, "/", unix.IN_MODIFY); err != nil {
		t.Fatalf("the host's inotify_add_watch while the sandbox holds %d watches: %v", watches, err)
	}
	if owner := nsOwner(t, sb.pid); owner != sb.ids.base {
		t.Fatalf("the sandbox's user namespace is owned by host uid %d, want its own root's %d", owner, sb.ids.base)
	}
}

// nsOwner returns the host uid owning the user namespace of pid.
func nsOwner(t *testing.T, pid int) uint32 {
	t.Helper()
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/ns/user")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	const nsGetOwnerUID = 0xb704 // _IO(0xb7, 0x4)
	uid, e := ioctlUint32(f.Fd(), nsGetOwnerUID)
	if e != 0 {
		t.Fatalf("NS_GET_OWNER_UID: %v", e)
	}
	return uid
}

// TestAIORefused: io_setup reserves events against one count for the
// whole host (fs.aio-max-nr); one sandbox reserved all of it and the
// host's own io_setup failed. A sandbox gets ENOSYS, as from a kernel
// without AIO, while the host's io_setup works.
func TestAIORefused(t *testing.T) {
	rep, _ := attack(t, "io-setup", "65536")
	if rep.OK || rep.Errno != int(unix.ENOSYS) {
		t.Fatalf("io_setup in the sandbox: %+v, want ENOSYS", rep)
	}
	ctx, e := ioSetup(128)
	if e != 0 {
		t.Fatalf("the host's io_setup: %v", e)
	}
	unix.Syscall(unix.SYS_IO_DESTROY, ctx, 0, 0)
}

// TestPtysBounded: every devpts instance but the host's draws on one count
// (kernel.pty.max less the host's reserve). One sandbox opened 3,071 ptys
// and the next sandbox could open none. Each sandbox's instance has a
// bound of its own, and a second sandbox opens as many as the first.
func TestPtysBounded(t *testing.T) {
	for i := range 2 {
		rep, _ := holding(t, nil, "hold-ptys")
		if rep.Value != strconv.Itoa(sbinit.PtyMax) || rep.Errno != int(unix.ENOSPC) {
			t.Fatalf("sandbox %d opened %s ptys (errno %d), want %d and then ENOSPC", i+1, rep.Value, rep.Errno, sbinit.PtyMax)
		}
	}
}

// TestTCPBuffersBounded: a 64 MiB sandbox fills 108 loopback TCP
// connections it never reads. On cgroup v1 socket buffers had no ceiling
// (memory.kmem.tcp unlimited): it held about 400 MiB of the host's TCP
// memory (tcp_mem is one pool for every socket on the host, airlock's
// own gateway and broker among them). Now the host's TCP memory in use
// grows by no more than the sandbox's memory ceiling, sampled while the
// sandbox fills it: on v1 its socket buffers stop at their own ceiling
// and it holds them; on v2 they count in memory.current, and the memory
// ceiling ends the sandbox (a memory breach).
func TestTCPBuffersBounded(t *testing.T) {
	before := tcpMem(t)
	sb, err := testRuntime(t).Create(t.Context(), Spec{Limits: *limits(func(l *Limits) { l.Memory = 64 << 20 })})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Destroy(t.Context())
	done := make(chan *result.Result, 1)
	var out bytes.Buffer
	pr, pw := io.Pipe()
	go func() {
		r := sb.Exec(t.Context(), ExecRequest{Argv: withProg("hold-tcp", "108"), Stdin: bytes.NewReader(testProg(t)), Stdout: pw, Stderr: os.Stderr})
		pw.Close()
		done <- r
	}()
	line := make(chan struct{})
	go func() {
		_, _ = bufio.NewReader(io.TeeReader(pr, &out)).ReadString('\n')
		close(line)
		_, _ = io.Copy(io.Discard, pr)
	}()
	peak := before
	var r *result.Result
	timeout := time.After(2 * time.Minute)
	for held := false; r == nil && !held; {
		select {
		case r = <-done:
		case <-line:
			held = true
		case <-timeout:
			t.Fatal("the sandbox neither held its sockets nor ended")
		case <-time.After(5 * time.Millisecond):
		}
		peak = max(peak, tcpMem(t))
	}
	grew := peak - before
	t.Logf("report %q, outcome %+v; the host's TCP memory grew by %d MiB at most", strings.TrimSpace(out.String()), r, grew>>20)
	if grew > 64<<20+16<<20 {
		t.Fatalf("the host's TCP memory grew by %d MiB for a 64 MiB sandbox", grew>>20)
	}
	if r != nil && (r.Outcome != result.LimitExceeded || r.Limit == nil || r.Limit.Name != result.LimitMemory) {
		t.Fatalf("the sandbox ended but not at its memory ceiling: %+v", r)
	}
}

// TestTCPBuffersHostWide: the host's TCP memory (net.ipv4.tcp_mem) is one
// count for every TCP socket on the host, far below what the sandboxes'
// memory ceilings add up to: about nine 256 MiB sandboxes holding
// loopback pairs they never read pushed it past its hard limit, and every
// TCP socket on the host, the daemon's API and sshd's included, stalled.
// Here more sandboxes than that each fill what they can; their memory
// ceilings add up to more than the host's memory (no budget bounds
// them), so that their shares of the socket ceiling add up to more than
// it too and the cgroup parent's own limit is what holds. The host's TCP
// memory stays under the sandboxes' socket ceiling, so under the
// pressure threshold, and a TCP connection of the host's moves a MiB.
func TestTCPBuffersHostWide(t *testing.T) {
	rt := testRuntime(t)
	if rt.cg.Version() != cgroup.V1 {
		t.Skip("on cgroup v2 no kernel limit holds socket buffers apart from memory: the readings do, each sandbox to its share (TestTCPSocketsReadV2)")
	}
	pressure := tcpMemPressure(t)
	if rt.sockets <= 0 || rt.sockets >= pressure {
		t.Fatalf("the sandboxes' socket ceiling is %d MiB, want some under the host's pressure threshold of %d MiB", rt.sockets>>20, pressure>>20)
	}
	// Each fills up to 40 pairs of about 3.7 MiB each: all of them
	// together, unbounded, about 1.8 GiB, past the pressure threshold
	// here (1.5 GiB) and short of the hard limit (2.2 GiB), so that a
	// run without the bound does not stall the whole host for long.
	const sandboxes, pairs = 12, "40"
	mem := rt.sockBudget / sandboxes * 3 / 2
	before := tcpMem(t)
	peak := before
	held := 0
	for i := range sandboxes {
		rep, _ := holding(t, limits(func(l *Limits) { l.Memory = mem }), "hold-tcp", pairs)
		if v, err := strconv.Atoi(rep.Value); err == nil {
			held += v
		}
		peak = max(peak, tcpMem(t))
		t.Logf("sandbox %d holds; the host's TCP memory is %d MiB", i+1, tcpMem(t)>>20)
	}
	t.Logf("%d sandboxes wrote %d MiB into unread sockets; the host's TCP memory grew from %d to %d MiB at most (socket ceiling %d MiB, pressure at %d MiB)",
		sandboxes, held>>20, before>>20, peak>>20, rt.sockets>>20, pressure>>20)
	if peak >= pressure {
		t.Fatalf("the host's TCP memory reached %d MiB, past its pressure threshold of %d MiB", peak>>20, pressure>>20)
	}
	if grew := peak - before; grew > rt.sockets+16<<20 {
		t.Fatalf("the host's TCP memory grew by %d MiB, over the sandboxes' socket ceiling of %d MiB", grew>>20, rt.sockets>>20)
	}
	hostTCPWorks(t)
}

// TestTCPUnacceptedBounded: the kernel charges a socket's buffers to the
// cgroup of the process that created or accepted it, so connections a
// sandbox's listeners never accept are charged to no cgroup, and neither
// the sandbox's ceiling nor the parent's holds what is queued on them. A
// 64 MiB sandbox connects 320 clients to listeners with 8 MiB receive
// buffers and fills them: unbounded, it held 748 MiB of the host's TCP
// memory when its 20 s ran out, and was still taking more (outside a
// sandbox, 200 such connections took 1.07 GiB at once). The monitor reads
// the sandbox's sockets and ends it at its bound (a memory breach, its
// ceiling the bound); the host's TCP memory stays under the threshold.
func TestTCPUnacceptedBounded(t *testing.T) {
	rt := testRuntime(t)
	pressure := tcpMemPressure(t)
	before := tcpMem(t)
	sb, err := rt.Create(t.Context(), Spec{Limits: *limits(func(l *Limits) { l.Memory = 64 << 20 })})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Destroy(t.Context())
	if sb.unheld <= 0 {
		t.Fatalf("the sandbox's unaccepted connections have no bound")
	}
	done := make(chan *result.Result, 1)
	go func() {
		done <- sb.Exec(t.Context(), ExecRequest{Argv: withProg("hold-tcp-unaccepted", "320"), Stdin: bytes.NewReader(testProg(t)), Stdout: io.Discard, Stderr: os.Stderr})
	}()
	peak := before
	var r *result.Result
	timeout := time.After(2 * time.Minute)
	for r == nil {
		select {
		case r = <-done:
		case <-timeout:
			t.Fatal("the sandbox's command neither ended nor was ended")
		case <-time.After(5 * time.Millisecond):
		}
		if peak = max(peak, tcpMem(t)); peak >= pressure {
			// Ended at once: the whole host is short of TCP memory.
			t.Fatalf("the host's TCP memory reached %d MiB, past its pressure threshold of %d MiB", peak>>20, pressure>>20)
		}
	}
	t.Logf("outcome %s %+v; the host's TCP memory grew from %d to %d MiB at most (pressure at %d MiB)", r.Outcome, r.Limit, before>>20, peak>>20, pressure>>20)
	// v2 charges the buffers of connections not accepted yet to the
	// sandbox's memory (6.1 did, in the guest), so there its memory
	// ceiling may be what ends it first; v1 charges them to no group.
	// On v2 the readings hold all its TCP sockets to its share too, which
	// these connections may pass first.
	atMemory := rt.cg.Version() == cgroup.V2 && r.Limit != nil && (r.Limit.Ceiling == 64<<20 || r.Limit.Ceiling == sb.allSockets)
	if r.Outcome != result.LimitExceeded || r.Limit == nil || r.Limit.Name != result.LimitMemory || (r.Limit.Ceiling != sb.unheld && !atMemory) {
		t.Fatalf("the sandbox was not ended at its bound on unaccepted connections (%d bytes) nor (v2) at its memory ceiling or its sockets' share: %s %+v", sb.unheld, r.Outcome, r.Limit)
	}
}

// TestTCPUnacceptedBetweenCommands: a session's command starts the same
// attack in the background and returns, so no command's monitor runs
// while it fills. The sandbox is killed (the next command finds it gone),
// and the host's TCP memory stays under its pressure threshold.
func TestTCPUnacceptedBetweenCommands(t *testing.T) {
	rt := testRuntime(t)
	pressure := tcpMemPressure(t)
	before := tcpMem(t)
	sb, err := rt.Create(t.Context(), Spec{Limits: *limits(func(l *Limits) { l.Memory = 64 << 20 })})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Destroy(t.Context())
	r := sb.Exec(t.Context(), ExecRequest{
		Argv:      []string{"/bin/sh", "-c", `cat > /workspace/t && chmod +x /workspace/t && { /workspace/t hold-tcp-unaccepted 320 >/dev/null 2>&1 & }`},
		Stdin:     bytes.NewReader(testProg(t)),
		KeepAlive: true,
	})
	if r.Outcome != result.Exited || r.ExitCode != 0 {
		t.Fatalf("starting the attack: %s %+v %s", r.Outcome, r.Limit, r.Error)
	}
	peak := before
	deadline := time.After(30 * time.Second)
	for alive := true; alive; {
		select {
		case <-sb.dead:
			alive = false
		case <-deadline:
			t.Fatalf("the sandbox still lives, its unaccepted connections holding the host's TCP memory (%d MiB now)", tcpMem(t)>>20)
		case <-time.After(5 * time.Millisecond):
		}
		if peak = max(peak, tcpMem(t)); peak >= pressure {
			t.Fatalf("the host's TCP memory reached %d MiB, past its pressure threshold of %d MiB", peak>>20, pressure>>20)
		}
	}
	t.Logf("the sandbox was killed; the host's TCP memory grew from %d to %d MiB at most (pressure at %d MiB)", before>>20, peak>>20, pressure>>20)
	if r := sb.Exec(t.Context(), ExecRequest{Argv: []string{"true"}}); r.Outcome != result.Error {
		t.Fatalf("a command after the kill: %s, want an error (the sandbox is gone)", r.Outcome)
	}
}

// hostTCPWorks moves a MiB over a loopback TCP connection of the host's.
func hostTCPWorks(t *testing.T) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	got := make(chan int64, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			got <- -1
			return
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(20 * time.Second))
		n, _ := io.Copy(io.Discard, c)
		got <- n
	}()
	c, err := net.DialTimeout("tcp", ln.Addr().String(), 10*time.Second)
	if err != nil {
		t.Fatalf("the host's loopback TCP: %v", err)
	}
	c.SetDeadline(time.Now().Add(20 * time.Second))
	if _, err := c.Write(make([]byte, 1<<20)); err != nil {
		t.Fatalf("the host's loopback TCP: write: %v", err)
	}
	c.Close()
	if n := <-got; n != 1<<20 {
		t.Fatalf("the host's loopback TCP moved %d bytes of 1 MiB", n)
	}
}

// tcpMemPressure is the host's TCP pressure threshold (tcp_mem[1]), in
// bytes.
func tcpMemPressure(t *testing.T) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/sys/net/ipv4/tcp_mem")
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(b))
	if len(f) != 3 {
		t.Fatalf("tcp_mem %q", b)
	}
	n, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return n * int64(os.Getpagesize())
}

// tcpMem is the host's TCP memory in use (the "mem" pages of the TCP line
// of /proc/net/sockstat), in bytes.
func tcpMem(t *testing.T) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/net/sockstat")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || f[0] != "TCP:" {
			continue
		}
		for i := 1; i+1 < len(f); i++ {
			if f[i] == "mem" {
				n, err := strconv.ParseInt(f[i+1], 10, 64)
				if err != nil {
					t.Fatal(err)
				}
				return n * int64(os.Getpagesize())
			}
		}
	}
	t.Fatal("no TCP mem in /proc/net/sockstat")
	return 0
}

// TestTCPSocketsReadV2: on cgroup v2 a sandbox's socket buffers count in
// its memory ceiling only, far above its share of the host's TCP memory
// (all sandboxes' memory ceilings together pass tcp_mem many times over).
// Its TCP sockets are read while it runs, and a command that fills unread
// loopback pairs past its share is ended by it: a memory breach whose
// ceiling is the share, the host's TCP memory under its pressure
// threshold. Unbounded, the sandbox held what its 256 MiB allowed.
func TestTCPSocketsReadV2(t *testing.T) {
	rt := testRuntime(t)
	if rt.cg.Version() != cgroup.V2 {
		t.Skip("on cgroup v1 the kernel holds socket buffers to the share (TestTCPBuffersHostWide)")
	}
	pressure := tcpMemPressure(t)
	before := tcpMem(t)
	sb, err := rt.Create(t.Context(), Spec{Limits: *limits(func(l *Limits) { l.Memory = 256 << 20 })})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Destroy(t.Context())
	if sb.allSockets <= 0 || sb.allSockets >= 64<<20 {
		t.Fatalf("the sandbox's share of the host's TCP memory is %d bytes, want some far under its memory ceiling", sb.allSockets)
	}
	done := make(chan *result.Result, 1)
	go func() {
		done <- sb.Exec(t.Context(), ExecRequest{Argv: withProg("hold-tcp", "40"), Stdin: bytes.NewReader(testProg(t)), Stdout: io.Discard, Stderr: os.Stderr})
	}()
	peak := before
	var r *result.Result
	timeout := time.After(2 * time.Minute)
	for r == nil {
		select {
		case r = <-done:
		case <-timeout:
			t.Fatal("the sandbox's command neither ended nor was ended")
		case <-time.After(5 * time.Millisecond):
		}
		peak = max(peak, tcpMem(t))
	}
	t.Logf("outcome %s %+v; the host's TCP memory grew from %d to %d MiB at most (share %d MiB, pressure at %d MiB)", r.Outcome, r.Limit, before>>20, peak>>20, sb.allSockets>>20, pressure>>20)
	if r.Outcome != result.LimitExceeded || r.Limit == nil || r.Limit.Name != result.LimitMemory || r.Limit.Ceiling != sb.allSockets {
		t.Fatalf("the sandbox was not ended at its share of the host's TCP memory (%d bytes): %s %+v", sb.allSockets, r.Outcome, r.Limit)
	}
	if peak >= pressure {
		t.Fatalf("the host's TCP memory reached %d MiB, past its pressure threshold of %d MiB", peak>>20, pressure>>20)
	}
}
