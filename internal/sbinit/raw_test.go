package sbinit

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

func TestFileHelpers(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "file"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, path string
		wantErr    error
	}{
		{"new", "a", nil},
		{"nested, parents missing", "b/c/d", nil},
		{"already a directory", "b/c", nil},
		{"a file in the way", "file", unix.ENOTDIR},
		{"a file as a parent", "file/sub", unix.ENOTDIR},
	} {
		t.Run("mkdirAll "+tc.name, func(t *testing.T) {
			p := filepath.Join(dir, tc.path)
			err := mkdirAll(p)
			if !errors.Is(err, tc.wantErr) || (err == nil) != (tc.wantErr == nil) {
				t.Fatalf("mkdirAll(%s) = %v, want %v", tc.path, err, tc.wantErr)
			}
			if err == nil {
				if fi, err := os.Stat(p); err != nil || !fi.IsDir() {
					t.Fatalf("%s is not a directory: %v", tc.path, err)
				}
			}
		})
	}

	old := unix.Umask(0o022)
	defer unix.Umask(old)
	p := filepath.Join(dir, "etc/sub/passwd")
	if err := writeFile(p, []byte("a long first content"), 0o640); err != nil {
		t.Fatal(err)
	}
	if err := writeFile(p, []byte("short"), 0o600); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(p)
	if err != nil || string(b) != "short" {
		t.Fatalf("content %q, %v; want the second write alone", b, err)
	}
	if fi, _ := os.Stat(p); fi.Mode().Perm() != 0o640 {
		t.Errorf("mode %v, want the one it was created with (0640)", fi.Mode().Perm())
	}
	if err := writeFile(filepath.Join(dir, "file/x"), nil, 0o644); !errors.Is(err, unix.ENOTDIR) {
		t.Errorf("write below a file: %v, want ENOTDIR", err)
	}
	for _, file := range []bool{true, false} {
		tp := filepath.Join(dir, "targets", map[bool]string{true: "f", false: "d"}[file])
		for range 2 { // a second call finds it there
			if err := makeTarget(tp, file); err != nil {
				t.Fatalf("makeTarget(%s, %v): %v", tp, file, err)
			}
		}
		if fi, err := os.Lstat(tp); err != nil || fi.IsDir() == file {
			t.Errorf("makeTarget(%s, %v) made %v, %v", tp, file, fi.Mode(), err)
		}
	}
}
