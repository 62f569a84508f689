package sandbox

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlockhq/airlock/result"
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

// TestDestroyDuringExec destroys a sandbox while a command runs in it, as
// a session's end or a hung MCP server's does: the exec returns at once,
// the teardown waits for it rather than closing what it still reads, and
// nothing is left.
func TestDestroyDuringExec(t *testing.T) {
	rt := testRuntime(t)
	sb, err := rt.Create(t.Context(), Spec{Limits: DefaultLimits()})
	if err != nil {
		t.Fatal(err)
	}
	trace := traceOf(t, sb)
	got := make(chan *result.Result, 1)
	go func() {
		got <- sb.Exec(context.Background(), ExecRequest{Argv: []string{"sleep", "30"}, Capture: true})
	}()
	time.Sleep(200 * time.Millisecond)
	start := time.Now()
	if err := sb.Destroy(t.Context()); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-got:
		if r.Outcome == result.Exited && r.ExitCode == 0 {
			t.Errorf("the command finished normally: %+v", r)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the exec did not return after Destroy")
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Destroy with an exec in flight took %s", d)
	}
	trace.assertGone(t)
	if r := sb.Exec(t.Context(), ExecRequest{Argv: []string{"true"}}); r.Outcome != result.Error {
		t.Errorf("an exec after Destroy: %+v", r)
	}
}

// TestOnlyLinks checks the scan that decides whether /etc/alternatives is
// bound: only symlinks and a README, and at least one entry.
func TestOnlyLinks(t *testing.T) {
	mk := func(t *testing.T, files ...string) string {
		dir := t.TempDir()
		for _, f := range files {
			p := filepath.Join(dir, strings.TrimSuffix(f, "/"))
			switch {
			case strings.HasSuffix(f, "/"):
				if err := os.Mkdir(p, 0o755); err != nil {
					t.Fatal(err)
				}
			case f == "README" || strings.HasPrefix(f, "file"):
				if err := os.WriteFile(p, nil, 0o644); err != nil {
					t.Fatal(err)
				}
			default:
				if err := os.Symlink("/usr/bin/"+f, p); err != nil {
					t.Fatal(err)
				}
			}
		}
		return dir
	}
	many := []string{"README"}
	for i := range 600 { // more than one read of entries
		many = append(many, fmt.Sprintf("link%03d-with-a-longer-name", i))
	}
	for _, tc := range []struct {
		name  string
		files []string
		want  bool
	}{
		{"links and a README", []string{"awk", "editor", "README"}, true},
		{"many links", many, true},
		{"empty", nil, false},
		{"a regular file", []string{"awk", "file1"}, false},
		{"a directory", []string{"awk", "sub/"}, false},
		{"only a README", []string{"README"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := onlyLinks(mk(t, tc.files...)); got != tc.want {
				t.Errorf("onlyLinks = %v, want %v", got, tc.want)
			}
		})
	}
	if onlyLinks("/nonexistent") {
		t.Error("a missing directory holds only links")
	}
}
