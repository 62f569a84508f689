// Package imagetest builds OCI images in tests with go-containerregistry:
// layers from entries, the test program as a static binary, and OCI
// layouts and docker save archives of them.
package imagetest

import (
	"archive/tar"
	"bytes"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/testutil"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// Entry is one tar entry; Typ 0 is a regular file, Mode 0 is 0644.
type Entry struct {
	Name, Data, Link string
	Typ              byte
	Mode             int64
}

// Dir is a directory entry.
func Dir(name string) Entry { return Entry{Name: name, Typ: tar.TypeDir, Mode: 0o755} }

// Tar writes entries as a tar stream.
func Tar(t testing.TB, ents ...Entry) []byte {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, e := range ents {
		h := &tar.Header{Name: e.Name, Typeflag: e.Typ, Mode: e.Mode, Linkname: e.Link, Size: int64(len(e.Data)), ModTime: time.Unix(1700000000, 0)}
		if e.Typ == 0 {
			h.Typeflag = tar.TypeReg
		}
		if h.Mode == 0 {
			h.Mode = 0o644
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(e.Data)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// Layer is a layer of a tar stream.
func Layer(t testing.TB, data []byte) v1.Layer {
	t.Helper()
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil })
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// Image is an image of the layers, for linux/arch, with config c.
func Image(t testing.TB, arch string, c v1.Config, layers ...[]byte) v1.Image {
	t.Helper()
	var ls []v1.Layer
	for _, l := range layers {
		ls = append(ls, Layer(t, l))
	}
	img, err := mutate.AppendLayers(empty.Image, ls...)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture, cf.Config = "linux", arch, c
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		t.Fatal(err)
	}
	return img
}

// Program is the test program (internal/testprog), a static binary.
func Program(t testing.TB) string {
	t.Helper()
	b, err := os.ReadFile(testutil.Binary(t, "github.com/airlockhq/airlock/internal/testprog"))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// Tool is the standard test image: the test program as /bin/t in one
// layer, with an /etc/passwd naming user app (1234:2345) and a file
// /etc/gone; in a second layer a whiteout of /etc/gone and /srv/data.
// Its config runs /bin/t id as app in /srv with GREETING=hello.
func Tool(t testing.TB, arch string) v1.Image {
	t.Helper()
	l1 := Tar(t, Dir("bin/"), Entry{Name: "bin/t", Data: Program(t), Mode: 0o755}, Dir("etc/"),
		Entry{Name: "etc/passwd", Data: "root:x:0:0::/root:/bin/sh\napp:x:1234:2345::/home/app:/bin/sh\n"},
		Entry{Name: "etc/gone", Data: "removed by layer 2"})
	l2 := Tar(t, Entry{Name: "etc/.wh.gone"}, Dir("srv/"), Entry{Name: "srv/data", Data: "layer two"})
	return Image(t, arch, v1.Config{Env: []string{"PATH=/bin", "GREETING=hello"}, WorkingDir: "/srv", User: "app", Cmd: []string{"/bin/t", "id"}}, l1, l2)
}

// RefName is the OCI annotation naming an image in a layout.
const RefName = "org.opencontainers.image.ref.name"

// Layout writes img as an OCI layout named ref, in a new directory.
func Layout(t testing.TB, img v1.Image, ref string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "layout")
	lp, err := layout.Write(p, empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	if err := lp.AppendImage(img, layout.WithAnnotations(map[string]string{RefName: ref})); err != nil {
		t.Fatal(err)
	}
	return p
}

// DockerSave writes images by tag as a docker save archive.
func DockerSave(t testing.TB, imgs map[string]v1.Image) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "saved.tar")
	m := map[name.Tag]v1.Image{}
	for tag, img := range imgs {
		tg, err := name.NewTag(tag)
		if err != nil {
			t.Fatal(err)
		}
		m[tg] = img
	}
	if err := tarball.MultiWriteToFile(p, m); err != nil {
		t.Fatal(err)
	}
	return p
}
