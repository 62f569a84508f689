// Package testutil holds helpers shared by airlock's tests. Only tests
// import it.
package testutil

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

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
	buildMu sync.Mutex
	built   = map[string]string{}
)

// Binary builds the main package pkg (an import path) without cgo, once per
// test process, and returns the path of the binary.
func Binary(t testing.TB, pkg string) string {
	t.Helper()
	buildMu.Lock()
	defer buildMu.Unlock()
	if p, ok := built[pkg]; ok {
		return p
	}
	dir, err := os.MkdirTemp("", "airlock-test-bin")
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, filepath.Base(pkg))
	cmd := exec.Command("go", "build", "-o", p, pkg)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatal(fmt.Errorf("build %s: %v: %s", pkg, err, out))
	}
	built[pkg] = p
	return p
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
