package inroot

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func dirOf(t *testing.T) (string, *os.File) {
	root := t.TempDir()
	d, err := os.OpenFile(root, os.O_RDONLY|0x200000 /* O_PATH */, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return root, d
}

func TestSplit(t *testing.T) {
	good := []string{"a", "a/b.txt", "dir/sub/file", "ünïcode", "..a", "a..b"}
	for _, p := range good {
		if _, err := Split(p); err != nil {
			t.Errorf("%q: %v", p, err)
		}
	}
	bad := []string{"", "/etc/passwd", "../x", "a/../b", "a//b", "./a", "a/", "a\x00b", "\xff", strings.Repeat("a", MaxPath+1)}
	for _, p := range bad {
		if _, err := Split(p); !errors.Is(err, ErrPath) {
			t.Errorf("%q: got %v, want ErrPath", p, err)
		}
	}
}

func TestWriteAndRead(t *testing.T) {
	root, d := dirOf(t)
	n, err := WriteFile(d, "sub/dir/f.txt", strings.NewReader("hello"), 100, os.Getuid(), os.Getgid())
	if err != nil || n != 5 {
		t.Fatalf("write: %d %v", n, err)
	}
	if b, _ := os.ReadFile(filepath.Join(root, "sub/dir/f.txt")); string(b) != "hello" {
		t.Fatalf("on disk: %q", b)
	}
	// Replacing truncates.
	if _, err := WriteFile(d, "sub/dir/f.txt", strings.NewReader("hi"), 100, os.Getuid(), os.Getgid()); err != nil {
		t.Fatal(err)
	}
	f, err := Open(d, "sub/dir/f.txt")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(f)
	f.Close()
	if string(b) != "hi" {
		t.Fatalf("read %q", b)
	}
	if _, err := Open(d, "nope"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("missing file: %v", err)
	}
	if _, err := Open(d, "sub"); !errors.Is(err, ErrNotRegular) {
		t.Fatalf("directory: %v", err)
	}
	if _, err := WriteFile(d, "big", strings.NewReader(strings.Repeat("x", 101)), 100, os.Getuid(), os.Getgid()); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("over the cap: %v", err)
	}
	if _, err := os.Stat(filepath.Join(root, "big")); !os.IsNotExist(err) {
		t.Fatal("an oversized file was left behind")
	}
}

// The attacks: symlinks planted by the sandbox, as the last element and
// as a directory on the way, pointing outside.
func TestSymlinksNeverFollowed(t *testing.T) {
	root, d := dirOf(t)
	outside := t.TempDir()
	secret := filepath.Join(outside, "secret")
	os.WriteFile(secret, []byte("host data"), 0o600)
	os.Symlink(secret, filepath.Join(root, "link"))
	os.Symlink(outside, filepath.Join(root, "dirlink"))
	os.Symlink("../../..", filepath.Join(root, "up"))
	for _, p := range []string{"link", "dirlink/secret", "up/etc/passwd"} {
		if f, err := Open(d, p); err == nil {
			f.Close()
			t.Errorf("read through %q", p)
		}
		if _, err := WriteFile(d, p, strings.NewReader("pwned"), 100, os.Getuid(), os.Getgid()); err == nil {
			t.Errorf("wrote through %q", p)
		}
		if _, err := WriteFile(d, p+"/x", strings.NewReader("pwned"), 100, os.Getuid(), os.Getgid()); err == nil {
			t.Errorf("wrote below %q", p)
		}
	}
	if b, _ := os.ReadFile(secret); string(b) != "host data" {
		t.Fatalf("the host file changed: %q", b)
	}
	if ents, _ := os.ReadDir(outside); len(ents) != 1 {
		t.Fatalf("files appeared outside: %v", ents)
	}
}

func TestFifoNeverOpenedForWrite(t *testing.T) {
	root, d := dirOf(t)
	if err := mkfifo(filepath.Join(root, "fifo")); err != nil {
		t.Skip(err)
	}
	if _, err := WriteFile(d, "fifo", strings.NewReader("x"), 100, os.Getuid(), os.Getgid()); !errors.Is(err, ErrNotRegular) {
		t.Fatalf("fifo: %v", err)
	}
	if _, err := Open(d, "fifo"); !errors.Is(err, ErrNotRegular) {
		t.Fatalf("fifo read: %v", err)
	}
}

// AsUser gives up root's powers: what is created belongs to the user, and
// a directory the user may not write stays unwritten.
func TestAsUser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to change file-system ids")
	}
	root, d := dirOf(t)
	const id = 1<<30 + 4242
	if err := os.Chown(root, id, id); err != nil {
		t.Fatal(err)
	}
	locked := filepath.Join(root, "locked")
	os.Mkdir(locked, 0o755) // owned by root
	err := AsUser(id, id, func() error {
		_, err := WriteFile(d, "mine.txt", strings.NewReader("x"), 10, id, id)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(filepath.Join(root, "mine.txt"), &st); err != nil || st.Uid != id || st.Gid != id {
		t.Fatalf("owner %d:%d (%v), want %d", st.Uid, st.Gid, err, id)
	}
	err = AsUser(id, id, func() error {
		_, err := WriteFile(d, "locked/x", strings.NewReader("x"), 10, id, id)
		return err
	})
	if err == nil {
		t.Fatal("wrote into a root-owned directory as the user")
	}
}
