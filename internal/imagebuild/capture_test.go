package imagebuild

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/image"
	"github.com/airlockhq/airlock/internal/image/imagetest"
	"github.com/airlockhq/airlock/internal/testutil"
	"github.com/airlockhq/airlock/internal/testutil/isolatednet"
	"github.com/airlockhq/airlock/result"
	"github.com/airlockhq/airlock/sandbox"
)

func TestMain(m *testing.M) {
	// Sandboxes re-execute the test binary as their init.
	if code, ok := sandbox.Child(); ok {
		os.Exit(code)
	}
	// In a network namespace with only lo: a step that tries a
	// destination reaches nothing, even were the code wrong.
	code := isolatednet.Main(m)
	if rtVal != nil {
		rtVal.Close()
	}
	os.Exit(code)
}

const testStateDir = "/run/airlock-test-imagebuild"

var testCgroup = testutil.CgroupParent("/airlock-test-imagebuild")

var (
	rtOnce sync.Once
	rtVal  *sandbox.Runtime
	rtErr  error
)

func runtimeFor(t *testing.T) *sandbox.Runtime {
	t.Helper()
	testutil.RequireRoot(t)
	rtOnce.Do(func() {
		rtVal, rtErr = sandbox.New(context.Background(), sandbox.Options{StateDir: testStateDir, CgroupParent: testCgroup, InitPath: testutil.InitPath(t)})
	})
	if rtErr != nil {
		t.Fatal(rtErr)
	}
	return rtVal
}

// busybox is Debian's static busybox (busybox-static, which scripts/test
// installs): a shell and its tools for a test image.
func busybox(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("/bin/busybox")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("/bin/busybox (busybox-static) is missing in CI: %v", err)
		}
		t.Skipf("needs /bin/busybox (Debian's busybox-static): %v", err)
	}
	return string(b)
}

// baseImage stores a small image with a shell, in a store of its own.
func baseImage(t *testing.T) *image.Image {
	_, img := baseStore(t)
	return img
}

// baseStore is baseImage and its store.
func baseStore(t *testing.T) (*image.Store, *image.Image) {
	t.Helper()
	st, err := image.Open(image.Options{Dir: filepath.Join(t.TempDir(), "images")})
	if err != nil {
		t.Fatal(err)
	}
	layer := imagetest.Tar(t,
		imagetest.Dir("bin/"), imagetest.Entry{Name: "bin/busybox", Data: busybox(t), Mode: 0o755},
		imagetest.Entry{Name: "bin/sh", Typ: tar.TypeSymlink, Link: "busybox"},
		imagetest.Dir("etc/"), imagetest.Entry{Name: "etc/passwd", Data: "root:x:0:0::/root:/bin/sh\n"},
		imagetest.Entry{Name: "etc/keep", Data: "k\n"}, imagetest.Entry{Name: "etc/gone", Data: "g\n"},
		imagetest.Dir("etc/dir/"), imagetest.Entry{Name: "etc/dir/a", Data: "a\n"},
		imagetest.Dir("srv/"), imagetest.Entry{Name: "srv/old", Data: "old\n"},
		imagetest.Dir("usr/"), imagetest.Dir("usr/share/"), imagetest.Entry{Name: "usr/share/untouched", Data: "u\n"},
	)
	imp, err := st.ImportReader(context.Background(), bytes.NewReader(layer), image.ImportOptions{Name: "capture-base"})
	if err != nil {
		t.Fatal(err)
	}
	return st, imp.Image
}

// TestCapture runs a step that adds, changes and removes files
// in a real sandbox's writable root, and reads back the layer Capture
// writes: exactly those changes, with whiteouts for what was removed, as
// the sandbox's ids; nothing of the sandbox's own mounts (/tmp, /proc),
// nothing airlock generates (/etc/hosts), nothing the step left alone.
func TestCapture(t *testing.T) {
	rt := runtimeFor(t)
	img := baseImage(t)
	spec := sandbox.Spec{Limits: sandbox.DefaultLimits(), Image: &sandbox.Image{Root: img.Root, Lock: img.Lock, Writable: true}, User: &sandbox.User{}}
	sb, err := rt.Create(t.Context(), spec)
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Destroy(context.Background())
	time.Sleep(image.SettleTime)
	since := image.Since()
	step := `set -e
echo new > /srv/new
echo changed > /etc/keep
rm /etc/gone
rm -r /etc/dir
mkdir -p /opt/app
echo x > /opt/app/f
ln /opt/app/f /opt/app/g
ln -s /opt/app/f /opt/link
chmod 0700 /srv/old
echo scratch > /tmp/t
echo 1.2.3.4 evil >> /etc/hosts
`
	r := sb.Exec(t.Context(), sandbox.ExecRequest{Argv: []string{"/bin/sh", "-c", step}, Env: []string{"PATH=/bin"}, Capture: true, KeepAlive: true})
	if r.Outcome != result.Exited || r.ExitCode != 0 {
		t.Fatalf("the step: %s %d %q %q", r.Outcome, r.ExitCode, r.Stderr, r.Error)
	}
	merged, err := os.Open(fmt.Sprintf("/proc/%d/root", sb.InitPid()))
	if err != nil {
		t.Fatal(err)
	}
	defer merged.Close()
	parent, err := os.Open(img.Root)
	if err != nil {
		t.Fatal(err)
	}
	defer parent.Close()
	var layer bytes.Buffer
	ch, err := image.Capture(&layer, merged, parent, since, sb.HostIDBase())
	if err != nil {
		t.Fatal(err)
	}
	type ent struct {
		typ      byte
		mode     int64
		uid, gid int
		data     string
	}
	got := map[string]ent{}
	tr := tar.NewReader(&layer)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(tr)
		got[h.Name] = ent{h.Typeflag, h.Mode, h.Uid, h.Gid, string(b) + h.Linkname}
	}
	want := map[string]ent{
		"etc/":         {tar.TypeDir, 0o755, 0, 0, ""},
		"etc/.wh.dir":  {tar.TypeReg, 0o600, 0, 0, ""},
		"etc/.wh.gone": {tar.TypeReg, 0o600, 0, 0, ""},
		"etc/keep":     {tar.TypeReg, 0o644, 0, 0, "changed\n"},
		"opt/":         {tar.TypeDir, 0o755, 0, 0, ""},
		"opt/app/":     {tar.TypeDir, 0o755, 0, 0, ""},
		"opt/app/f":    {tar.TypeReg, 0o644, 0, 0, "x\n"},
		"opt/app/g":    {tar.TypeLink, 0o644, 0, 0, "opt/app/f"},
		"opt/link":     {tar.TypeSymlink, 0o777, 0, 0, "/opt/app/f"},
		"srv/":         {tar.TypeDir, 0o755, 0, 0, ""},
		"srv/new":      {tar.TypeReg, 0o644, 0, 0, "new\n"},
		"srv/old":      {tar.TypeReg, 0o700, 0, 0, "old\n"},
	}
	for name, w := range want {
		g, ok := got[name]
		if !ok {
			t.Errorf("the layer lacks %s", name)
			continue
		}
		if g != w {
			t.Errorf("%s = %+v, want %+v", name, g, w)
		}
	}
	for name := range got {
		if _, ok := want[name]; !ok {
			t.Errorf("the layer has %s, which the step did not change (or which is the sandbox's own)", name)
		}
	}
	if ch.Added != 6 || ch.Changed != 4 || ch.Removed != 2 {
		t.Errorf("Changes = %+v, want 6 added (opt/, opt/app/, f, g, link, srv/new), 4 changed (etc/, keep, srv/, old), 2 removed", ch)
	}
}
