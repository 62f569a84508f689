package sandbox

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestMounts binds a host directory and file read-only: the sandbox reads
// them and can change nothing, the host's copies stay as they were.
func TestMounts(t *testing.T) {
	dir := openDir(t)
	if err := os.WriteFile(filepath.Join(dir, "code.txt"), []byte("host code\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(openDir(t), "one.txt")
	if err := os.WriteFile(file, []byte("one file\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r := run(t, runOpts{spec: func(s *Spec) {
		s.Mounts = []Mount{{Source: dir, Target: "/srv/code"}, {Source: file, Target: "/opt/one.txt"}}
	}}, "sh", "-c", `cat /srv/code/code.txt /opt/one.txt
echo x > /srv/code/code.txt 2>/dev/null && echo WROTE
echo x > /srv/code/new 2>/dev/null && echo CREATED
rm /srv/code/code.txt 2>/dev/null && echo REMOVED
grep ' /srv/code ' /proc/self/mounts | grep -c 'ro,nosuid,nodev'`)
	if string(r.Stdout) != "host code\none file\n1\n" {
		t.Fatalf("in the sandbox: %q %q", r.Stdout, r.Stderr)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "code.txt")); string(b) != "host code\n" {
		t.Fatalf("the host file changed: %q", b)
	}
	if _, err := os.Stat(filepath.Join(dir, "new")); !os.IsNotExist(err) {
		t.Fatal("a file was created in the host directory")
	}
}

func TestMountsRefused(t *testing.T) {
	rt := testRuntime(t)
	dir := t.TempDir()
	link := filepath.Join(t.TempDir(), "link")
	os.Symlink(dir, link)
	fifo := filepath.Join(t.TempDir(), "fifo")
	mkfifo(t, fifo)
	for _, tt := range []struct {
		m    Mount
		want string
	}{
		{Mount{Source: dir, Target: "/"}, "the root is airlock's"},
		{Mount{Source: dir, Target: "/etc"}, "/etc is built by airlock"},
		{Mount{Source: dir, Target: "/usr/local/x"}, "/usr is built by airlock"},
		{Mount{Source: dir, Target: "/workspace/x"}, "/workspace is built by airlock"},
		{Mount{Source: dir, Target: "/proc/sys"}, "/proc is built by airlock"},
		{Mount{Source: dir, Target: "/srv/../etc"}, "absolute, clean"},
		{Mount{Source: "relative", Target: "/srv/x"}, "absolute, clean"},
		{Mount{Source: link, Target: "/srv/x"}, "is a symlink"},
		{Mount{Source: fifo, Target: "/srv/x"}, "neither a directory nor a regular file"},
		{Mount{Source: "/nonexistent-airlock", Target: "/srv/x"}, "no such file"},
		{Mount{Source: dir, Target: "/srv/x"}, "cannot be traversed by others"}, // t.TempDir's parent is 0700
	} {
		_, err := rt.Create(t.Context(), Spec{Limits: DefaultLimits(), Mounts: []Mount{tt.m}})
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%+v: %v, want ErrInvalid with %q", tt.m, err, tt.want)
		}
	}
}

func mkfifo(t *testing.T, p string) {
	t.Helper()
	if err := syscall.Mkfifo(p, 0o644); err != nil {
		t.Fatal(err)
	}
}

// openDir is a temporary directory others may traverse, as a mount
// source must be (t.TempDir's parent is private).
func openDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "airlock-mount")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}
