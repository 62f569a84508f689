package image

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/airlockhq/airlock/internal/image/imagetest"
	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// FuzzArchive feeds arbitrary bytes as an image archive: indexing it and
// choosing an image from it (manifest.json, index.json, manifests,
// configs) must fail cleanly or succeed, never panic or hang.
func FuzzArchive(f *testing.F) {
	img := imagetest.Tool(f, runtime.GOARCH)
	for _, p := range []string{imagetest.DockerSave(f, map[string]v1.Image{"a/b:1": img})} {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, "")
		f.Add(b, "a/b:1")
	}
	f.Add(imagetest.Tar(f, imagetest.Entry{Name: "index.json", Data: `{"schemaVersion":2,"manifests":[{"mediaType":"application/vnd.oci.image.index.v1+json","digest":"sha256:0000000000000000000000000000000000000000000000000000000000000000","size":1}]}`}), "")
	f.Add(imagetest.Tar(f, imagetest.Entry{Name: "manifest.json", Data: `[{"Config":"../../etc/passwd","Layers":["/etc/shadow"]}]`}), "")
	f.Fuzz(func(t *testing.T, data []byte, want string) {
		p := filepath.Join(t.TempDir(), "a.tar")
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		fh, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		defer fh.Close()
		tb, err := indexTar(fh)
		if err != nil || !isImageBundle(tb) {
			return
		}
		oi, err := selectImage(tb, want)
		if err != nil {
			return
		}
		for _, l := range oi.layers {
			if rc, err := tb.open(l.path); err == nil {
				rc.Close()
			}
		}
	})
}
