package image

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	kzstd "github.com/klauspost/compress/zstd"
	"golang.org/x/sys/unix"

	"github.com/airlockhq/airlock/internal/image/imagetest"
	"github.com/airlockhq/airlock/internal/image/unpack"
	"github.com/airlockhq/airlock/internal/image/zstd"
	"github.com/airlockhq/airlock/internal/testutil"
)

// The programs that import images register the zstd decoder; so do the
// tests.
func init() { RegisterZstd(zstd.Open) }

func testStore(t *testing.T) *Store {
	t.Helper()
	testutil.RequireRoot(t)
	dir, err := os.MkdirTemp("/var/tmp", "airlock-store-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	s, err := Open(Options{Dir: filepath.Join(dir, "store")})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// tarDir writes a directory as a tar file (an OCI archive, say).
func tarDir(t *testing.T, dir string, gz bool) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "archive.tar")
	args := []string{"-C", dir, "-cf", p, "."}
	if gz {
		p += ".gz"
		args = []string{"-C", dir, "-czf", p, "."}
	}
	if out, err := exec.Command("tar", args...).CombinedOutput(); err != nil {
		t.Fatalf("tar: %v: %s", err, out)
	}
	return p
}

func TestImportFormatsAgree(t *testing.T) {
	s := testStore(t)
	img := imagetest.Tool(t, runtime.GOARCH)
	want, err := img.ConfigName()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	saved := imagetest.DockerSave(t, map[string]v1.Image{"example.com/tool:1": img})
	lay := imagetest.Layout(t, img, "example.com/tool:1")

	first, err := s.Import(ctx, saved, ImportOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if first.Digest != want.String() || first.Name != "example.com/tool:1" || first.Existed || first.Format != "docker" {
		t.Fatalf("docker save: %+v (name %q), want digest %s", first.Image, first.Name, want)
	}
	checkTree(t, first.Root)
	c := first.Config
	if c.UID == nil || *c.UID != 1234 || *c.GID != 2345 || c.WorkingDir != "/srv" || strings.Join(c.Env, " ") != "PATH=/bin GREETING=hello" {
		t.Errorf("config %+v", c)
	}
	for _, src := range []struct{ name, path string }{{"oci layout", lay}, {"oci archive", tarDir(t, lay, false)}, {"gzipped oci archive", tarDir(t, lay, true)}} {
		got, err := s.Import(ctx, src.path, ImportOptions{Name: "again"})
		if err != nil {
			t.Fatalf("%s: %v", src.name, err)
		}
		if got.Digest != first.Digest || !got.Existed {
			t.Errorf("%s: digest %s existed %v, want %s stored already", src.name, got.Digest, got.Existed, first.Digest)
		}
	}
	// A fresh store unpacks the layout to the same tree.
	s2 := testStore(t)
	got, err := s2.Import(ctx, lay, ImportOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Digest != first.Digest || got.Format != "oci" || got.Name != "example.com/tool:1" {
		t.Errorf("oci layout: %+v name %q", got.Image, got.Name)
	}
	if a, b := listTree(t, first.Root), listTree(t, got.Root); a != b {
		t.Errorf("trees differ:\n%s\n---\n%s", a, b)
	}
}

// checkTree: the static binary from layer 1, the whiteout and the file
// of layer 2, owners in the image range.
func checkTree(t *testing.T, root string) {
	t.Helper()
	if _, err := os.Stat(filepath.Join(root, "etc/gone")); !os.IsNotExist(err) {
		t.Errorf("whiteout not applied: %v", err)
	}
	b, err := os.ReadFile(filepath.Join(root, "srv/data"))
	if err != nil || string(b) != "layer two" {
		t.Errorf("srv/data = %q, %v", b, err)
	}
	fi, err := os.Stat(filepath.Join(root, "bin/t"))
	if err != nil || fi.Mode().Perm() != 0o755 {
		t.Fatalf("bin/t: %v %v", fi, err)
	}
	if uid := fi.Sys().(*syscall.Stat_t).Uid; uid != DefaultIDBase {
		t.Errorf("bin/t owned by %d, want %d", uid, DefaultIDBase)
	}
}

func listTree(t *testing.T, root string) string {
	t.Helper()
	var lines []string
	filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, _ := d.Info()
		rel, _ := filepath.Rel(root, p)
		size := int64(0)
		if fi.Mode().IsRegular() {
			size = fi.Size()
		}
		lines = append(lines, rel+" "+fi.Mode().String()+" "+itoa(size))
		return nil
	})
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

func TestImportSelection(t *testing.T) {
	s := testStore(t)
	ctx := context.Background()
	a, b := imagetest.Tool(t, runtime.GOARCH), imagetest.Tool(t, runtime.GOARCH)
	b, _ = mutate.Config(b, v1.Config{Cmd: []string{"other"}})
	saved := imagetest.DockerSave(t, map[string]v1.Image{"tools/a:1": a, "tools/b:2": b})
	if _, err := s.Import(ctx, saved, ImportOptions{}); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "tools/a:1") {
		t.Errorf("several images without --name: %v", err)
	}
	if _, err := s.Import(ctx, saved, ImportOptions{Name: "tools/c:3"}); !errors.Is(err, ErrInvalid) {
		t.Errorf("unknown tag: %v", err)
	}
	got, err := s.Import(ctx, saved, ImportOptions{Name: "tools/b:2"})
	if err != nil {
		t.Fatal(err)
	}
	if want, _ := b.ConfigName(); got.Digest != want.String() {
		t.Errorf("picked %s, want b %s", got.Digest, want)
	}

	// A multi-platform index: the host's platform is picked.
	other := "s390x"
	if runtime.GOARCH == "s390x" {
		other = "amd64"
	}
	host, foreign := imagetest.Tool(t, runtime.GOARCH), imagetest.Tool(t, other)
	idx := mutate.AppendManifests(empty.Index,
		mutate.IndexAddendum{Add: foreign, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: other}}},
		mutate.IndexAddendum{Add: host, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: runtime.GOARCH}}})
	p := filepath.Join(t.TempDir(), "multi")
	lp, err := layout.Write(p, empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	if err := lp.AppendIndex(idx, layout.WithAnnotations(map[string]string{imagetest.RefName: "multi"})); err != nil {
		t.Fatal(err)
	}
	got, err = s.Import(ctx, p, ImportOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if want, _ := host.ConfigName(); got.Digest != want.String() || got.Platform != "linux/"+runtime.GOARCH {
		t.Errorf("multi-platform: %s %s, want %s", got.Digest, got.Platform, want)
	}
	// A single image for another platform is refused.
	if _, err := s.Import(ctx, imagetest.Layout(t, foreign, "foreign"), ImportOptions{}); !errors.Is(err, ErrInvalid) {
		t.Errorf("foreign platform: %v", err)
	}
}

func TestImportRootFS(t *testing.T) {
	s := testStore(t)
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "mytree")
	for p, data := range map[string]string{"usr/bin/tool": "#!/bin/sh\n", "etc/os-release": "ID=test\n"} {
		os.MkdirAll(filepath.Join(dir, filepath.Dir(p)), 0o755)
		os.WriteFile(filepath.Join(dir, p), []byte(data), 0o755)
	}
	os.Symlink("usr/bin", filepath.Join(dir, "bin"))
	if err := os.Link(filepath.Join(dir, "usr/bin/tool"), filepath.Join(dir, "usr/bin/tool-again")); err != nil {
		t.Fatal(err)
	}
	os.Symlink("/etc/shadow", filepath.Join(dir, "shadow-link"))
	got, err := s.Import(ctx, dir, ImportOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Name != "mytree" || got.Format != "rootfs" || got.Existed {
		t.Errorf("%+v name %q", got.Image, got.Name)
	}
	// The link is kept as a link: the host's /etc/shadow was never read.
	if l, err := os.Readlink(filepath.Join(got.Root, "shadow-link")); err != nil || l != "/etc/shadow" {
		t.Errorf("shadow-link: %q %v", l, err)
	}
	// A hardlink stays one file.
	var a, b syscall.Stat_t
	syscall.Stat(filepath.Join(got.Root, "usr/bin/tool"), &a)
	syscall.Stat(filepath.Join(got.Root, "usr/bin/tool-again"), &b)
	if a.Ino == 0 || a.Ino != b.Ino || a.Nlink != 2 {
		t.Errorf("hardlinked files: inodes %d %d, links %d", a.Ino, b.Ino, a.Nlink)
	}
	again, err := s.Import(ctx, dir, ImportOptions{Name: "mytree2"})
	if err != nil || !again.Existed || again.Digest != got.Digest {
		t.Errorf("second import: %+v %v", again, err)
	}
	// The same tree as a gzipped tarball unpacks to the same files.
	tgz := filepath.Join(t.TempDir(), "tree.tar.gz")
	f, _ := os.Create(tgz)
	zw := gzip.NewWriter(f)
	if err := writeTree(mustOpenDir(t, dir), zw); err != nil {
		t.Fatal(err)
	}
	zw.Close()
	f.Close()
	fromTar, err := s.Import(ctx, tgz, ImportOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if fromTar.Name != "tree" || fromTar.Digest != got.Digest {
		t.Errorf("tarball: name %q digest %s, want %s", fromTar.Name, fromTar.Digest, got.Digest)
	}
	// And zstd-compressed: refused by a program without the decoder,
	// leaving no name behind; with it, the same files again.
	tzst := filepath.Join(t.TempDir(), "zstree.tar.zst")
	f, _ = os.Create(tzst)
	zsw, err := kzstd.NewWriter(f)
	if err != nil {
		t.Fatal(err)
	}
	if err := writeTree(mustOpenDir(t, dir), zsw); err != nil {
		t.Fatal(err)
	}
	zsw.Close()
	f.Close()
	RegisterZstd(nil)
	_, err = s.Import(ctx, tzst, ImportOptions{})
	RegisterZstd(zstd.Open)
	if err == nil || !strings.Contains(err.Error(), "no zstd decoder") {
		t.Errorf("zstd without a decoder: %v", err)
	}
	if _, err := s.Resolve("zstree"); err == nil {
		t.Error("the refused import left a name")
	}
	fromZst, err := s.Import(ctx, tzst, ImportOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if fromZst.Name != "zstree" || fromZst.Digest != got.Digest {
		t.Errorf("zstd tarball: name %q digest %s, want %s", fromZst.Name, fromZst.Digest, got.Digest)
	}
}

// TestImportRefusals: malicious or broken archives fail, and leave
// nothing behind, in the store or outside it.
func TestImportRefusals(t *testing.T) {
	s := testStore(t)
	ctx := context.Background()
	outside := t.TempDir()
	os.WriteFile(filepath.Join(outside, "victim"), []byte("untouched"), 0o644)
	rel, _ := filepath.Rel("/", outside)
	escape := func(t *testing.T, ents ...imagetest.Entry) v1.Image {
		img, err := mutate.AppendLayers(empty.Image, imagetest.Layer(t, imagetest.Tar(t, ents...)))
		if err != nil {
			t.Fatal(err)
		}
		cf, _ := img.ConfigFile()
		cf = cf.DeepCopy()
		cf.OS, cf.Architecture = "linux", runtime.GOARCH
		img, _ = mutate.ConfigFile(img, cf)
		return img
	}
	for _, tt := range []struct {
		name string
		img  func(t *testing.T) v1.Image
	}{
		{"dot-dot", func(t *testing.T) v1.Image {
			return escape(t, imagetest.Entry{Name: "../../../../../../" + rel + "/victim", Data: "pwned"})
		}},
		{"absolute", func(t *testing.T) v1.Image {
			return escape(t, imagetest.Entry{Name: outside + "/victim", Data: "pwned"})
		}},
		{"hardlink out", func(t *testing.T) v1.Image {
			return escape(t, imagetest.Entry{Name: "l", Typ: tar.TypeLink, Link: "../../../../../../" + rel + "/victim"})
		}},
		{"duplicate", func(t *testing.T) v1.Image {
			return escape(t, imagetest.Entry{Name: "a", Data: "1"}, imagetest.Entry{Name: "a", Data: "2"})
		}},
		{"wrong diff_id", func(t *testing.T) v1.Image {
			img := escape(t, imagetest.Entry{Name: "a", Data: "1"})
			cf, _ := img.ConfigFile()
			cf = cf.DeepCopy()
			cf.RootFS.DiffIDs[0] = v1.Hash{Algorithm: "sha256", Hex: strings.Repeat("0", 64)}
			img, _ = mutate.ConfigFile(img, cf)
			return img
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := imagetest.Layout(t, tt.img(t), "bad")
			if got, err := s.Import(ctx, p, ImportOptions{}); err == nil {
				t.Fatalf("imported: %+v", got)
			} else {
				t.Log(err)
			}
			if b, _ := os.ReadFile(filepath.Join(outside, "victim")); string(b) != "untouched" {
				t.Errorf("victim = %q", b)
			}
			for _, sub := range []string{"sha256", "tmp"} {
				if ents, _ := os.ReadDir(filepath.Join(s.Dir(), sub)); len(ents) != 0 {
					t.Errorf("%s left: %v", sub, ents)
				}
			}
			if _, err := s.Resolve("bad"); !errors.Is(err, ErrNotFound) {
				t.Errorf("name set: %v", err)
			}
		})
	}
	// Limits.
	small, err := Open(Options{Dir: s.Dir(), Limits: limitsOf(100, 0)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := small.Import(ctx, imagetest.Layout(t, escape(t, imagetest.Entry{Name: "big", Data: strings.Repeat("x", 200)}), "big"), ImportOptions{}); err == nil {
		t.Error("over the size cap imported")
	}
}

func TestRemoveAndGC(t *testing.T) {
	s := testStore(t)
	ctx := context.Background()
	img := imagetest.Tool(t, runtime.GOARCH)
	p := imagetest.Layout(t, img, "tool:1")
	got, err := s.Import(ctx, p, ImportOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Import(ctx, p, ImportOptions{Name: "tool:latest"}); err != nil {
		t.Fatal(err)
	}
	if list, _ := s.List(); len(list) != 1 || strings.Join(list[0].Names, ",") != "tool:1,tool:latest" {
		t.Fatalf("list %+v", list)
	}
	// A configured tool's image is refused without force.
	used := func(img *Image) string { return "mytool" }
	if _, err := s.Remove("tool:1", RemoveOptions{Used: used}); !errors.Is(err, ErrInUse) {
		t.Errorf("used by a tool: %v", err)
	}
	// A live sandbox (a holder of the lock) too, for the last name.
	r, err := s.Remove("tool:1", RemoveOptions{})
	if err != nil || r.Digest != "" {
		t.Fatalf("remove one of two names: %+v %v", r, err)
	}
	lock, _ := os.Open(got.Lock)
	flockShared(t, lock)
	if _, err := s.Remove("tool:latest", RemoveOptions{}); !errors.Is(err, ErrInUse) {
		t.Errorf("live sandbox: %v", err)
	}
	lock.Close()
	r, err = s.Remove("tool:latest", RemoveOptions{})
	if err != nil || r.Digest != got.Digest {
		t.Fatalf("remove last: %+v %v", r, err)
	}
	if _, err := os.Stat(got.Root); !os.IsNotExist(err) {
		t.Errorf("content still there: %v", err)
	}
	if _, err := s.Resolve("tool:latest"); !errors.Is(err, ErrNotFound) {
		t.Errorf("resolve after rm: %v", err)
	}
	// GC: content without a name goes.
	got, _ = s.Import(ctx, p, ImportOptions{})
	names, _ := s.readNames()
	delete(names, "tool:1")
	s.writeNames(names)
	removed, err := s.GC()
	if err != nil || len(removed) != 1 || removed[0] != got.Digest {
		t.Errorf("gc: %v %v", removed, err)
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

func mustOpenDir(t *testing.T, p string) int {
	t.Helper()
	fd, err := syscall.Open(p, syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Close(fd) })
	return fd
}

func limitsOf(bytes int64, entries int) unpack.Limits {
	return unpack.Limits{Bytes: bytes, Entries: entries}
}

func flockShared(t *testing.T, f *os.File) {
	t.Helper()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_SH); err != nil {
		t.Fatal(err)
	}
}

// TestDockerSaveLinkedLayers: older docker save archives store a layer
// shared by two positions once and link the other to it.
func TestDockerSaveLinkedLayers(t *testing.T) {
	s := testStore(t)
	layer := imagetest.Tar(t, imagetest.Entry{Name: "f", Data: "shared"})
	img := imagetest.Image(t, runtime.GOARCH, v1.Config{}, layer, layer)
	cfg, err := img.RawConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	archive := imagetest.Tar(t,
		imagetest.Entry{Name: "manifest.json", Data: `[{"Config":"cfg.json","RepoTags":["linked:1"],"Layers":["a/layer.tar","b/layer.tar"]}]`},
		imagetest.Entry{Name: "cfg.json", Data: string(cfg)},
		imagetest.Dir("a/"), imagetest.Entry{Name: "a/layer.tar", Data: string(layer)},
		imagetest.Dir("b/"), imagetest.Entry{Name: "b/layer.tar", Typ: tar.TypeSymlink, Link: "../a/layer.tar"},
		// A link out of the archive leads nowhere.
		imagetest.Entry{Name: "c", Typ: tar.TypeSymlink, Link: "../../../etc/passwd"})
	p := filepath.Join(t.TempDir(), "old.tar")
	if err := os.WriteFile(p, archive, 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := s.Import(context.Background(), p, ImportOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if want, _ := img.ConfigName(); got.Digest != want.String() || got.Name != "linked:1" {
		t.Errorf("got %s %q, want %s", got.Digest, got.Name, want)
	}
	// The same archive unpacked into a directory.
	dir := filepath.Join(t.TempDir(), "saved")
	os.Mkdir(dir, 0o755)
	if out, err := exec.Command("tar", "-C", dir, "-xf", p).CombinedOutput(); err != nil {
		t.Fatalf("tar: %v %s", err, out)
	}
	if again, err := s.Import(context.Background(), dir, ImportOptions{Name: "linked:2"}); err != nil || again.Digest != got.Digest {
		t.Errorf("from a directory: %+v %v", again, err)
	}
	// A directory archive whose config links out of it is refused.
	os.Remove(filepath.Join(dir, "cfg.json"))
	os.Symlink("/etc/passwd", filepath.Join(dir, "cfg.json"))
	s2 := testStore(t)
	if _, err := s2.Import(context.Background(), dir, ImportOptions{Name: "out"}); err == nil {
		t.Error("a config linked out of the archive was read")
	}
}

// TestStoreNeedsIDMappedMounts: a store on a file system without idmapped
// mounts (ramfs) refuses imports, which sandboxes could not use.
func TestStoreNeedsIDMappedMounts(t *testing.T) {
	testutil.RequireRoot(t)
	dir := t.TempDir()
	if err := syscall.Mount("ramfs", dir, "ramfs", 0, ""); err != nil {
		t.Skipf("mount ramfs: %v", err)
	}
	t.Cleanup(func() { syscall.Unmount(dir, syscall.MNT_DETACH) })
	s, err := Open(Options{Dir: filepath.Join(dir, "store")})
	if err != nil {
		t.Fatal(err)
	}
	tree := t.TempDir()
	os.WriteFile(filepath.Join(tree, "f"), []byte("x"), 0o644)
	_, err = s.Import(context.Background(), tree, ImportOptions{Name: "x"})
	if err == nil || !strings.Contains(err.Error(), "does not support idmapped mounts") {
		t.Fatalf("import into a ramfs store: %v", err)
	}
	if ents, _ := os.ReadDir(filepath.Join(s.Dir(), "sha256")); len(ents) != 0 {
		t.Errorf("content left: %v", ents)
	}
}

// TestTrimCache fills the build cache with step images of known sizes
// and trims it: the least recently used go first, down to the ceiling;
// a named one, one used within the grace and one a live sandbox holds
// (its lock taken shared) stay; their entries go with them, so the cache
// then misses.
func TestTrimCache(t *testing.T) {
	s := testStore(t)
	imp, err := s.ImportReader(context.Background(), bytes.NewReader(imagetest.Tar(t, imagetest.Dir("etc/"))), ImportOptions{Name: "base"})
	if err != nil {
		t.Fatal(err)
	}
	step := func(name string, size int) *Image {
		layer := imagetest.Tar(t, imagetest.Entry{Name: name, Data: strings.Repeat("x", size)})
		img, err := s.Derive(context.Background(), imp.Image, bytes.NewReader(layer), Config{}, "")
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Cache("key-"+name, img.Digest); err != nil {
			t.Fatal(err)
		}
		return img
	}
	oldest, older, named, held, _ := step("a", 1000), step("b", 1000), step("c", 1000), step("d", 1000), step("e", 1000)
	if err := s.Tag("kept", named.Digest); err != nil {
		t.Fatal(err)
	}
	// Ages: a the oldest, then b, d; e used just now.
	m := s.readCache()
	for k, age := range map[string]time.Duration{"key-a": 5 * time.Hour, "key-b": 4 * time.Hour, "key-c": 6 * time.Hour, "key-d": 3 * time.Hour} {
		e := m[k]
		e.Used = time.Now().Add(-age)
		m[k] = e
	}
	b, _ := json.Marshal(m)
	if err := writeAtomic(filepath.Join(s.Dir(), buildCache), b); err != nil {
		t.Fatal(err)
	}
	lock, err := os.Open(held.Lock)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_SH); err != nil {
		t.Fatal(err)
	}
	// Four unnamed images of about 1000 bytes each; a ceiling of 1500
	// wants three gone: a and b go, d is held, e is within the grace.
	removed, freed, err := s.TrimCache(1500)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(removed, []string{oldest.Digest, older.Digest}) || freed < 2000 {
		t.Errorf("removed %v (%d bytes), want a's and b's", removed, freed)
	}
	for _, k := range []string{"key-a", "key-b"} {
		if _, ok := s.Cached(k); ok {
			t.Errorf("%s still hits", k)
		}
	}
	for _, k := range []string{"key-c", "key-d", "key-e"} {
		if _, ok := s.Cached(k); !ok {
			t.Errorf("%s no longer hits", k)
		}
	}
}

// TestDeriveLinks: a derived image shares its parent's unchanged files
// (hardlinks, not copies), and what its layer changes (content, mode,
// owner, removal) is a file of its own: the parent's are as they were.
func TestDeriveLinks(t *testing.T) {
	s := testStore(t)
	base := imagetest.Tar(t, imagetest.Dir("etc/"),
		imagetest.Entry{Name: "etc/kept", Data: "kept\n"}, imagetest.Entry{Name: "etc/changed", Data: "old\n", Mode: 0o644},
		imagetest.Entry{Name: "etc/moded", Data: "m\n", Mode: 0o644}, imagetest.Entry{Name: "etc/gone", Data: "g\n"},
		imagetest.Entry{Name: "etc/link", Typ: tar.TypeSymlink, Link: "kept"})
	imp, err := s.ImportReader(context.Background(), bytes.NewReader(base), ImportOptions{Name: "base"})
	if err != nil {
		t.Fatal(err)
	}
	parent := imp.Image
	layer := imagetest.Tar(t, imagetest.Entry{Name: "etc/changed", Data: "new\n", Mode: 0o600},
		imagetest.Entry{Name: "etc/moded", Data: "m\n", Mode: 0o755}, imagetest.Entry{Name: "etc/.wh.gone"})
	child, err := s.Derive(context.Background(), parent, bytes.NewReader(layer), Config{}, "")
	if err != nil {
		t.Fatal(err)
	}
	stat := func(root, p string) *unix.Stat_t {
		var st unix.Stat_t
		if err := unix.Lstat(filepath.Join(root, p), &st); err != nil {
			return nil
		}
		return &st
	}
	if p, c := stat(parent.Root, "etc/kept"), stat(child.Root, "etc/kept"); p == nil || c == nil || p.Ino != c.Ino {
		t.Error("etc/kept is not shared")
	}
	for _, f := range []string{"etc/changed", "etc/moded"} {
		if p, c := stat(parent.Root, f), stat(child.Root, f); p == nil || c == nil || p.Ino == c.Ino {
			t.Errorf("%s is shared though the layer changed it", f)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(parent.Root, "etc/changed")); string(b) != "old\n" {
		t.Errorf("the parent's etc/changed = %q", b)
	}
	if p := stat(parent.Root, "etc/moded"); p == nil || p.Mode&0o777 != 0o644 || p.Uid != s.opts.IDBase {
		t.Errorf("the parent's etc/moded: %+v", p)
	}
	if stat(parent.Root, "etc/gone") == nil || stat(child.Root, "etc/gone") != nil {
		t.Error("the whiteout removed the parent's file, or not the child's")
	}
	if l, err := os.Readlink(filepath.Join(child.Root, "etc/link")); err != nil || l != "kept" {
		t.Errorf("the symlink: %q %v", l, err)
	}
	if child.OwnBytes != 6 {
		t.Errorf("OwnBytes = %d, want 6 (the layer's files)", child.OwnBytes)
	}
}
