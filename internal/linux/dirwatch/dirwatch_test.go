package dirwatch

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// next returns the watch's next event, failing the test after 5 s.
func next(t *testing.T, w *Watcher) (Event, error) {
	t.Helper()
	type r struct {
		ev  Event
		err error
	}
	c := make(chan r, 1)
	go func() { ev, err := w.Next(); c <- r{ev, err} }()
	select {
	case x := <-c:
		return x.ev, x.err
	case <-time.After(5 * time.Second):
		w.Close()
		<-c
		t.Fatalf("no event within 5 s")
		return Event{}, nil
	}
}

// expect reads events until one matches want, failing on an error or
// on an event in skip's absence that is not want.
func expect(t *testing.T, w *Watcher, want Event, allowed ...Op) {
	t.Helper()
	for {
		ev, err := next(t, w)
		if err != nil {
			t.Fatalf("Next: %v, want %+v", err, want)
		}
		if ev == want {
			return
		}
		ok := false
		for _, a := range allowed {
			ok = ok || ev.Op == a
		}
		if !ok {
			t.Fatalf("Next = %+v, want %+v", ev, want)
		}
	}
}

func watch(t *testing.T, dir, rel string, opt Options) *Watcher {
	t.Helper()
	d, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	w, err := Watch(d, rel, opt)
	if err != nil {
		t.Fatalf("Watch: %v", err)
	}
	t.Cleanup(func() { w.Close() })
	return w
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestEvents(t *testing.T) {
	dir := t.TempDir()
	w := watch(t, dir, "", Options{})
	f := filepath.Join(dir, "a.txt")
	must(t, os.WriteFile(f, []byte("x"), 0o644))
	expect(t, w, Event{Name: "a.txt", Op: Create})
	expect(t, w, Event{Name: "a.txt", Op: Write})
	must(t, os.Chmod(f, 0o600))
	expect(t, w, Event{Name: "a.txt", Op: Chmod})
	must(t, os.Rename(f, filepath.Join(dir, "b.txt")))
	expect(t, w, Event{Name: "a.txt", Op: Rename})
	expect(t, w, Event{Name: "b.txt", Op: Create})
	must(t, os.Remove(filepath.Join(dir, "b.txt")))
	expect(t, w, Event{Name: "b.txt", Op: Remove})
	// Not recursive: a change below a subdirectory is not reported.
	must(t, os.Mkdir(filepath.Join(dir, "sub"), 0o755))
	expect(t, w, Event{Name: "sub", Op: Create, Dir: true})
	must(t, os.WriteFile(filepath.Join(dir, "sub", "c"), nil, 0o644))
	must(t, os.WriteFile(filepath.Join(dir, "marker"), nil, 0o644))
	expect(t, w, Event{Name: "marker", Op: Create})
}

func TestRecursive(t *testing.T) {
	dir := t.TempDir()
	must(t, os.MkdirAll(filepath.Join(dir, "old", "deep"), 0o755))
	w := watch(t, dir, "", Options{Recursive: true})
	must(t, os.WriteFile(filepath.Join(dir, "old", "deep", "x"), nil, 0o644))
	expect(t, w, Event{Name: "old/deep/x", Op: Create})
	must(t, os.Mkdir(filepath.Join(dir, "new"), 0o755))
	expect(t, w, Event{Name: "new", Op: Create, Dir: true})
	must(t, os.WriteFile(filepath.Join(dir, "new", "y"), nil, 0o644))
	expect(t, w, Event{Name: "new/y", Op: Create})
	// A directory renamed within: reported under its new name after.
	must(t, os.Rename(filepath.Join(dir, "new"), filepath.Join(dir, "renamed")))
	expect(t, w, Event{Name: "new", Op: Rename, Dir: true})
	expect(t, w, Event{Name: "renamed", Op: Create, Dir: true})
	must(t, os.WriteFile(filepath.Join(dir, "renamed", "z"), nil, 0o644))
	expect(t, w, Event{Name: "renamed/z", Op: Create})
	// Moved away: what happens to it there is not reported.
	out := t.TempDir()
	must(t, os.Rename(filepath.Join(dir, "renamed"), filepath.Join(out, "gone")))
	expect(t, w, Event{Name: "renamed", Op: Rename, Dir: true})
	must(t, os.WriteFile(filepath.Join(out, "gone", "w"), nil, 0o644))
	must(t, os.WriteFile(filepath.Join(dir, "marker"), nil, 0o644))
	expect(t, w, Event{Name: "marker", Op: Create})
}

// A symlink below the watched directory is never followed: a change
// where it points is not reported.
func TestSymlinkNotFollowed(t *testing.T) {
	dir, out := t.TempDir(), t.TempDir()
	must(t, os.Symlink(out, filepath.Join(dir, "evil")))
	w := watch(t, dir, "", Options{Recursive: true})
	must(t, os.Symlink(out, filepath.Join(dir, "evil2")))
	expect(t, w, Event{Name: "evil2", Op: Create})
	must(t, os.WriteFile(filepath.Join(out, "secret"), nil, 0o644))
	must(t, os.WriteFile(filepath.Join(dir, "marker"), nil, 0o644))
	expect(t, w, Event{Name: "marker", Op: Create})
	// Nor is the watched directory itself when it is a symlink.
	d, err := os.Open(dir)
	must(t, err)
	defer d.Close()
	if w, err := Watch(d, "evil", Options{}); err == nil {
		w.Close()
		t.Fatal("Watch through a symlink succeeded")
	}
}

// The watch is made as the given user: a directory that user cannot
// read is refused though the caller is root.
func TestAsUser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	dir := t.TempDir()
	must(t, os.Chmod(dir, 0o755))
	private := filepath.Join(dir, "private")
	must(t, os.Mkdir(private, 0o700))
	d, err := os.Open(dir)
	must(t, err)
	defer d.Close()
	if w, err := Watch(d, "private", Options{UID: 54321, GID: 54321}); err == nil {
		w.Close()
		t.Fatal("Watch of a directory its user cannot read succeeded")
	}
	// Recursive, from a directory the user can read: the private one is
	// left out, not watched with root's powers.
	w, err := Watch(d, "", Options{UID: 54321, GID: 54321, Recursive: true})
	if err == nil {
		defer w.Close()
		must(t, os.WriteFile(filepath.Join(private, "x"), nil, 0o600))
		must(t, os.WriteFile(filepath.Join(dir, "marker"), nil, 0o644))
		expect(t, w, Event{Name: "marker", Op: Create})
	} else if !errors.Is(err, os.ErrPermission) {
		t.Fatalf("Watch: %v, want success or a permission error", err)
	}
}

func TestMaxDirs(t *testing.T) {
	dir := t.TempDir()
	for i := range 3 {
		must(t, os.Mkdir(filepath.Join(dir, fmt.Sprint(i)), 0o755))
	}
	d, err := os.Open(dir)
	must(t, err)
	defer d.Close()
	if w, err := Watch(d, "", Options{Recursive: true, MaxDirs: 3}); !errors.Is(err, ErrTooMany) {
		if w != nil {
			w.Close()
		}
		t.Fatalf("Watch = %v, want ErrTooMany", err)
	}
	w := watch(t, dir, "", Options{Recursive: true, MaxDirs: 4})
	must(t, os.Mkdir(filepath.Join(dir, "3"), 0o755))
	if _, err := next(t, w); !errors.Is(err, ErrTooMany) {
		t.Fatalf("Next = %v, want ErrTooMany", err)
	}
}

func TestGone(t *testing.T) {
	dir := t.TempDir()
	sub := filepath.Join(dir, "sub")
	must(t, os.Mkdir(sub, 0o755))
	w := watch(t, dir, "sub", Options{})
	must(t, os.Remove(sub))
	if _, err := next(t, w); !errors.Is(err, ErrGone) {
		t.Fatalf("Next = %v, want ErrGone", err)
	}
}

func TestCloseEndsNext(t *testing.T) {
	w := watch(t, t.TempDir(), "", Options{Recursive: true})
	c := make(chan error, 1)
	go func() { _, err := w.Next(); c <- err }()
	time.Sleep(50 * time.Millisecond)
	w.Close()
	select {
	case err := <-c:
		if !errors.Is(err, os.ErrClosed) {
			t.Fatalf("Next = %v, want os.ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Next still waits after Close")
	}
}

// Changes faster than they are read end the watch rather than drop
// some silently.
func TestOverflow(t *testing.T) {
	q, err := os.ReadFile("/proc/sys/fs/inotify/max_queued_events")
	must(t, err)
	var max int
	fmt.Sscan(string(q), &max)
	if max > 1<<16 {
		t.Skipf("max_queued_events is %d", max)
	}
	dir := t.TempDir()
	w := watch(t, dir, "", Options{})
	// Renames back and forth: the kernel merges a record that repeats
	// the last, and these never do (each has its own cookie).
	a, b := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	must(t, os.WriteFile(a, nil, 0o644))
	for range max/2 + 10 {
		must(t, os.Rename(a, b))
		a, b = b, a
	}
	t0 := time.Now()
	for {
		_, err := w.Next()
		if errors.Is(err, ErrOverflow) {
			t.Logf("overflow after %v", time.Since(t0))
			return
		}
		if err != nil {
			t.Fatalf("Next = %v, want ErrOverflow", err)
		}
	}
}
