package inroot

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// opsRoot makes a workspace with a file, a directory tree, and symlinks a
// sandbox could plant: to a directory outside and to a file outside.
func opsRoot(t *testing.T) (ws *os.File, root, outside string) {
	t.Helper()
	root, outside = t.TempDir(), t.TempDir()
	for _, f := range []string{"a.txt", "d/b.txt", "d/e/c.txt"} {
		p := filepath.Join(root, f)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(outside, "secret"), []byte("s"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(root, "out")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(outside, "secret"), filepath.Join(root, "secret")); err != nil {
		t.Fatal(err)
	}
	ws, err := os.Open(root)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ws.Close() })
	return ws, root, outside
}

// TestOpsStayInside tries each operation on the workspace, and through
// the planted symlinks: a symlink is described, listed, removed or moved
// as itself, and never followed out.
func TestOpsStayInside(t *testing.T) {
	ws, root, outside := opsRoot(t)
	if e, err := Stat(ws, "secret"); err != nil || !e.IsSymlink() || e.Target != filepath.Join(outside, "secret") {
		t.Errorf("Stat of a symlink: %+v %v, want the link itself", e, err)
	}
	if e, err := Stat(ws, "d/e/c.txt"); err != nil || !e.IsRegular() || e.Size != 1 || e.Name != "c.txt" {
		t.Errorf("Stat of a file: %+v %v", e, err)
	}
	for _, tc := range []struct {
		name string
		err  error
		fn   func() error
	}{
		{"stat through a symlink", ErrPath, func() error { _, err := Stat(ws, "out/secret"); return err }},
		{"list a symlink", ErrPath, func() error { _, err := ReadDir(ws, "out", 1); return err }},
		{"list through a symlink", ErrPath, func() error { _, err := ReadDir(ws, "out/x", 1); return err }},
		{"make a directory through a symlink", ErrPath, func() error { _, err := Mkdir(ws, "out/new", -1, -1); return err }},
		{"make a directory where a symlink is", ErrPath, func() error { _, err := Mkdir(ws, "out", -1, -1); return err }},
		{"make a directory where a file is", ErrExists, func() error { _, err := Mkdir(ws, "a.txt/x", -1, -1); return err }},
		{"remove through a symlink", ErrPath, func() error { return Remove(ws, "out/secret") }},
		{"move out through a symlink", ErrPath, func() error { return Rename(ws, "a.txt", "out/a.txt") }},
		{"move in through a symlink", ErrPath, func() error { return Rename(ws, "out/secret", "stolen") }},
		{"dot-dot", ErrPath, func() error { _, err := Stat(ws, "../x"); return err }},
		{"absolute", ErrPath, func() error { return Remove(ws, "/etc/passwd") }},
		{"missing", ErrNotFound, func() error { _, err := Stat(ws, "none"); return err }},
	} {
		if err := tc.fn(); !errors.Is(err, tc.err) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.err)
		}
	}
	if _, err := os.Stat(filepath.Join(outside, "secret")); err != nil {
		t.Fatalf("the file outside: %v", err)
	}
	// Listing: depth 1 and 2, symlinks listed as themselves.
	list := func(rel string, depth int) []string {
		es, err := ReadDir(ws, rel, depth)
		if err != nil {
			t.Fatalf("ReadDir(%q, %d): %v", rel, depth, err)
		}
		var out []string
		for _, e := range es {
			out = append(out, e.Rel)
		}
		slices.Sort(out)
		return out
	}
	if got := list("", 1); !slices.Equal(got, []string{"a.txt", "d", "out", "secret"}) {
		t.Errorf("ReadDir depth 1: %v", got)
	}
	if got := list("d", 2); !slices.Equal(got, []string{"d/b.txt", "d/e", "d/e/c.txt"}) {
		t.Errorf("ReadDir d depth 2: %v", got)
	}
	// Making, moving and removing inside.
	if made, err := Mkdir(ws, "n/m", -1, -1); !made || err != nil {
		t.Errorf("Mkdir new: %v %v", made, err)
	}
	if made, err := Mkdir(ws, "n/m", -1, -1); made || err != nil {
		t.Errorf("Mkdir again: %v %v, want false and no error", made, err)
	}
	if err := Rename(ws, "a.txt", "n/m/a.txt"); err != nil {
		t.Errorf("Rename: %v", err)
	}
	if _, err := os.Stat(filepath.Join(root, "n/m/a.txt")); err != nil {
		t.Errorf("after Rename: %v", err)
	}
	if err := Remove(ws, "secret"); err != nil {
		t.Errorf("Remove a symlink: %v", err)
	}
	if err := Remove(ws, "d"); err != nil {
		t.Errorf("Remove a tree: %v", err)
	}
	if got := list("", 1); !slices.Equal(got, []string{"n", "out"}) {
		t.Errorf("after the removals: %v", got)
	}
	if _, err := os.Stat(filepath.Join(outside, "secret")); err != nil {
		t.Fatalf("removing the symlink removed its target: %v", err)
	}
}
