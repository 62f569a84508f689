package inroot

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestXattrs sets a file's attributes under a prefix through the open
// file, and reads them back by path: the others under the prefix go, the
// rest stay; a symlink's and a FIFO's are never read.
func TestXattrs(t *testing.T) {
	root := t.TempDir()
	p := filepath.Join(root, "f")
	if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := unix.Setxattr(p, "user.e2b.old", []byte("1"), 0); errors.Is(err, unix.ENOTSUP) {
		t.Skip("the test's file system keeps no user attributes")
	} else if err != nil {
		t.Fatal(err)
	}
	if err := unix.Setxattr(p, "user.other", []byte("2"), 0); err != nil {
		t.Fatal(err)
	}
	if err := unix.Setxattr(p, "user.e2b.bin", []byte{0xff}, 0); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(p, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	want := map[string]string{"a": "1", "b": ""}
	if got, err := SetXattrs(f, "user.e2b.", want); err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("SetXattrs = %v, %v; want %v", got, err, want)
	}
	if _, err := unix.Getxattr(p, "user.other", make([]byte, 8)); err != nil {
		t.Errorf("an attribute outside the prefix: %v, want it kept", err)
	}
	for _, n := range []string{"user.e2b.old", "user.e2b.bin"} {
		if _, err := unix.Getxattr(p, n, make([]byte, 8)); !errors.Is(err, unix.ENODATA) {
			t.Errorf("%s: %v, want it removed", n, err)
		}
	}
	ws, err := os.Open(root)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	if got, err := Xattrs(ws, "f", "user.e2b.", 100); err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("Xattrs = %v, %v; want %v", got, err, want)
	}
	// "user.e2b.a" and "1", "user.e2b.b" and "": 21 bytes.
	if got, err := Xattrs(ws, "f", "user.e2b.", 20); !errors.Is(err, ErrTooLarge) {
		t.Errorf("Xattrs over its bound = %v, %v; want ErrTooLarge", got, err)
	}
	if got, err := Xattrs(ws, "f", "user.e2b.", 21); err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("Xattrs at its bound = %v, %v; want %v", got, err, want)
	}
	if err := unix.Setxattr(root, "user.e2b.d", []byte("dir"), 0); err != nil {
		t.Fatal(err)
	}
	if got, err := Xattrs(ws, "", "user.e2b.", 100); err != nil || got["d"] != "dir" {
		t.Errorf("Xattrs of the directory = %v, %v", got, err)
	}
	if err := os.Symlink("f", filepath.Join(root, "l")); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mkfifo(filepath.Join(root, "p"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"l", "p"} {
		if got, err := Xattrs(ws, n, "user.e2b.", 100); err != nil || got != nil {
			t.Errorf("Xattrs(%s) = %v, %v; want nothing read", n, got, err)
		}
	}
	if _, err := Xattrs(ws, "l/x", "user.e2b.", 100); !errors.Is(err, ErrPath) {
		t.Errorf("through a symlink: %v, want ErrPath", err)
	}
}

// TestReadDirOrder: a listing is in envd's order, filepath.WalkDir's.
func TestReadDirOrder(t *testing.T) {
	root := t.TempDir()
	for _, f := range []string{"b/z", "b/a/x", "a", "B", "c/d/e"} {
		p := filepath.Join(root, f)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ws, err := os.Open(root)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	es, err := ReadDir(ws, "", 3)
	if err != nil {
		t.Fatal(err)
	}
	var got, want []string
	for _, e := range es {
		got = append(got, e.Rel)
	}
	_ = filepath.WalkDir(root, func(p string, _ os.DirEntry, err error) error {
		if p != root && err == nil {
			want = append(want, strings.TrimPrefix(p, root+"/"))
		}
		return err
	})
	if !reflect.DeepEqual(got, want) {
		t.Errorf("ReadDir order %v, want %v", got, want)
	}
}
