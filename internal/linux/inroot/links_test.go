package inroot

import (
	"errors"
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// openRoot opens dir as a sandbox's root is opened (O_PATH).
func openRoot(t *testing.T, dir string) *os.File {
	t.Helper()
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	f := os.NewFile(uintptr(fd), dir)
	t.Cleanup(func() { f.Close() })
	return f
}

// TestResolve resolves symlinks as filepath.EvalSymlinks does, with the
// root as "/": absolute targets and ".." stay inside it, and a link
// naming a host path that exists leads nowhere.
func TestResolve(t *testing.T) {
	root, outside := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(outside, "secret"), []byte("s"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(root, "a/b"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "a/b/file"), []byte("x"), 0o640); err != nil {
		t.Fatal(err)
	}
	for l, target := range map[string]string{
		"rel":      "a/b/file",
		"a/abs":    "/a/b",
		"a/b/up":   "../../a",
		"chain":    "a/abs/file",
		"viaup":    "a/b/up/b/file",
		"loop1":    "loop2",
		"loop2":    "loop1",
		"dangling": "nope",
		"dotdot":   "/../../../../a/b/file",
		"host":     filepath.Join(outside, "secret"),
		"hostdir":  outside,
		"rootdir":  "/",
		"empty":    "a/b/file/x",
	} {
		if err := os.Symlink(target, filepath.Join(root, l)); err != nil {
			t.Fatal(err)
		}
	}
	r := NewResolver(openRoot(t, root), 10_000)
	for _, tc := range []struct {
		p, want string
		mode    uint32
	}{
		{"/rel", "/a/b/file", unix.S_IFREG | 0o640},
		{"/a/abs", "/a/b", unix.S_IFDIR | 0o755},
		{"/a/b/up", "/a", unix.S_IFDIR | 0o755},
		{"/chain", "/a/b/file", unix.S_IFREG | 0o640},
		{"/viaup", "/a/b/file", unix.S_IFREG | 0o640},
		{"/dotdot", "/a/b/file", unix.S_IFREG | 0o640},
		{"/rootdir", "/", 0},
		{"/a/abs/../b/file", "/a/b/file", unix.S_IFREG | 0o640},
		{"/loop1", "", 0},
		{"/dangling", "", 0},
		{"/host", "", 0},
		{"/hostdir/secret", "", 0},
		{"/empty", "", 0},
		{"relative", "", 0},
	} {
		got, e, err := r.Resolve(tc.p)
		if tc.want == "" {
			if !errors.Is(err, ErrPath) && !errors.Is(err, ErrNotFound) {
				t.Errorf("Resolve(%q) = %q, %v; want it unresolved", tc.p, got, err)
			}
			continue
		}
		if err != nil || got != tc.want || (tc.mode != 0 && e.Mode&^0o7000 != tc.mode) {
			t.Errorf("Resolve(%q) = %q (mode %#o), %v; want %q (mode %#o)", tc.p, got, e.Mode, err, tc.want, tc.mode)
		}
		// What the host's EvalSymlinks gives for the same path, seen
		// from inside the root, when no absolute link is on the way.
		if !strings.Contains(tc.p, "abs") && tc.p != "/dotdot" && tc.p != "/rootdir" && tc.p != "/chain" {
			host, err := filepath.EvalSymlinks(filepath.Join(root, tc.p))
			if err != nil || host != filepath.Join(root, tc.want) {
				t.Errorf("EvalSymlinks(%q) = %q, %v; Resolve gave %q", tc.p, host, err, got)
			}
		}
	}
}

// TestResolveBudget: a resolution stops when the lookups its caller
// allows are spent.
func TestResolveBudget(t *testing.T) {
	root := t.TempDir()
	prev := "end"
	if err := os.WriteFile(filepath.Join(root, prev), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 10; i++ {
		l := "l" + string(rune('a'+i))
		if err := os.Symlink(prev, filepath.Join(root, l)); err != nil {
			t.Fatal(err)
		}
		prev = l
	}
	if got, _, err := NewResolver(openRoot(t, root), 11).Resolve("/" + prev); err != nil || got != "/end" {
		t.Errorf("with enough lookups: %q, %v", got, err)
	}
	if got, _, err := NewResolver(openRoot(t, root), 10).Resolve("/" + prev); !errors.Is(err, ErrUnresolved) {
		t.Errorf("with a lookup short: %q, %v; want ErrUnresolved", got, err)
	}
}

// TestResolveNotInProc: nothing is looked up in a procfs, whose links
// (/proc/self/cwd), read from the host, name the host's paths.
func TestResolveNotInProc(t *testing.T) {
	proc := openRoot(t, "/proc")
	if got, _, err := NewResolver(proc, 100).Resolve("/self/cwd"); !errors.Is(err, ErrUnresolved) {
		t.Errorf("Resolve in /proc = %q, %v; want ErrUnresolved", got, err)
	}
	if b, err := ReadFileIn(proc, "/cpuinfo", 1<<20); !errors.Is(err, ErrUnresolved) {
		t.Errorf("ReadFileIn in /proc = %d bytes, %v; want ErrUnresolved", len(b), err)
	}
}

func TestReadFileIn(t *testing.T) {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "etc"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "etc/passwd"), []byte("root:x:0:0::/root:/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc/shadow", filepath.Join(root, "etc/group")); err != nil {
		t.Fatal(err)
	}
	r := openRoot(t, root)
	if b, err := ReadFileIn(r, "/etc/passwd", 100); err != nil || !strings.HasPrefix(string(b), "root:") {
		t.Errorf("ReadFileIn: %q, %v", b, err)
	}
	if _, err := ReadFileIn(r, "/etc/passwd", 10); !errors.Is(err, ErrTooLarge) {
		t.Errorf("over the bound: %v, want ErrTooLarge", err)
	}
	if _, err := ReadFileIn(r, "/etc/group", 100); !errors.Is(err, ErrPath) {
		t.Errorf("a symlink: %v, want ErrPath (never followed)", err)
	}
	if _, err := ReadFileIn(r, "/etc", 100); !errors.Is(err, ErrNotRegular) {
		t.Errorf("a directory: %v, want ErrNotRegular", err)
	}
}

// FuzzEvalSymlinks resolves over a small made-up tree whose links hold
// what the fuzzer gives: the answer, when there is one, is a clean
// absolute path of the tree, and the lookups stay within the budget.
func FuzzEvalSymlinks(f *testing.F) {
	f.Add("/l", "a/b", "../../l")
	f.Add("/a/m/x", "/a/m", "/l/../a")
	f.Add("/l/b/f", "a", "..")
	f.Fuzz(func(t *testing.T, p, t1, t2 string) {
		files := map[string]bool{"/a": true, "/a/b": true, "/a/b/f": false}
		links := map[string]string{"/l": t1, "/a/m": t2}
		calls := 0
		look := func(dir, name string) (bool, string, error) {
			calls++
			if isDir, ok := files[dir]; dir != "/" && (!ok || !isDir) {
				return false, "", ErrNotFound
			}
			p := path.Join(dir, name)
			if target, ok := links[p]; ok {
				return true, target, nil
			}
			if _, ok := files[p]; ok {
				return false, "", nil
			}
			return false, "", ErrNotFound
		}
		steps := 300
		got, err := evalSymlinks(p, look, &steps)
		if calls > 300 || steps < 0 {
			t.Fatalf("%d lookups, %d left", calls, steps)
		}
		if err != nil {
			return
		}
		if _, ok := files[got]; got != path.Clean(got) || (got != "/" && !ok) {
			t.Fatalf("evalSymlinks(%q) = %q", p, got)
		}
	})
}
