package netns

import (
	"errors"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/airlockhq/airlock/internal/testutil"
)

func requireRoot(t *testing.T) { testutil.RequireRoot(t) }

func inode(t *testing.T, path string) uint64 { return testutil.Inode(t, path) }

func TestNewAndRunChildIsolated(t *testing.T) {
	requireRoot(t)
	host := inode(t, "/proc/self/ns/net")
	var cmd *exec.Cmd
	out := &strings.Builder{}
	ns, err := NewAndRun(func() error {
		cmd = exec.Command("ip", "-o", "link")
		cmd.Stdout = out
		return cmd.Start()
	})
	if err != nil {
		if _, lerr := exec.LookPath("ip"); lerr != nil {
			t.Skip("ip(8) not installed")
		}
		t.Fatal(err)
	}
	defer ns.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(ns.Fd()), &st); err != nil {
		t.Fatal(err)
	}
	if st.Ino == host {
		t.Fatalf("new namespace has the host's inode %d", host)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 1 || !strings.Contains(lines[0], "lo:") || !strings.Contains(lines[0], "UP") {
		t.Fatalf("got links %q, want only lo, up", out.String())
	}
	if got := inode(t, "/proc/self/ns/net"); got != host {
		t.Fatalf("process namespace changed to %d, want %d", got, host)
	}
}

func TestNewAndRunErrorClosesNamespace(t *testing.T) {
	requireRoot(t)
	ns, err := NewAndRun(func() error { return os.ErrInvalid })
	if err == nil || ns != nil {
		t.Fatalf("got ns=%v err=%v, want nil and error", ns, err)
	}
}

func TestDoCreatesSocketsInNamespace(t *testing.T) {
	requireRoot(t)
	ns, err := New()
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	var fd int
	err = Do(ns, func() error {
		var err error
		fd, err = unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	// SIOCGSKNS opens the namespace a socket belongs to.
	nsfd, err := unix.IoctlRetInt(fd, unix.SIOCGSKNS)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(nsfd)
	var got, want unix.Stat_t
	if err := unix.Fstat(nsfd, &got); err != nil {
		t.Fatal(err)
	}
	if err := unix.Fstat(int(ns.Fd()), &want); err != nil {
		t.Fatal(err)
	}
	if got.Ino != want.Ino {
		t.Fatalf("socket in namespace %d, want %d", got.Ino, want.Ino)
	}
	if err := Do(ns, func() error { return os.ErrClosed }); err != os.ErrClosed {
		t.Fatalf("Do returned %v, want fn's error", err)
	}
}

// TestThreadsReturnHome makes and enters namespaces from many goroutines
// and then checks from /proc that every thread of the process is back in
// the namespace the process started in.
func TestThreadsReturnHome(t *testing.T) {
	requireRoot(t)
	want, err := os.Readlink("/proc/self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	// Each goroutine makes and enters five namespaces; the first error
	// of each is kept.
	cycle := func() error {
		for range 5 {
			ns, err := New()
			if err != nil {
				return err
			}
			err = Do(ns, func() error { return nil })
			ns.Close()
			if err != nil {
				return err
			}
		}
		return nil
	}
	results := make([]error, 16)
	var wg sync.WaitGroup
	for i := range results {
		wg.Go(func() { results[i] = cycle() })
	}
	wg.Wait()
	if err := errors.Join(results...); err != nil {
		t.Fatal(err)
	}
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	for _, task := range tasks {
		got, err := os.Readlink("/proc/self/task/" + task.Name() + "/ns/net")
		if err != nil {
			continue // the thread has exited
		}
		if got != want {
			t.Errorf("thread %s is in %s, want %s", task.Name(), got, want)
		}
	}
}

// ehashEntries reads net.ipv4.tcp_ehash_entries as a thread inside ns
// sees it: positive for a table of the namespace's own, negative (the
// host's size) for one it shares.
func ehashEntries(t *testing.T, ns *os.File) int {
	t.Helper()
	var n int
	err := Do(ns, func() error {
		b, err := os.ReadFile("/proc/sys/net/ipv4/tcp_ehash_entries")
		if err != nil {
			return err
		}
		n, err = strconv.Atoi(strings.TrimSpace(string(b)))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestOwnTCPTable: a namespace made here has a TCP table of its own, of
// ChildEhashEntries buckets, where the kernel has per-namespace tables;
// one made from the host's namespace shares the host's; and the host's
// own setting for children is left as it was.
func TestOwnTCPTable(t *testing.T) {
	requireRoot(t)
	if _, err := os.Stat("/proc/sys/net/ipv4/tcp_child_ehash_entries"); err != nil {
		t.Skip("no per-namespace TCP tables on this kernel (Linux 6.1 and later)")
	}
	hostChild, err := os.ReadFile("/proc/sys/net/ipv4/tcp_child_ehash_entries")
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := UseTemplate(); !ok || err != nil {
		t.Fatalf("UseTemplate: %v, %v", ok, err)
	}
	ns, err := New()
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	if n := ehashEntries(t, ns); n != ChildEhashEntries {
		t.Errorf("a new namespace's tcp_ehash_entries = %d, want its own %d", n, ChildEhashEntries)
	}
	// The control: a namespace made from the host's shares its table
	// (if the host sets nothing for children).
	if strings.TrimSpace(string(hostChild)) == "0" {
		plain := make(chan *os.File, 1)
		go func() {
			runtime.LockOSThread() // never unlocked: the thread dies with the goroutine
			if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
				plain <- nil
				return
			}
			f, _ := os.Open("/proc/thread-self/ns/net")
			plain <- f
		}()
		f := <-plain
		if f == nil {
			t.Fatal("unshare a control namespace failed")
		}
		defer f.Close()
		if n := ehashEntries(t, f); n >= 0 {
			t.Errorf("a namespace made from the host's reads %d: want the host's shared table (negative)", n)
		}
	}
	if after, err := os.ReadFile("/proc/sys/net/ipv4/tcp_child_ehash_entries"); err != nil || string(after) != string(hostChild) {
		t.Errorf("the host's tcp_child_ehash_entries is %q (%v), was %q", after, err, hostChild)
	}
}
