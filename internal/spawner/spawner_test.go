package spawner

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlockhq/airlock/internal/linux/netns"
	"github.com/airlockhq/airlock/internal/testutil"
	"golang.org/x/sys/unix"
)

const childArg0 = "spawner-test-child"

func TestMain(m *testing.M) {
	if len(os.Args) == 1 && os.Args[0] == childArg0 {
		// The clone: say where it is, then wait until the test closes
		// the control socket.
		b, _ := os.ReadFile("/proc/self/cgroup")
		fmt.Printf("cgroup %q\n", strings.TrimSpace(string(b)))
		_, _ = unix.Read(3, make([]byte, 1))
		os.Exit(0)
	}
	os.Exit(m.Run())
}

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
// namespace with the requested map, and in the given network namespace.
func TestCloneIntoV2Cgroup(t *testing.T) {
	testutil.RequireRoot(t)
	mnt := cgroup2Mount(t)
	if mnt == "" {
		t.Skip("no cgroup2 mount on this host")
	}
	name := fmt.Sprintf("airlock-spawner-test-%d", os.Getpid())
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
	const base = 1<<30 + 4095*65536 // the last slot; the test holds it only briefly
	req := &Request{Path: "/proc/self/exe", Arg0: childArg0, IDBase: base, IDSize: 65536}
	pid, pidfd, ok, err := Clone(int(hostNet.Fd()), req, pair[1], int(logW.Fd()), int(ns.Fd()), Placement{DirFD: dirFD}, false)
	unix.Close(pair[1])
	logW.Close()
	if !ok || err != nil {
		t.Fatalf("Clone: ok=%v err=%v", ok, err)
	}
	defer func() {
		unix.Close(pair[0]) // the child exits on EOF
		var info unix.Siginfo
		_ = unix.Waitid(unix.P_PIDFD, pidfd, &info, unix.WEXITED, nil)
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
	host, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(host), "0::/"+name+"\n") {
		t.Errorf("host sees the child in %q, want 0::/%s", host, name)
	}
	uidMap, _ := os.ReadFile(fmt.Sprintf("/proc/%d/uid_map", pid))
	if got := strings.Join(strings.Fields(string(uidMap)), " "); got != fmt.Sprintf("0 %d 65536", base) {
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
