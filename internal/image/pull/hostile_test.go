package pull

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// hostile is a registry the test controls, on loopback: it answers the
// distribution API's /v2/, manifests (by tag or digest) and blobs (by
// digest) as each test sets, and counts what it wrote of every answer's
// body.
type hostile struct {
	srv *httptest.Server

	mu      sync.Mutex
	answers map[string]answer // by path below /v2/t/: "manifests/1", "blobs/sha256:..."
	sent    map[string]int64
	// chunk, when set, is called after every chunk streamed.
	chunk func()
}

// answer is what the registry serves at one path: body, then (when
// endless) filler for as long as the client reads. length, when not 0,
// is the Content-Length declared; otherwise a body with filler is sent
// chunked, and one without with its own length.
type answer struct {
	mediaType string
	body      []byte
	endless   bool
	length    int64
	// redirect, when set, sends the client there instead (as a
	// registry sends blobs to a storage host).
	redirect string
}

func newHostile(t *testing.T) *hostile {
	h := &hostile{answers: map[string]answer{}, sent: map[string]int64{}}
	h.srv = httptest.NewServer(http.HandlerFunc(h.serve))
	t.Cleanup(h.srv.Close)
	return h
}

// ref is the test image's reference in this registry.
func (h *hostile) ref() string { return strings.TrimPrefix(h.srv.URL, "http://") + "/t:1" }

func (h *hostile) set(path string, a answer) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.answers[path] = a
}

// served is how many body bytes were written at paths starting with
// prefix.
func (h *hostile) served(prefix string) int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	var n int64
	for p, v := range h.sent {
		if strings.HasPrefix(p, prefix) {
			n += v
		}
	}
	return n
}

func (h *hostile) serve(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/v2/" {
		w.Write([]byte("{}"))
		return
	}
	path, ok := strings.CutPrefix(r.URL.Path, "/v2/t/")
	h.mu.Lock()
	a, found := h.answers[path]
	chunk := h.chunk
	h.mu.Unlock()
	if !ok || !found {
		http.Error(w, `{"errors":[{"code":"NOT_FOUND"}]}`, http.StatusNotFound)
		return
	}
	if a.redirect != "" {
		http.Redirect(w, r, a.redirect, http.StatusTemporaryRedirect)
		return
	}
	if a.mediaType != "" {
		w.Header().Set("Content-Type", a.mediaType)
	}
	switch {
	case a.length != 0:
		w.Header().Set("Content-Length", strconv.FormatInt(a.length, 10))
	case !a.endless:
		w.Header().Set("Content-Length", strconv.Itoa(len(a.body)))
	}
	if r.Method == http.MethodHead {
		return
	}
	count := func(n int) {
		h.mu.Lock()
		h.sent[path] += int64(n)
		h.mu.Unlock()
	}
	n, err := w.Write(a.body)
	count(n)
	if err != nil || !a.endless && a.length == 0 {
		return
	}
	// Filler a JSON reader takes as whitespace, until the client hangs
	// up (or 1 GiB, a bound on the test itself).
	filler := []byte(strings.Repeat(" ", 32<<10))
	for total := 0; total < 1<<30; total += len(filler) {
		n, err := w.Write(filler)
		count(n)
		if err != nil {
			return
		}
		w.(http.Flusher).Flush()
		if chunk != nil {
			chunk()
		}
	}
}

func digestOf(b []byte) v1.Hash {
	sum := sha256.Sum256(b)
	return v1.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(sum[:])}
}

// fakeDigest is a digest of nothing the registry has.
func fakeDigest(i int) v1.Hash { return digestOf([]byte(fmt.Sprint("layer ", i))) }

// config is an image config for this host with layers diff_ids.
func config(t *testing.T, layers int) []byte {
	var diffs []string
	for i := range layers {
		diffs = append(diffs, fakeDigest(i).String())
	}
	b, err := json.Marshal(map[string]any{"os": "linux", "architecture": runtime.GOARCH, "rootfs": map[string]any{"type": "layers", "diff_ids": diffs}})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// manifest is an OCI manifest of a config descriptor and layers.
func manifest(t *testing.T, cfg v1.Descriptor, layers ...v1.Descriptor) []byte {
	if layers == nil {
		layers = []v1.Descriptor{}
	}
	cfg.MediaType = types.OCIConfigJSON
	for i := range layers {
		layers[i].MediaType = types.OCILayer
	}
	b, err := json.Marshal(v1.Manifest{SchemaVersion: 2, MediaType: types.OCIManifestSchema1, Config: cfg, Layers: layers})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// index is an OCI index of one manifest for this host's platform.
func index(t *testing.T, child v1.Descriptor) []byte {
	child.Platform = &v1.Platform{OS: "linux", Architecture: runtime.GOARCH}
	b, err := json.Marshal(v1.IndexManifest{SchemaVersion: 2, MediaType: types.OCIImageIndex, Manifests: []v1.Descriptor{child}})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// image serves a manifest at tag 1 with a real config and the given
// layers; it returns the config's descriptor.
func (h *hostile) image(t *testing.T, layers ...v1.Descriptor) {
	cfg := config(t, len(layers))
	h.set("blobs/"+digestOf(cfg).String(), answer{body: cfg})
	h.set("manifests/1", answer{mediaType: string(types.OCIManifestSchema1), body: manifest(t, v1.Descriptor{Digest: digestOf(cfg), Size: int64(len(cfg))}, layers...)})
}

// storeFiles lists the regular files under the store's tmp/ (what a pull
// in progress wrote), and the total size of the blobs among them.
func storeFiles(t *testing.T, dir string) (files []string, blobBytes int64) {
	filepath.WalkDir(filepath.Join(dir, "tmp"), func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			files = append(files, p)
			if fi, err := d.Info(); err == nil && strings.Contains(p, "/blobs/") {
				blobBytes += fi.Size()
			}
		}
		return nil
	})
	return files, blobBytes
}
