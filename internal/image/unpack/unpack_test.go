package unpack

import (
	"archive/tar"
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

const base = 1<<30 - 65536

type ent struct {
	name, link, data string
	typ              byte
	mode             int64
	uid              int
	pax              map[string]string
}

func file(name, data string) ent { return ent{name: name, data: data, typ: tar.TypeReg, mode: 0o644} }
func dir(name string) ent        { return ent{name: name, typ: tar.TypeDir, mode: 0o755} }
func symlink(name, target string) ent {
	return ent{name: name, link: target, typ: tar.TypeSymlink, mode: 0o777}
}
func hardlink(name, target string) ent { return ent{name: name, link: target, typ: tar.TypeLink} }

func archive(t testing.TB, ents ...ent) []byte {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, e := range ents {
		h := &tar.Header{Name: e.name, Linkname: e.link, Typeflag: e.typ, Mode: e.mode, Uid: e.uid, Gid: e.uid,
			Size: int64(len(e.data)), ModTime: time.Unix(1700000000, 0), PAXRecords: e.pax, Format: tar.FormatPAX}
		if e.typ != tar.TypeReg {
			h.Size = 0
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Size > 0 {
			if _, err := tw.Write([]byte(e.data)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// sandboxDirs makes a parent holding the root to unpack into and, beside
// it, a victim tree that must never change.
func sandboxDirs(t testing.TB) (root, outside string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (owners are shifted with chown)")
	}
	parent := t.TempDir()
	root, outside = filepath.Join(parent, "root"), filepath.Join(parent, "outside")
	for _, d := range []string{root, outside} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(outside, "victim"), []byte("untouched"), 0o644); err != nil {
		t.Fatal(err)
	}
	return root, outside
}

// snapshot lists a tree: path, type, mode, size, link count.
func snapshot(t testing.TB, dir string) string {
	t.Helper()
	var lines []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		lines = append(lines, strings.Join([]string{rel, strings.TrimSpace(fs.FileMode(st.Mode).String()), itoa(st.Size), itoa(int64(st.Nlink)), itoa(int64(st.Uid))}, " "))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(lines)
	b, _ := os.ReadFile(filepath.Join(dir, "victim"))
	return strings.Join(lines, "\n") + "\n" + string(b)
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

func apply(t testing.TB, root string, lim Limits, layers ...[]byte) (Report, error) {
	t.Helper()
	u, err := New(root, base, lim)
	if err != nil {
		t.Fatal(err)
	}
	defer u.Close()
	for _, l := range layers {
		if err := u.Apply(bytes.NewReader(l), true); err != nil {
			return u.Report(), err
		}
	}
	return u.Report(), nil
}

// TestAttacks tries every escape and every entry that has no place in an
// image, and checks from outside that nothing beside the root changed.
func TestAttacks(t *testing.T) {
	for _, tt := range []struct {
		name    string
		layers  [][]ent
		wantErr error
		// check, if set, inspects the root afterwards.
		check func(t *testing.T, root string, rep Report)
	}{
		{name: "absolute name", layers: [][]ent{{file("/etc/x", "x")}}, wantErr: ErrUnsafe},
		{name: "dot-dot name", layers: [][]ent{{file("../outside/victim", "pwned")}}, wantErr: ErrUnsafe},
		{name: "dot-dot inside", layers: [][]ent{{file("a/../../outside/victim", "pwned")}}, wantErr: ErrUnsafe},
		{name: "write through relative symlink", layers: [][]ent{{symlink("evil", "../outside"), file("evil/victim", "pwned")}}},
		{name: "write through absolute symlink", layers: [][]ent{{symlink("evil", "/"), file("evil/victim", "pwned")}},
			check: func(t *testing.T, root string, _ Report) { mustRead(t, filepath.Join(root, "victim"), "pwned") }},
		{name: "symlink in a later layer", layers: [][]ent{{symlink("evil", "../../outside")}, {file("evil/victim", "pwned")}}},
		{name: "replace symlink with file", layers: [][]ent{{symlink("f", "../outside/victim")}, {file("f", "pwned")}},
			check: func(t *testing.T, root string, _ Report) { mustRead(t, filepath.Join(root, "f"), "pwned") }},
		{name: "hardlink dot-dot", layers: [][]ent{{hardlink("l", "../outside/victim")}}, wantErr: ErrUnsafe},
		{name: "hardlink absolute", layers: [][]ent{{hardlink("l", "/etc/passwd")}}, wantErr: ErrUnsafe},
		{name: "hardlink through symlink", layers: [][]ent{{symlink("d", "../outside"), hardlink("l", "d/victim")}}},
		{name: "hardlink to directory", layers: [][]ent{{dir("d"), hardlink("l", "d")}}, wantErr: ErrUnsafe},
		{name: "hardlink then overwrite", layers: [][]ent{{file("a", "one"), hardlink("b", "a")}, {file("b", "two")}},
			check: func(t *testing.T, root string, _ Report) {
				mustRead(t, filepath.Join(root, "a"), "one")
				mustRead(t, filepath.Join(root, "b"), "two")
			}},
		{name: "device nodes and fifo skipped", layers: [][]ent{{{name: "dev/sda", typ: tar.TypeBlock, mode: 0o666}, {name: "dev/null", typ: tar.TypeChar, mode: 0o666}, {name: "p", typ: tar.TypeFifo, mode: 0o666}}},
			check: func(t *testing.T, root string, rep Report) {
				for _, p := range []string{"dev/sda", "dev/null", "p"} {
					if _, err := os.Lstat(filepath.Join(root, p)); !os.IsNotExist(err) {
						t.Errorf("%s exists: %v", p, err)
					}
				}
				if rep.Skipped != 3 {
					t.Errorf("skipped %d, want 3", rep.Skipped)
				}
			}},
		{name: "setuid cleared", layers: [][]ent{{{name: "su", typ: tar.TypeReg, mode: 0o6755, data: "x"}}},
			check: func(t *testing.T, root string, rep Report) {
				fi, err := os.Stat(filepath.Join(root, "su"))
				if err != nil || fi.Mode()&(fs.ModeSetuid|fs.ModeSetgid) != 0 || fi.Mode().Perm() != 0o755 {
					t.Errorf("mode %v (%v), want 0755 without setid bits", fi.Mode(), err)
				}
				if rep.SetIDCleared != 1 {
					t.Errorf("report %+v", rep)
				}
			}},
		{name: "file capabilities ignored", layers: [][]ent{{{name: "cap", typ: tar.TypeReg, mode: 0o755, data: "x",
			pax: map[string]string{"SCHILY.xattr.security.capability": "\x01\x00\x00\x02\xff\xff\xff\xff\x00\x00\x00\x00\xff\xff\xff\xff\x00\x00\x00\x00"}}}},
			check: func(t *testing.T, root string, _ Report) {
				if _, err := unix.Lgetxattr(filepath.Join(root, "cap"), "security.capability", make([]byte, 64)); err != unix.ENODATA {
					t.Errorf("security.capability: %v, want ENODATA", err)
				}
			}},
		{name: "duplicate entry", layers: [][]ent{{file("a", "1"), file("a", "2")}}, wantErr: ErrUnsafe},
		{name: "duplicate spelled differently", layers: [][]ent{{file("a/b", "1"), file("./a//b", "2")}}, wantErr: ErrUnsafe},
		{name: "too many bytes", layers: [][]ent{{file("a", strings.Repeat("x", 600)), file("b", strings.Repeat("x", 600))}}, wantErr: ErrLimit},
		{name: "too many entries", layers: [][]ent{{dir("a"), dir("b"), dir("c"), dir("d"), dir("e"), dir("f"), dir("g"), dir("h"), dir("i"), dir("j"), dir("k")}}, wantErr: ErrLimit},
		{name: "root entry not a directory", layers: [][]ent{{file(".", "x")}}, wantErr: ErrUnsafe},
		{name: "unsupported type", layers: [][]ent{{{name: "v", typ: 'V'}}}, wantErr: ErrUnsafe},
		{name: "parent is a file", layers: [][]ent{{file("a", "x"), file("a/b", "y")}}, wantErr: ErrUnsafe},
		{name: "whiteout dot-dot", layers: [][]ent{{file("a/x", "1")}, {file("a/.wh...", "")}}, wantErr: ErrUnsafe},
		{name: "owners shifted", layers: [][]ent{{{name: "r", typ: tar.TypeReg, mode: 0o644, uid: 0}, {name: "u", typ: tar.TypeReg, mode: 0o644, uid: 1000}, {name: "big", typ: tar.TypeReg, mode: 0o644, uid: 70000}}},
			check: func(t *testing.T, root string, rep Report) {
				for name, want := range map[string]uint32{"r": base, "u": base + 1000, "big": base + 65534, ".": base} {
					var st unix.Stat_t
					if err := unix.Lstat(filepath.Join(root, name), &st); err != nil || st.Uid != want || st.Gid != want {
						t.Errorf("%s owned %d:%d (%v), want %d", name, st.Uid, st.Gid, err, want)
					}
				}
				if rep.IDsClamped != 1 {
					t.Errorf("report %+v", rep)
				}
			}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			root, outside := sandboxDirs(t)
			before := snapshot(t, outside)
			var layers [][]byte
			for _, l := range tt.layers {
				layers = append(layers, archive(t, l...))
			}
			rep, err := apply(t, root, Limits{Bytes: 1000, Entries: 10}, layers...)
			if tt.wantErr != nil && !errors.Is(err, tt.wantErr) {
				t.Errorf("error %v, want %v", err, tt.wantErr)
			}
			if tt.check != nil {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				tt.check(t, root, rep)
			}
			if after := snapshot(t, outside); after != before {
				t.Errorf("outside the root changed:\n%s\nwas\n%s", after, before)
			}
		})
	}
}

func mustRead(t *testing.T, p, want string) {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil || string(b) != want {
		t.Errorf("%s = %q (%v), want %q", p, b, err, want)
	}
}

// TestLayers checks whiteouts, opaque directories and replacement across
// layers.
func TestLayers(t *testing.T) {
	root, _ := sandboxDirs(t)
	l1 := archive(t, dir("a"), file("a/x", "1"), file("a/y", "2"), dir("b"), file("b/z", "3"), dir("c"), file("c/in", "4"), file("d", "5"), dir("e"), file("e/deep", "6"))
	l2 := archive(t, file("a/.wh.x", ""), dir("b"), file("b/new", "7"), file("b/.wh..wh..opq", ""), file(".wh.c", ""),
		dir("d"), file("d/now-a-dir", "8"), file("e", "now a file"), file(".wh.absent", ""))
	if _, err := apply(t, root, Limits{}, l1, l2); err != nil {
		t.Fatal(err)
	}
	var got []string
	filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		rel, _ := filepath.Rel(root, p)
		got = append(got, rel)
		return nil
	})
	want := []string{".", "a", "a/y", "b", "b/new", "d", "d/now-a-dir", "e"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("tree %v, want %v", got, want)
	}
	mustRead(t, filepath.Join(root, "e"), "now a file")
}

// TestPlainTreeKeepsWhiteoutNames: a root file system (no layers) may
// hold files whose names merely look like whiteouts.
func TestPlainTreeKeepsWhiteoutNames(t *testing.T) {
	root, _ := sandboxDirs(t)
	u, err := New(root, base, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	defer u.Close()
	if err := u.Apply(bytes.NewReader(archive(t, file(".wh.keep", "k"))), false); err != nil {
		t.Fatal(err)
	}
	mustRead(t, filepath.Join(root, ".wh.keep"), "k")
}

func TestClean(t *testing.T) {
	for in, want := range map[string]string{"./a/b/": "a/b", "a//b": "a/b", ".": "", "./": "", "a/./b": "a/b"} {
		if got, err := Clean(in); err != nil || got != want {
			t.Errorf("Clean(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"/a", "..", "a/..", "a/../b", "a\x00b", strings.Repeat("a", MaxName+1)} {
		if _, err := Clean(in); !errors.Is(err, ErrUnsafe) {
			t.Errorf("Clean(%q) error %v, want ErrUnsafe", in, err)
		}
	}
}

// FuzzApply feeds arbitrary bytes as two layers and checks that nothing
// outside the root ever changes and nothing panics.
func FuzzApply(f *testing.F) {
	f.Add(archive(f, symlink("evil", "../outside"), file("evil/victim", "pwned")))
	f.Add(archive(f, hardlink("l", "../outside/victim")))
	f.Add(archive(f, symlink("d", "/.."), hardlink("l", "d/outside/victim"), file("d/outside/new", "x")))
	f.Add(archive(f, dir("a"), file("a/x", "1"), file("a/.wh..wh..opq", ""), file(".wh.a", "")))
	f.Add(archive(f, symlink("a", "."), symlink("a/b", ".."), file("a/b/c", "x")))
	f.Add([]byte("not a tar"))
	f.Fuzz(func(t *testing.T, data []byte) {
		root, outside := sandboxDirs(t)
		before := snapshot(t, outside)
		_, _ = apply(t, root, Limits{Bytes: 1 << 20, Entries: 1000}, data, data)
		if after := snapshot(t, outside); after != before {
			t.Fatalf("outside the root changed:\n%s\nwas\n%s", after, before)
		}
	})
}

// TestReplaceInCachedParent: entries that replace something in the
// directory the previous entry used (the cached parent) must not lose
// that directory's descriptor midway.
func TestReplaceInCachedParent(t *testing.T) {
	root, _ := sandboxDirs(t)
	l1 := archive(t, dir("a"), dir("a/d"), file("a/d/x", "1"), dir("a/d/sub"), file("a/d/sub/f", "s"), symlink("a/d/l", "x"))
	l2 := archive(t, file("a/d/w", "2"), file("a/d/x", "replaced"), file("a/d/sub", "dir became a file"), file("a/d/l", "link became a file"), file("a/d/z", "3"))
	if _, err := apply(t, root, Limits{}, l1, l2); err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]string{"a/d/w": "2", "a/d/x": "replaced", "a/d/sub": "dir became a file", "a/d/l": "link became a file", "a/d/z": "3"} {
		mustRead(t, filepath.Join(root, p), want)
	}
}
