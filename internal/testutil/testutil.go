// Package testutil holds helpers shared by airlock's tests. Only tests
// import it.
package testutil

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// RequireRoot skips a test that needs root (namespaces, cgroups, private
// uid ranges). CI runs as root, so these tests always run there.
func RequireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: sandboxes use user namespaces with private uid ranges, cgroups and network namespaces (CI runs as root)")
	}
}

var (
	// buildMu guards built, and is held across a build so that each
	// package is built once.
	buildMu sync.Mutex
	built   = map[string]string{}
)

// BinDirEnv names a directory of prebuilt binaries, one per main package
// and named after its last element, that Binary returns instead of
// building: the test guest of scripts/test-vm has no go tool.
const BinDirEnv = "AIRLOCK_TEST_BINDIR"

// Binary builds the main package pkg (an import path) without cgo, once per
// test process, and returns the path of the binary. With BinDirEnv set it
// returns the prebuilt binary there instead, and fails when it is missing.
func Binary(t testing.TB, pkg string) string {
	t.Helper()
	if dir := os.Getenv(BinDirEnv); dir != "" {
		p := filepath.Join(dir, filepath.Base(pkg))
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("%s is set, but holds no binary for %s: %v", BinDirEnv, pkg, err)
		}
		return p
	}
	buildMu.Lock()
	defer buildMu.Unlock()
	if p, ok := built[pkg]; ok {
		return p
	}
	dir, err := os.MkdirTemp("", "airlock-test-bin")
	if err != nil {
		t.Fatal(err)
	}
	pkgs := []string{pkg}
	if pkg == airlockPkg {
		// airlock finds its init and airlockd beside itself, as when
		// installed.
		pkgs = append(pkgs, InitPkg, daemonPkg)
	}
	cmd := exec.Command("go", append([]string{"build", "-o", dir + "/"}, pkgs...)...)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatal(fmt.Errorf("build %s: %v: %s", pkg, err, out))
	}
	for _, p := range pkgs {
		built[p] = filepath.Join(dir, filepath.Base(p))
	}
	return built[pkg]
}

const airlockPkg = "github.com/airlockhq/airlock/cmd/airlock"

// daemonPkg carries the commands airlock hands over (serve, mcp, image
// import).
const daemonPkg = "github.com/airlockhq/airlock/cmd/airlockd"

// InitPkg is the init program's package.
const InitPkg = "github.com/airlockhq/airlock/cmd/airlock-init"

// InitPath returns the init program, built once per test process, for a
// runtime's Options.InitPath.
func InitPath(t testing.TB) string { return Binary(t, InitPkg) }

// CgroupRootEnv names a cgroup under which tests put their cgroup parents
// instead of at the root of the hierarchy. scripts/test-vm sets it to run
// the tests as a delegated service would, below its own cgroup.
const CgroupRootEnv = "AIRLOCK_TEST_CGROUP_ROOT"

// CgroupParent returns the cgroup parent a test package uses: name (an
// absolute cgroup path such as "/airlock-test-pool") below the cgroup
// CgroupRootEnv names, or name itself when it is unset.
func CgroupParent(name string) string {
	return strings.TrimSuffix(os.Getenv(CgroupRootEnv), "/") + name
}

// Inode returns the inode number of path (for namespace files, the
// namespace's identity).
func Inode(t testing.TB, path string) uint64 {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return st.Ino
}

// SyncBuffer is a bytes.Buffer that one goroutine may write while
// another reads it (a process's output, a log, an export).
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns what was written so far.
func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// FreeAddr returns a loopback TCP address nothing listens on now, for a
// server a test starts. It is never one this process handed out before,
// and it is drawn at random from below the kernel's ephemeral range, so
// neither a port the kernel gives the next bind(0) (it handed one address
// to two nodes of a test once) nor the source port of some connection
// takes it. Another process can still take it: rare, and the test then
// fails to listen and says so.
func FreeAddr(t testing.TB) string {
	t.Helper()
	freeMu.Lock()
	defer freeMu.Unlock()
	for range 1000 {
		port := freeLow + rand.IntN(freeHigh-freeLow)
		if freeGiven[port] {
			continue
		}
		ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			continue
		}
		ln.Close()
		freeGiven[port] = true
		return ln.Addr().String()
	}
	t.Fatal("no free loopback port in 1000 tries")
	return ""
}

// The ports FreeAddr draws from: below Linux's default ephemeral range
// (32768–60999), above the ports services usually take.
const freeLow, freeHigh = 20000, 32768

var (
	freeMu    sync.Mutex
	freeGiven = map[int]bool{}
)

// DialFrom connects to the TCP address addr from the local address from
// (any 127.0.0.0/8 address is this machine's own), closed when the test
// ends: tests of a listener's share per remote address tell an attacker
// from a caller by their addresses.
func DialFrom(t testing.TB, from, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 10 * time.Second}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("dial %s from %s: %v", addr, from, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// Stall opens n connections to addr from the address from, each sending
// head and then nothing: a header block whose body never comes, or the
// start of one that never ends.
func Stall(t testing.TB, from, addr string, n int, head string) []net.Conn {
	t.Helper()
	conns := make([]net.Conn, n)
	for i := range conns {
		conns[i] = DialFrom(t, from, addr)
		// A connection the listener closed at once may refuse the write.
		_, _ = io.WriteString(conns[i], head)
	}
	return conns
}

// ClosedWithin fails t unless the server has closed every one of conns
// (whatever it answered first) within d.
func ClosedWithin(t testing.TB, conns []net.Conn, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	var open atomic.Int64
	var wg sync.WaitGroup
	for _, c := range conns {
		wg.Go(func() {
			c.SetReadDeadline(deadline)
			if _, err := io.Copy(io.Discard, c); err != nil && os.IsTimeout(err) {
				open.Add(1)
			}
		})
	}
	wg.Wait()
	if open := open.Load(); open > 0 {
		t.Fatalf("%d of %d connections still open after %v", open, len(conns), d)
	}
}

// RunscEnv names the runsc the tests of the gvisor backend use;
// scripts/test builds it, pinned, and sets it.
const RunscEnv = "AIRLOCK_TEST_RUNSC"

// Runsc returns the runsc RunscEnv names. Without it the test is skipped,
// or fails in CI, where the gvisor backend's tests must run.
func Runsc(t testing.TB) string {
	t.Helper()
	p := os.Getenv(RunscEnv)
	if p == "" {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s is not set: scripts/test builds runsc and sets it", RunscEnv)
		}
		t.Skipf("%s is not set: scripts/runsc builds runsc", RunscEnv)
	}
	return p
}
