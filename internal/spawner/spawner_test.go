package spawner

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/airlockhq/airlock/internal/linux/netns"
	"github.com/airlockhq/airlock/internal/testutil"
	"golang.org/x/sys/unix"
)

const childArg0 = "spawner-test-child"

func TestMain(m *testing.M) {
	if len(os.Args) == 1 && os.Args[0] == childArg0 {
		// The clone: say where it is and who, then wait until the test
		// closes the control socket.
		b, _ := os.ReadFile("/proc/self/cgroup")
		fmt.Printf("cgroup %q %s\n", strings.TrimSpace(string(b)), identity())
		_, _ = unix.Read(3, make([]byte, 1))
		os.Exit(0)
	}
	if os.Getenv(clonerEnv) == "1" {
		os.Exit(cloner())
	}
	os.Exit(m.Run())
}

// clonerEnv makes the test binary clone one child as the spawner does,
// as a sibling (CLONE_PARENT): the test process is then its parent.
const clonerEnv = "SPAWNER_TEST_CLONER"

// cloner clones with the descriptors it was given (3 control socket, 4
// log, 5 network namespace, 6 host network namespace, 7 cgroup directory)
// and prints the child's pid.
func cloner() int {
	req := &Request{Path: "/proc/self/exe", Arg0: childArg0, IDBase: testBase, IDSize: 65536}
	pid, pidfd, ok, err := Clone(6, req, 3, 4, 5, Placement{DirFD: 7}, true)
	if !ok || err != nil {
		fmt.Printf("error ok=%v %v\n", ok, err)
		return 1
	}
	unix.Close(pidfd)
	fmt.Printf("%d\n", pid)
	return 0
}

// identity describes the calling process: its uid and gid lines, its
// supplementary groups, and what its descriptors 0 to 3 are.
func identity() string {
	st, _ := os.ReadFile("/proc/self/status")
	var out []string
	for _, line := range strings.Split(string(st), "\n") {
		for _, k := range []string{"Uid:", "Gid:", "Groups:"} {
			if strings.HasPrefix(line, k) {
				out = append(out, strings.Join(strings.Fields(line), " "))
			}
		}
	}
	// The Go runtime opens /dev/null on a closed 0, 1 or 2 at start.
	var fds []string
	for fd := range 4 {
		l, err := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", fd))
		if err != nil {
			l = "closed"
		} else if fd > 0 {
			l = strings.Split(l, ":")[0] // pipe:[ino], socket:[ino]
		}
		fds = append(fds, l)
	}
	return strings.Join(out, ", ") + ", fds " + strings.Join(fds, " ")
}

// testBase is the uid range the tests map: the last slot, held only
// briefly.
const testBase = 1<<30 + 4095*65536

// cgroup2Mount finds a cgroup2 mount point, or "".
func cgroup2Mount(t *testing.T) string {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		pre, post, ok := strings.Cut(line, " - ")
		f, g := strings.Fields(pre), strings.Fields(post)
		if ok && len(f) > 4 && len(g) > 0 && g[0] == "cgroup2" {
			return f[4]
		}
	}
	return ""
}

func inode(t *testing.T, path string) uint64 { return testutil.Inode(t, path) }

// TestCloneIntoV2Cgroup clones through the cgroup v2 path
// (CLONE_INTO_CGROUP) that sandboxes use on v2 hosts, into a cgroup that
// needs no controllers, and checks from the host that the child was born
// in that cgroup with its cgroup namespace rooted there, in its own user
// namespace with the requested map, as uid and gid 0 with no
// supplementary groups, with its log and control socket on descriptors 1
// to 3 and stdin closed (the Go runtime reopens it on /dev/null), and in the
// given network namespace. It clones both as the host does for itself and
// as the spawner does for the host (CLONE_PARENT, which clone3 accepts
// only without an exit signal).
func TestCloneIntoV2Cgroup(t *testing.T) {
	testutil.RequireRoot(t)
	mnt := cgroup2Mount(t)
	if mnt == "" {
		t.Skip("no cgroup2 mount on this host")
	}
	for _, sibling := range []bool{false, true} {
		t.Run(fmt.Sprintf("sibling=%v", sibling), func(t *testing.T) { cloneIntoV2(t, mnt, sibling) })
	}
}

func cloneIntoV2(t *testing.T, mnt string, sibling bool) {
	name := fmt.Sprintf("airlock-spawner-test-%d-%v", os.Getpid(), sibling)
	dir := filepath.Join(mnt, name)
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Skipf("cannot create a cgroup under %s: %v", mnt, err)
	}
	t.Cleanup(func() { unix.Rmdir(dir) })
	dirFD, err := unix.Open(dir, unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(dirFD)
	ns, err := netns.New()
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	hostNet, err := os.Open("/proc/self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	defer hostNet.Close()
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(pair[0])
	logR, logW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer logR.Close()
	var pid, pidfd int
	if sibling {
		ctrl := os.NewFile(uintptr(pair[1]), "ctrl")
		cg := os.NewFile(uintptr(dirFD), "cgroup")
		c := exec.Command(os.Args[0])
		c.Env = append(os.Environ(), clonerEnv+"=1")
		c.ExtraFiles = []*os.File{ctrl, logW, ns, hostNet, cg}
		c.Stderr = os.Stderr
		out, err := c.Output()
		ctrl.Close()
		if err != nil {
			t.Fatalf("cloner: %v: %s", err, out)
		}
		if pid, err = strconv.Atoi(strings.TrimSpace(string(out))); err != nil {
			t.Fatalf("cloner said %q", out)
		}
		// CLONE_PARENT: the clone is this process's child.
		if pidfd, err = unix.PidfdOpen(pid, 0); err != nil {
			t.Fatal(err)
		}
	} else {
		req := &Request{Path: "/proc/self/exe", Arg0: childArg0, IDBase: testBase, IDSize: 65536}
		var ok bool
		pid, pidfd, ok, err = Clone(int(hostNet.Fd()), req, pair[1], int(logW.Fd()), int(ns.Fd()), Placement{DirFD: dirFD}, false)
		unix.Close(pair[1])
		if !ok || err != nil {
			t.Fatalf("Clone: ok=%v err=%v", ok, err)
		}
	}
	logW.Close()
	defer func() {
		unix.Close(pair[0]) // the child exits on EOF
		var info unix.Siginfo
		if err := unix.Waitid(unix.P_PIDFD, pidfd, &info, unix.WEXITED, nil); err != nil {
			t.Errorf("reap the clone: %v (is it this process's child?)", err)
		}
		unix.Close(pidfd)
	}()
	line, err := bufio.NewReader(logR).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	// Inside: its cgroup namespace is rooted at the cgroup it was born in.
	if want := "cgroup \"0::/\""; !strings.Contains(line, `0::/"`) {
		t.Errorf("child sees %s, want %s", strings.TrimSpace(line), want)
	}
	if want := "Uid: 0 0 0 0, Gid: 0 0 0 0, Groups:, fds /dev/null pipe pipe socket"; !strings.Contains(line, want) {
		t.Errorf("child says %s, want %s", strings.TrimSpace(line), want)
	}
	host, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(host), "0::/"+name+"\n") {
		t.Errorf("host sees the child in %q, want 0::/%s", host, name)
	}
	uidMap, _ := os.ReadFile(fmt.Sprintf("/proc/%d/uid_map", pid))
	if got := strings.Join(strings.Fields(string(uidMap)), " "); got != fmt.Sprintf("0 %d 65536", testBase) {
		t.Errorf("uid_map %q", got)
	}
	if got, want := inode(t, fmt.Sprintf("/proc/%d/ns/net", pid)), inode(t, fmt.Sprintf("/proc/self/fd/%d", ns.Fd())); got != want {
		t.Errorf("child in network namespace %d, want %d", got, want)
	}
	if got, host := inode(t, fmt.Sprintf("/proc/%d/ns/user", pid)), inode(t, "/proc/self/ns/user"); got == host {
		t.Errorf("child shares the host's user namespace")
	}
	if got, host := inode(t, "/proc/thread-self/ns/net"), inode(t, fmt.Sprintf("/proc/self/fd/%d", hostNet.Fd())); got != host {
		t.Errorf("cloning left this thread in another network namespace")
	}
}
