package inroot

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestCreateNew makes new files, and refuses what is in the way (a FIFO,
// a symlink to a file outside, a file) without writing through it, and
// names that are not one element.
func TestCreateNew(t *testing.T) {
	root := t.TempDir()
	outside := filepath.Join(t.TempDir(), "outside")
	os.WriteFile(outside, []byte("host"), 0o644)
	os.Symlink(outside, filepath.Join(root, "link"))
	unix.Mkfifo(filepath.Join(root, "fifo"), 0o644)
	os.WriteFile(filepath.Join(root, "there"), []byte("old"), 0o644)
	dir, err := os.Open(root)
	if err != nil {
		t.Fatal(err)
	}
	defer dir.Close()
	when := time.Date(2021, 2, 3, 4, 5, 6, 0, time.UTC)
	if err := CreateNew(dir, "new", strings.NewReader("data"), 4, 0o755, when); err != nil {
		t.Fatalf("CreateNew: %v", err)
	}
	fi, err := os.Stat(filepath.Join(root, "new"))
	if err != nil || fi.Mode().Perm() != 0o755 || !fi.ModTime().Equal(when) || fi.Size() != 4 {
		t.Errorf("new: %v %v", fi, err)
	}
	for _, c := range []struct {
		name string
		want error
	}{
		{"link", ErrExists}, {"fifo", ErrExists}, {"there", ErrExists},
		{"a/b", ErrPath}, {"..", ErrPath}, {"", ErrPath},
	} {
		if err := CreateNew(dir, c.name, strings.NewReader("pwned"), 5, 0o644, when); !errors.Is(err, c.want) {
			t.Errorf("CreateNew(%q) = %v, want %v", c.name, err, c.want)
		}
	}
	if b, _ := os.ReadFile(outside); string(b) != "host" {
		t.Errorf("the file outside became %q", b)
	}
	if b, _ := os.ReadFile(filepath.Join(root, "there")); string(b) != "old" {
		t.Errorf("the file in the way became %q", b)
	}
	// Short data: an error, and nothing left.
	if err := CreateNew(dir, "short", strings.NewReader("ab"), 5, 0o644, when); err == nil {
		t.Error("a short read made a file")
	}
	if _, err := os.Lstat(filepath.Join(root, "short")); !os.IsNotExist(err) {
		t.Errorf("the short file is left: %v", err)
	}
}
