package snapshot

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestSeeded captures into a store that keeps seeds: the files come out
// unpacked, owned by the seed's owner whoever owned them in the sandbox,
// with their modes, links and times; the same files twice are one seed;
// a seed a sandbox holds (its lock, shared) outlives its last snapshot
// until it is let go, and the next Delete or Open removes it, as Open
// removes what a capture cut short left.
func TestSeeded(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: a seed's files are chowned to its owner")
	}
	src := t.TempDir()
	ws, tmp := filepath.Join(src, "ws"), filepath.Join(src, "tmp")
	for _, d := range []string{filepath.Join(ws, "sub"), tmp} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	big := strings.Repeat("x", 300<<10)
	files := map[string]string{"ws/a": "alpha", "ws/sub/b": "beta", "ws/big": big, "tmp/c": "gamma"}
	for p, c := range files {
		if err := os.WriteFile(filepath.Join(src, p), []byte(c), 0o640); err != nil {
			t.Fatal(err)
		}
	}
	os.Chmod(filepath.Join(ws, "sub"), 0o700)
	if err := os.Symlink("/etc/passwd", filepath.Join(ws, "link")); err != nil {
		t.Fatal(err)
	}
	old := time.Date(2020, 1, 2, 3, 4, 5, 0, time.UTC)
	os.Chtimes(filepath.Join(ws, "a"), old, old)
	const owner = 1<<30 - 65536 + 1000
	dir := filepath.Join(t.TempDir(), "store")
	st, err := OpenSeeded(dir, owner)
	if err != nil {
		t.Fatal(err)
	}
	dirs := []Dir{{"workspace", openDir(t, ws)}, {"tmp", openDir(t, tmp)}}
	m, err := st.Capture(dirs, 0, 0, Meta{ID: "snap_1", Owner: "o", Tool: "sh", Source: "s", Created: time.Now()})
	if err != nil {
		t.Fatalf("Capture: %v", err)
	}
	seed, lock := waitSeed(t, st, m)
	if _, err := os.Stat(st.archive(m.Digest)); err != nil {
		t.Errorf("the archive beside the seed: %v", err)
	}
	for p, c := range files {
		rel := strings.Replace(p, "ws/", "workspace/", 1)
		b, err := os.ReadFile(filepath.Join(seed, rel))
		if err != nil || string(b) != c {
			t.Errorf("seed's %s: %d bytes, %v", rel, len(b), err)
			continue
		}
		fi, _ := os.Stat(filepath.Join(seed, rel))
		if uid := fi.Sys().(*syscall.Stat_t).Uid; uid != owner || fi.Mode().Perm() != 0o640 {
			t.Errorf("seed's %s: owner %d mode %v; want %d, 0640", rel, uid, fi.Mode(), owner)
		}
	}
	if fi, err := os.Stat(filepath.Join(seed, "workspace/sub")); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("seed's workspace/sub: %v %v; want mode 0700", fi.Mode(), err)
	}
	if l, err := os.Readlink(filepath.Join(seed, "workspace/link")); err != nil || l != "/etc/passwd" {
		t.Errorf("seed's link: %q %v", l, err)
	}
	if fi, err := os.Stat(filepath.Join(seed, "workspace/a")); err != nil || !fi.ModTime().Equal(old) {
		t.Errorf("seed's a: mtime %v %v; want %v", fi.ModTime(), err, old)
	}
	m2, err := st.Capture(dirs, 0, 0, Meta{ID: "snap_2", Owner: "o", Tool: "sh", Source: "s", Created: time.Now()})
	if err != nil || m2.Digest != m.Digest {
		t.Fatalf("a second capture: %+v %v", m2, err)
	}
	// A sandbox starts from it and holds its lock.
	held, err := os.Open(lock)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Flock(int(held.Fd()), unix.LOCK_SH); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"snap_1", "snap_2"} {
		if err := st.Delete(id); err != nil {
			t.Fatalf("Delete %s: %v", id, err)
		}
	}
	if _, err := os.Stat(seed); err != nil {
		t.Errorf("a seed in use was removed: %v", err)
	}
	held.Close()
	// An unpacking cut short; the store opened again removes it, and
	// what the last Delete left.
	if err := os.Mkdir(filepath.Join(dir, ".tmp-123"), 0o700); err != nil {
		t.Fatal(err)
	}
	st.Close()
	st, err = OpenSeeded(dir, owner)
	if err != nil {
		t.Fatal(err)
	}
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		t.Errorf("left in the store: %s", e.Name())
	}
	st.Close()
	if _, err := OpenSeeded(dir, -1); err == nil {
		t.Error("a seed owner of -1 was taken")
	}
}

// waitSeed waits for m's seed, unpacked in the background.
func waitSeed(t *testing.T, st *Store, m Meta) (dir, lock string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if dir, lock, ok := st.Seed(m); ok {
			return dir, lock
		}
	}
	t.Fatalf("no seed for %+v after 10 s", m)
	return "", ""
}

// TestSeededAtOpen: an archive without its seed (a store of an earlier
// version, or a crash before its unpacking ended) is unpacked when the
// store is opened with a seed owner; Close stops the unpacking and
// leaves nothing half made.
func TestSeededAtOpen(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: a seed's files are chowned to its owner")
	}
	src := t.TempDir()
	for i := range 200 {
		if err := os.WriteFile(filepath.Join(src, "f"+strconv.Itoa(i)), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	dir := filepath.Join(t.TempDir(), "store")
	plain, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	m, err := plain.Capture([]Dir{{"workspace", openDir(t, src)}, {"tmp", openDir(t, t.TempDir())}}, 0, 0, Meta{ID: "snap_1", Owner: "o", Tool: "sh", Source: "s", Created: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, ok := plain.Seed(m); ok {
		t.Fatal("a store without seeds has one")
	}
	// Opened and closed at once: whatever was cut short is gone.
	st, err := OpenSeeded(dir, 12345)
	if err != nil {
		t.Fatal(err)
	}
	st.Close()
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".tmp-") {
			t.Errorf("an unpacking cut short left %s", e.Name())
		}
	}
	st, err = OpenSeeded(dir, 12345)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	seed, _ := waitSeed(t, st, m)
	fi, err := os.Stat(filepath.Join(seed, "workspace", "f199"))
	if err != nil || fi.Sys().(*syscall.Stat_t).Uid != 12345 {
		t.Errorf("the seed's f199: %v %v", fi, err)
	}
}

// TestTransient: a fork's snapshot is never unpacked, and one a crash
// left (the fork never deleted it) is gone, archive and all, when the
// store is opened again.
func TestTransient(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: a seed's files are chowned to its owner")
	}
	src := t.TempDir()
	if err := os.WriteFile(filepath.Join(src, "f"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "store")
	st, err := OpenSeeded(dir, 12345)
	if err != nil {
		t.Fatal(err)
	}
	m, err := st.Capture([]Dir{{"workspace", openDir(t, src)}, {"tmp", openDir(t, t.TempDir())}}, 0, 0, Meta{ID: "snap_f", Owner: "o", Tool: "sh", Source: "s", Created: time.Now(), Transient: true})
	if err != nil {
		t.Fatal(err)
	}
	st.Close()
	if _, _, ok := st.Seed(m); ok {
		t.Error("a fork's snapshot was unpacked")
	}
	st, err = OpenSeeded(dir, 12345)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, err := st.Find("snap_f", func(string) bool { return true }); err == nil {
		t.Error("a fork's snapshot outlived the store's reopening")
	}
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		t.Errorf("left in the store: %s", e.Name())
	}
}
