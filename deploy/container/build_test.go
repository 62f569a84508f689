package container

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/testutil"
)

func TestParseContainerfile(t *testing.T) {
	f, err := os.Open("Containerfile")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	s, err := ParseContainerfile(f)
	if err != nil {
		t.Fatal(err)
	}
	want := Spec{Entrypoint: []string{"/usr/local/bin/airlock"}, Cmd: []string{"help"},
		Programs: []string{"airlock", "airlockd", "airlock-init"}, Dest: "/usr/local/bin/", Packages: []string{"ca-certificates", "python3"}}
	if !slices.Equal(s.Entrypoint, want.Entrypoint) || !slices.Equal(s.Cmd, want.Cmd) || !slices.Equal(s.Programs, want.Programs) ||
		s.Dest != want.Dest || !slices.Equal(s.Packages, want.Packages) {
		t.Errorf("got %+v, want %+v", s, want)
	}

	for _, tc := range []struct{ name, in, err string }{
		{"no COPY", "FROM x\nENTRYPOINT [\"/a\"]\n", "no COPY"},
		{"no ENTRYPOINT", "FROM x\nCOPY --from=b /out/a /bin/\n", "no ENTRYPOINT"},
		{"shell form", "FROM x\nCOPY --from=b /out/a /bin/\nENTRYPOINT /a\n", "JSON form"},
		{"COPY from the context", "FROM x\nCOPY a /bin/\nENTRYPOINT [\"/a\"]\n", "COPY --from"},
		// Only the final stage counts.
		{"build stage only", "FROM x\nCOPY --from=b /out/a /bin/\nENTRYPOINT [\"/a\"]\nFROM y\n", "no COPY"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := ParseContainerfile(strings.NewReader(tc.in)); err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("got %v, want an error with %q", err, tc.err)
			}
		})
	}
}

// TestBuild builds an image from a small base twice and reads it back as
// an image runtime would: the same bytes both times, an index that names
// it, a manifest whose layers are the blobs it names, a config whose
// diff_ids are the layers' uncompressed digests, and every file's time
// clamped to the epoch.
func TestBuild(t *testing.T) {
	dir := t.TempDir()
	epoch := time.Unix(1_700_000_000, 0).UTC()
	base := filepath.Join(dir, "base.tar")
	var bb bytes.Buffer
	tw := tar.NewWriter(&bb)
	later := epoch.Add(time.Hour)
	for _, h := range []*tar.Header{
		{Typeflag: tar.TypeDir, Name: "./", Mode: 0o755, ModTime: later},
		{Typeflag: tar.TypeDir, Name: "./etc/", Mode: 0o755, ModTime: later},
		{Typeflag: tar.TypeReg, Name: "./etc/os-release", Mode: 0o644, Size: 5, ModTime: later, Uname: "someone", Uid: 0},
		{Typeflag: tar.TypeSymlink, Name: "./bin", Linkname: "usr/bin", ModTime: later},
		{Typeflag: tar.TypeLink, Name: "./etc/hard", Linkname: "./etc/os-release", ModTime: later},
	} {
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Size > 0 {
			tw.Write([]byte("bookw"))
		}
	}
	tw.Close()
	if err := os.WriteFile(base, bb.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "bin")
	os.Mkdir(bin, 0o755)
	for _, p := range []string{"airlock", "airlockd", "airlock-init"} {
		os.WriteFile(filepath.Join(bin, p), []byte("#!"+p), 0o700)
	}
	o := Options{Spec: Spec{Entrypoint: []string{"/usr/local/bin/airlock"}, Cmd: []string{"help"}, Programs: []string{"airlock", "airlockd", "airlock-init"}, Dest: "/usr/local/bin/"},
		Base: base, Bin: bin, Name: "airlock:v1", Epoch: epoch}
	var a, b bytes.Buffer
	da, err := Build(&a, o)
	if err != nil {
		t.Fatal(err)
	}
	db, err := Build(&b, o)
	if err != nil {
		t.Fatal(err)
	}
	if da != db || !bytes.Equal(a.Bytes(), b.Bytes()) {
		t.Fatalf("two builds of the same inputs differ: %s %s", da, db)
	}

	files := map[string][]byte{}
	tr := tar.NewReader(&a)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		if !h.ModTime.Equal(epoch) {
			t.Errorf("%s: mtime %v, want %v", h.Name, h.ModTime, epoch)
		}
		body, _ := io.ReadAll(tr)
		files[h.Name] = body
	}
	blob := func(d string) []byte {
		t.Helper()
		b, ok := files["blobs/sha256/"+strings.TrimPrefix(d, "sha256:")]
		if !ok {
			t.Fatalf("no blob %s", d)
		}
		if sum := sha256.Sum256(b); "sha256:"+hex.EncodeToString(sum[:]) != d {
			t.Fatalf("blob %s holds bytes of another digest", d)
		}
		return b
	}
	if string(files["oci-layout"]) != `{"imageLayoutVersion":"1.0.0"}` {
		t.Errorf("oci-layout: %q", files["oci-layout"])
	}
	var index struct {
		Manifests []descriptor `json:"manifests"`
	}
	if err := json.Unmarshal(files["index.json"], &index); err != nil || len(index.Manifests) != 1 {
		t.Fatalf("index.json: %v %s", err, files["index.json"])
	}
	if m := index.Manifests[0]; m.Digest != da || m.Annotations[annoRefName] != "v1" || m.Annotations[annoContainerd] != "docker.io/library/airlock:v1" {
		t.Errorf("index.json names %+v, want %s as v1 and docker.io/library/airlock:v1", m, da)
	}
	var manifest struct {
		Config descriptor   `json:"config"`
		Layers []descriptor `json:"layers"`
	}
	if err := json.Unmarshal(blob(da), &manifest); err != nil || len(manifest.Layers) != 2 {
		t.Fatalf("manifest: %v %s", err, blob(da))
	}
	var config struct {
		Config struct{ Entrypoint, Cmd []string }
		RootFS struct {
			DiffIDs []string `json:"diff_ids"`
		} `json:"rootfs"`
	}
	if err := json.Unmarshal(blob(manifest.Config.Digest), &config); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(config.Config.Entrypoint, o.Spec.Entrypoint) || !slices.Equal(config.Config.Cmd, o.Spec.Cmd) {
		t.Errorf("config: %+v", config.Config)
	}
	layers := make([]map[string]*tar.Header, 2)
	for i, l := range manifest.Layers {
		zr, err := gzip.NewReader(bytes.NewReader(blob(l.Digest)))
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := io.ReadAll(zr)
		if sum := sha256.Sum256(raw); "sha256:"+hex.EncodeToString(sum[:]) != config.RootFS.DiffIDs[i] {
			t.Errorf("layer %d: diff_id %s is not its tar's digest", i, config.RootFS.DiffIDs[i])
		}
		layers[i] = map[string]*tar.Header{}
		lr := tar.NewReader(bytes.NewReader(raw))
		for {
			h, err := lr.Next()
			if err != nil {
				break
			}
			if !h.ModTime.Equal(epoch) {
				t.Errorf("layer %d: %s has mtime %v", i, h.Name, h.ModTime)
			}
			layers[i][h.Name] = h
		}
	}
	if h := layers[0]["etc/hard"]; h == nil || h.Linkname != "etc/os-release" {
		t.Errorf("the base's hard link: %+v", h)
	}
	if _, ok := layers[0][""]; ok {
		t.Errorf("the base layer has an entry for the root itself")
	}
	for _, p := range o.Spec.Programs {
		if h := layers[1]["usr/local/bin/"+p]; h == nil || h.Mode != 0o755 || h.Uid != 0 {
			t.Errorf("program %s in the second layer: %+v", p, h)
		}
	}
}

// ImageEnv names the image scripts/container-image built, which
// TestImageRuns imports and runs.
const ImageEnv = "AIRLOCK_TEST_CONTAINER_IMAGE"

// TestImageRuns imports the image scripts/container-image built into
// airlock's own image store (as an OCI layout) and runs its programs and
// its Python in a sandbox of it: the image is whole and runnable, not
// only well-formed.
func TestImageRuns(t *testing.T) {
	testutil.RequireRoot(t)
	img := os.Getenv(ImageEnv)
	if img == "" {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s is not set: scripts/test builds the image (scripts/container-image)", ImageEnv)
		}
		t.Skipf("%s is not set (scripts/test builds the image with scripts/container-image)", ImageEnv)
	}
	airlock := testutil.Binary(t, "github.com/airlockhq/airlock/cmd/airlock")
	store := t.TempDir()
	run := func(args ...string) string {
		t.Helper()
		out, err := exec.CommandContext(t.Context(), airlock, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("airlock %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	run("image", "import", "--store", store, "--name", "airlock-image-test", img)
	out := run("run", "--image", "airlock-image-test", "--image-store", store,
		"--state-dir", "/run/airlock-test-container", "--cgroup-parent", testutil.CgroupParent("/airlock-test-container"), "--",
		"sh", "-c", "/usr/local/bin/airlock version && /usr/local/bin/airlockd version && test -x /usr/local/bin/airlock-init && "+
			"python3 -c 'import ssl; print(ssl.get_default_verify_paths().cafile)' && test -s /etc/ssl/certs/ca-certificates.crt && "+
			"test ! -e /usr/share/man/man1 && echo whole")
	if !strings.Contains(out, "airlock (") || !strings.Contains(out, "/usr/lib/ssl/cert.pem") || !strings.HasSuffix(out, "whole\n") {
		t.Errorf("in a sandbox of the image:\n%s", out)
	}
}
