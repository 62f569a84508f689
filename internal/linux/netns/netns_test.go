package netns

import (
	"os"
	"os/exec"
	"strings"
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
