package netns

import (
	"errors"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"

	"github.com/airlockhq/airlock/internal/testutil"
	"golang.org/x/sys/unix"
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
