package snapshot

import (
	"archive/tar"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func openDir(t *testing.T, p string) *os.File {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

func TestCaptureRestore(t *testing.T) {
	src := t.TempDir()
	ws, tmp := filepath.Join(src, "ws"), filepath.Join(src, "tmp")
	for _, d := range []string{ws, filepath.Join(ws, "sub", "deep"), tmp, filepath.Join(ws, "ro")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	big := strings.Repeat("0123456789abcdef", 20<<10) // 320 KiB: copied by the kernel
	files := map[string]string{"ws/a.txt": "alpha", "ws/sub/deep/b.txt": "beta", "tmp/c": "gamma", "ws/run.sh": "#!/bin/sh\necho hi\n", "ws/ro/inside": "kept",
		"ws/big": big, "ws/sub/after-big": "after", "tmp/big2": big + "2"}
	for p, c := range files {
		if err := os.WriteFile(filepath.Join(src, p), []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	os.Chmod(filepath.Join(ws, "run.sh"), 0o755)
	os.Chmod(filepath.Join(ws, "ro"), 0o555)
	old := time.Date(2020, 1, 2, 3, 4, 5, 0, time.UTC)
	os.Chtimes(filepath.Join(ws, "a.txt"), old, old)
	if err := os.Symlink("/etc/passwd", filepath.Join(ws, "link")); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mkfifo(filepath.Join(ws, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}

	store, err := Open(filepath.Join(t.TempDir(), "store"))
	if err != nil {
		t.Fatal(err)
	}
	uid, gid := os.Getuid(), os.Getgid()
	dirs := []Dir{{"workspace", openDir(t, ws)}, {"tmp", openDir(t, tmp)}}
	m, err := store.Capture(dirs, uid, gid, Meta{ID: "snap_1", Name: "first", Owner: "token:a", Tool: "sh", Source: "s_1", Created: time.Now()})
	if err != nil {
		t.Fatalf("Capture: %v", err)
	}
	var size int64
	for _, c := range files {
		size += int64(len(c))
	}
	if m.Skipped != 1 || m.Size != size || !validDigest(m.Digest) {
		t.Errorf("meta %+v: want one skipped (the FIFO), the files' bytes, a digest", m)
	}
	// The same files again: one archive for both.
	m2, err := store.Capture(dirs, uid, gid, Meta{ID: "snap_2", Owner: "token:a", Tool: "sh", Source: "s_1", Created: time.Now()})
	if err != nil || m2.Digest != m.Digest {
		t.Fatalf("a second capture: %+v %v; want digest %s", m2, err, m.Digest)
	}
	if _, err := store.Capture(dirs, uid, gid, Meta{ID: "snap_3", Name: "first", Owner: "token:a", Created: time.Now()}); !errors.Is(err, ErrNameUsed) {
		t.Errorf("a name used twice: %v, want ErrNameUsed", err)
	}
	// Another owner may use the name; and it does not see the first.
	if _, err := store.Find("first", func(o string) bool { return o == "token:b" }); !errors.Is(err, ErrNotFound) {
		t.Errorf("another owner found it: %v", err)
	}

	// Reopened: the same snapshots.
	store, err = Open(store.dir)
	if err != nil {
		t.Fatal(err)
	}
	all := func(string) bool { return true }
	got, err := store.Find("first", all)
	if err != nil || got.ID != "snap_1" {
		t.Fatalf("Find(first) after reopening: %+v %v", got, err)
	}

	dst := t.TempDir()
	rws, rtmp := filepath.Join(dst, "ws"), filepath.Join(dst, "tmp")
	os.Mkdir(rws, 0o755)
	os.Mkdir(rtmp, 0o755)
	if err := store.Restore(got, []Dir{{"workspace", openDir(t, rws)}, {"tmp", openDir(t, rtmp)}}, uid, gid); err != nil {
		t.Fatalf("Restore: %v", err)
	}
	for p, c := range files {
		b, err := os.ReadFile(filepath.Join(dst, p))
		if err != nil || string(b) != c {
			t.Errorf("%s restored: %q %v, want %q", p, b, err, c)
		}
	}
	if fi, err := os.Stat(filepath.Join(rws, "run.sh")); err != nil || fi.Mode().Perm() != 0o755 {
		t.Errorf("run.sh's mode: %v %v, want 0755", fi.Mode(), err)
	}
	if fi, err := os.Stat(filepath.Join(rws, "ro")); err != nil || fi.Mode().Perm() != 0o555 {
		t.Errorf("ro's mode: %v %v, want 0555", fi.Mode(), err)
	}
	if fi, err := os.Stat(filepath.Join(rws, "a.txt")); err != nil || !fi.ModTime().Equal(old) {
		t.Errorf("a.txt's time: %v %v, want %v", fi.ModTime(), err, old)
	}
	if l, err := os.Readlink(filepath.Join(rws, "link")); err != nil || l != "/etc/passwd" {
		t.Errorf("link: %q %v", l, err)
	}
	if _, err := os.Lstat(filepath.Join(rws, "fifo")); !os.IsNotExist(err) {
		t.Errorf("the FIFO was restored: %v", err)
	}

	// The policy by age finds the one taken long ago.
	if _, err := store.Capture(dirs, uid, gid, Meta{ID: "snap_old", Owner: "token:a", Tool: "sh", Source: "s_1", Created: time.Now().Add(-48 * time.Hour)}); err != nil {
		t.Fatal(err)
	}
	if old := store.OlderThan(24*time.Hour, time.Now()); len(old) != 1 || old[0].ID != "snap_old" {
		t.Errorf("OlderThan(24h) = %+v, want snap_old alone", old)
	}
	if err := store.Delete("snap_old"); err != nil {
		t.Fatal(err)
	}
	// Deleting one keeps the archive the other holds; deleting both
	// removes it.
	if err := store.Delete("snap_1"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(store.archive(m.Digest)); err != nil {
		t.Errorf("the archive went with the first of two snapshots: %v", err)
	}
	if err := store.Delete("snap_2"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(store.archive(m.Digest)); !os.IsNotExist(err) {
		t.Errorf("the archive outlived its snapshots: %v", err)
	}
	if err := store.Delete("snap_2"); !errors.Is(err, ErrNotFound) {
		t.Errorf("a second delete: %v", err)
	}
}

// TestRestoreStaysInside restores archives that try to leave the
// sandbox's directories: a name with "..", one outside them, a file
// below a symlink the archive itself planted. Nothing appears outside.
func TestRestoreStaysInside(t *testing.T) {
	for _, c := range []struct {
		name string
		hdrs []tar.Header
	}{
		{"dot-dot", []tar.Header{{Typeflag: tar.TypeReg, Name: "workspace/../escaped", Size: 1}}},
		{"another directory", []tar.Header{{Typeflag: tar.TypeReg, Name: "etc/escaped", Size: 1}}},
		{"through a symlink", []tar.Header{
			{Typeflag: tar.TypeSymlink, Name: "workspace/out", Linkname: ".."},
			{Typeflag: tar.TypeReg, Name: "workspace/out/escaped", Size: 1},
		}},
		{"absolute", []tar.Header{{Typeflag: tar.TypeReg, Name: "/workspace/escaped", Size: 1}}},
		{"a device", []tar.Header{{Typeflag: tar.TypeChar, Name: "workspace/escaped"}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			store, err := Open(filepath.Join(t.TempDir(), "store"))
			if err != nil {
				t.Fatal(err)
			}
			digest := "sha256-" + strings.Repeat("0", 64)
			f, err := os.Create(store.archive(digest))
			if err != nil {
				t.Fatal(err)
			}
			tw := tar.NewWriter(f)
			for _, h := range c.hdrs {
				if err := tw.WriteHeader(&h); err != nil {
					t.Fatal(err)
				}
				if h.Size > 0 {
					tw.Write([]byte("x"))
				}
			}
			tw.Close()
			f.Close()
			root := t.TempDir()
			ws := filepath.Join(root, "inner", "ws")
			os.MkdirAll(ws, 0o755)
			err = store.Restore(Meta{ID: "snap_x", Digest: digest}, []Dir{{"workspace", openDir(t, ws)}}, os.Getuid(), os.Getgid())
			if err == nil {
				t.Error("Restore accepted it")
			}
			filepath.Walk(root, func(p string, fi os.FileInfo, err error) error {
				if err == nil && fi.Name() == "escaped" {
					t.Errorf("a file appeared at %s", p)
				}
				return nil
			})
		})
	}
}
