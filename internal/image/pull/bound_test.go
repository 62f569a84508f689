package pull

import (
	"bytes"
	"errors"
	"io"
	"math"
	"net/http"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"testing/iotest"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"golang.org/x/sys/unix"

	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/image"
	"github.com/airlockhq/airlock/internal/testutil"
)

// allocated is what the process allocated while f ran: a registry's
// answer read into memory shows here, whatever the collector freed since.
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// TestPullHostileRegistry attacks a pull with a registry that lies about
// sizes and streams without end. Each pull fails with an error of the
// right class naming what was too big, allocates a few MiB at most
// (the registry offers a GiB), fetches nothing it refused by declaration,
// and leaves nothing in the store.
func TestPullHostileRegistry(t *testing.T) {
	testutil.RequireRoot(t)
	const huge = 3 << 30
	cases := []struct {
		name  string
		setup func(t *testing.T, h *hostile)
		// max overrides the pull's bound (0: the default).
		max       int64
		class     error
		want      string
		unserved  string // a path prefix of which no byte may be sent
		maxServed int64  // of everything but the manifests and config, when set
	}{
		{
			name: "config of size -1 sent chunked",
			setup: func(t *testing.T, h *hostile) {
				cfg := config(t, 0)
				h.set("blobs/"+digestOf(cfg).String(), answer{body: cfg, endless: true})
				h.set("manifests/1", answer{mediaType: string(types.OCIManifestSchema1), body: manifest(t, v1.Descriptor{Digest: digestOf(cfg), Size: -1})})
			},
			class: errdefs.ErrInvalid, want: "declares image config sha256:", unserved: "blobs/",
		},
		{
			name: "config declared 3 GiB",
			setup: func(t *testing.T, h *hostile) {
				cfg := config(t, 0)
				h.set("blobs/"+digestOf(cfg).String(), answer{body: cfg, length: huge})
				h.set("manifests/1", answer{mediaType: string(types.OCIManifestSchema1), body: manifest(t, v1.Descriptor{Digest: digestOf(cfg), Size: huge})})
			},
			class: errdefs.ErrLimit, want: "image config sha256:", unserved: "blobs/",
		},
		{
			name: "manifest sent chunked without end",
			setup: func(t *testing.T, h *hostile) {
				h.image(t)
				a := h.answers["manifests/1"]
				a.endless = true
				h.set("manifests/1", a)
			},
			class: errdefs.ErrLimit, want: "manifest 1 goes on past its bound of 4194304 bytes", unserved: "blobs/",
		},
		{
			name: "manifest declared 3 GiB",
			setup: func(t *testing.T, h *hostile) {
				h.set("manifests/1", answer{mediaType: string(types.OCIManifestSchema1), body: []byte("{"), length: huge})
			},
			class: errdefs.ErrLimit, want: "manifest 1 is 3221225472 bytes, over its bound of 4194304", unserved: "blobs/",
		},
		{
			name: "index declares a 3 GiB manifest",
			setup: func(t *testing.T, h *hostile) {
				child := []byte(`{"schemaVersion":2}`)
				d := digestOf(child)
				h.set("manifests/"+d.String(), answer{mediaType: string(types.OCIManifestSchema1), body: child, length: huge})
				h.set("manifests/1", answer{mediaType: string(types.OCIImageIndex), body: index(t, v1.Descriptor{MediaType: types.OCIManifestSchema1, Digest: d, Size: huge})})
			},
			class: errdefs.ErrLimit, want: "the index declares manifest sha256:", unserved: "manifests/sha256:",
		},
		{
			name: "index's manifest sent chunked without end",
			setup: func(t *testing.T, h *hostile) {
				child := []byte(`{"schemaVersion":2}`)
				d := digestOf(child)
				h.set("manifests/"+d.String(), answer{mediaType: string(types.OCIManifestSchema1), body: child, endless: true})
				h.set("manifests/1", answer{mediaType: string(types.OCIImageIndex), body: index(t, v1.Descriptor{MediaType: types.OCIManifestSchema1, Digest: d, Size: int64(len(child))})})
			},
			class: errdefs.ErrLimit, want: "goes on past its bound", unserved: "blobs/",
		},
		{
			name: "indexes nested 5 deep",
			setup: func(t *testing.T, h *hostile) {
				body := []byte(`{"schemaVersion":2}`)
				mt := types.OCIManifestSchema1
				for range 5 {
					d := digestOf(body)
					h.set("manifests/"+d.String(), answer{mediaType: string(mt), body: body})
					body, mt = index(t, v1.Descriptor{MediaType: mt, Digest: d, Size: int64(len(body))}), types.OCIImageIndex
				}
				h.set("manifests/1", answer{mediaType: string(mt), body: body})
			},
			class: errdefs.ErrLimit, want: "indexes nested more than 4 deep", unserved: "blobs/",
		},
		{
			name: "indexes nested 4 deep are followed",
			setup: func(t *testing.T, h *hostile) {
				body := []byte(`{"schemaVersion":2}`)
				mt := types.OCIManifestSchema1
				for range 4 {
					d := digestOf(body)
					h.set("manifests/"+d.String(), answer{mediaType: string(mt), body: body})
					body, mt = index(t, v1.Descriptor{MediaType: mt, Digest: d, Size: int64(len(body))}), types.OCIImageIndex
				}
				h.set("manifests/1", answer{mediaType: string(mt), body: body})
			},
			class: errdefs.ErrInvalid, want: "the manifest names no sha256 image config", unserved: "blobs/",
		},
		{
			name: "two layers of 2^62 bytes under a bound of 2^63-1",
			setup: func(t *testing.T, h *hostile) {
				h.image(t, v1.Descriptor{Digest: fakeDigest(0), Size: 1 << 62}, v1.Descriptor{Digest: fakeDigest(1), Size: 1 << 62})
				for i := range 2 {
					h.set("blobs/"+fakeDigest(i).String(), answer{body: []byte("x"), endless: true})
				}
			},
			max: math.MaxInt64, class: errdefs.ErrLimit, want: "bound of 9223372036854775807 bytes (images.max_pull), reached at layer 2 of 2", unserved: "blobs/" + fakeDigest(0).String(),
		},
		{
			name: "129 layers",
			setup: func(t *testing.T, h *hostile) {
				var ls []v1.Descriptor
				for i := range MaxLayers + 1 {
					ls = append(ls, v1.Descriptor{Digest: fakeDigest(i), Size: 10})
					h.set("blobs/"+fakeDigest(i).String(), answer{body: []byte("0123456789")})
				}
				h.image(t, ls...)
			},
			class: errdefs.ErrLimit, want: "the image has 129 layers; at most 128 are pulled", unserved: "blobs/" + fakeDigest(0).String(),
		},
		{
			name: "layer streams past its declared size",
			setup: func(t *testing.T, h *hostile) {
				layer := []byte(strings.Repeat("layer!", 1<<17))
				d := digestOf(layer)
				h.set("blobs/"+d.String(), answer{body: layer, endless: true})
				h.image(t, v1.Descriptor{Digest: d, Size: int64(len(layer))})
			},
			class: errdefs.ErrLimit, want: "than the 786432 bytes the manifest declares",
		},
		{
			name: "layer redirected to an answer that streams past its size",
			setup: func(t *testing.T, h *hostile) {
				layer := []byte(strings.Repeat("layer!", 1<<17))
				d := digestOf(layer)
				h.set("blobs/"+d.String(), answer{redirect: "/v2/t/storage/x"})
				h.set("storage/x", answer{body: layer, endless: true})
				h.image(t, v1.Descriptor{Digest: d, Size: int64(len(layer))})
			},
			class: errdefs.ErrLimit, want: "than the 786432 bytes the manifest declares",
		},
		{
			name: "foreign layer",
			setup: func(t *testing.T, h *hostile) {
				h.set("elsewhere", answer{body: []byte("x"), endless: true})
				h.image(t, v1.Descriptor{Digest: fakeDigest(0), Size: 10, URLs: []string{h.srv.URL + "/v2/t/elsewhere"}})
			},
			class: errdefs.ErrInvalid, want: "is a foreign layer", unserved: "elsewhere",
		},
		{
			name: "layer declares its size and sends more",
			setup: func(t *testing.T, h *hostile) {
				layer := []byte(strings.Repeat("layer!", 1<<17))
				d := digestOf(layer)
				h.set("blobs/"+d.String(), answer{body: layer, length: int64(len(layer)) + 64<<20})
				h.image(t, v1.Descriptor{Digest: d, Size: int64(len(layer))})
			},
			class: errdefs.ErrLimit, want: "is 67895296 bytes, over its bound of 786432",
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := newHostile(t)
			c.setup(t, h)
			st := testStore(t)
			// Whatever a pull has written to the store while the
			// registry streams, at its most.
			var most atomic.Int64
			h.chunk = func() {
				_, n := storeFiles(t, st.Dir())
				for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
				}
			}
			var err error
			alloc := allocated(func() { _, err = Pull(t.Context(), st, h.ref(), Options{MaxBytes: c.max}) })
			if err == nil || !errors.Is(err, c.class) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v (class %v), want a %v error containing %q", err, errdefs.Class(err), c.class, c.want)
			}
			t.Logf("%v; %d bytes allocated, %d served", err, alloc, h.served(""))
			if alloc > 64<<20 {
				t.Errorf("the pull allocated %d bytes", alloc)
			}
			if c.unserved != "" {
				if n := h.served(c.unserved); n != 0 {
					t.Errorf("the registry sent %d bytes of %s, refused by declaration", n, c.unserved)
				}
			}
			// The largest blob a pull writes here is the 786432-byte
			// layer.
			if n := most.Load(); n > 786432 {
				t.Errorf("the store held %d bytes of the pull's", n)
			}
			if files, _ := storeFiles(t, st.Dir()); len(files) != 0 {
				t.Errorf("left in the store: %v", files)
			}
			if imgs, err := st.List(); err != nil || len(imgs) != 0 {
				t.Errorf("stored: %v %v", imgs, err)
			}
		})
	}
}

// TestPullBoundFromFreeSpace: with no bound set, a pull may download at
// most half the free space of the store's file system (a 64 MiB tmpfs
// here), and the error says so; a bound the operator sets takes over.
func TestPullBoundFromFreeSpace(t *testing.T) {
	testutil.RequireRoot(t)
	mnt := t.TempDir()
	if err := unix.Mount("tmpfs", mnt, "tmpfs", 0, "size=64m"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Unmount(mnt, unix.MNT_DETACH) })
	st := storeAt(t, filepath.Join(mnt, "store"))
	h := newHostile(t)
	h.image(t, v1.Descriptor{Digest: fakeDigest(0), Size: 20 << 20}, v1.Descriptor{Digest: fakeDigest(1), Size: 20 << 20})
	for i := range 2 {
		h.set("blobs/"+fakeDigest(i).String(), answer{body: []byte("x"), endless: true})
	}
	_, err := Pull(t.Context(), st, h.ref(), Options{})
	if !errors.Is(err, errdefs.ErrLimit) || !strings.Contains(err.Error(), "reached at layer 2 of 2") || !strings.Contains(err.Error(), "half the") || !strings.Contains(err.Error(), "free on the image store's file system") {
		t.Fatalf("got %v, want a limit naming half the free space", err)
	}
	if n := h.served("blobs/sha256:"); n != 0 {
		t.Fatalf("the registry sent %d bytes of layers", n)
	}
	// Set by the operator, the bound is the operator's: the layers are
	// fetched (and fail, being a stream of x).
	_, err = Pull(t.Context(), st, h.ref(), Options{MaxBytes: 48 << 20})
	if err == nil || errors.Is(err, errdefs.ErrLimit) && strings.Contains(err.Error(), "free") {
		t.Fatalf("with a bound set: %v", err)
	}
	if files, _ := storeFiles(t, st.Dir()); len(files) != 0 {
		t.Errorf("left in the store: %v", files)
	}
}

// storeAt opens an image store in dir.
func storeAt(t *testing.T, dir string) *image.Store {
	t.Helper()
	st, err := image.Open(image.Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// TestCheckLayers: what the layers declare is bounded in number, each,
// and in sum, without the sum overflowing.
func TestCheckLayers(t *testing.T) {
	ones := func(n int) []int64 {
		s := make([]int64, n)
		for i := range s {
			s[i] = 1
		}
		return s
	}
	cases := []struct {
		name  string
		sizes []int64
		max   int64
		want  error // nil, or the class
	}{
		{"none", nil, 10, nil},
		{"at the bound", []int64{4, 6}, 10, nil},
		{"over the bound", []int64{4, 7}, 10, errdefs.ErrLimit},
		{"one over the bound", []int64{11}, 10, errdefs.ErrLimit},
		{"two of 2^62 under 2^63-1", []int64{1 << 62, 1 << 62}, math.MaxInt64, errdefs.ErrLimit},
		{"2^63-1 twice", []int64{math.MaxInt64, math.MaxInt64}, math.MaxInt64, errdefs.ErrLimit},
		{"2^63-1 and 1", []int64{math.MaxInt64, 1}, math.MaxInt64, errdefs.ErrLimit},
		{"2^63-1 alone", []int64{math.MaxInt64}, math.MaxInt64, nil},
		{"negative", []int64{5, -1}, 10, errdefs.ErrInvalid},
		{"a negative after a large one", []int64{math.MaxInt64, math.MinInt64}, math.MaxInt64, errdefs.ErrInvalid},
		{"128 layers", ones(MaxLayers), 1 << 20, nil},
		{"129 layers", ones(MaxLayers + 1), 1 << 20, errdefs.ErrLimit},
	}
	for _, c := range cases {
		err := checkLayers(c.sizes, c.max, "test")
		if got := errdefs.Class(err); got != c.want || (err == nil) != (c.want == nil) {
			t.Errorf("%s: got %v (class %v), want class %v", c.name, err, got, c.want)
		}
	}
}

// TestBoundedBody: an answer is read to its bound and no further, and
// one that goes on past it fails, however its reads are cut.
func TestBoundedBody(t *testing.T) {
	cases := []struct {
		name  string
		body  int
		limit int64
		exact bool
		want  error
	}{
		{"a layer of its size", 10, 10, true, nil},
		{"a layer one byte over", 11, 10, true, ErrLimit},
		{"a short layer (the digest check's to catch)", 9, 10, true, nil},
		{"an empty layer", 0, 0, true, nil},
		{"an empty layer that is not", 1, 0, true, ErrLimit},
		{"a document at its bound", 10, 10, false, nil},
		{"a document over its bound", 11, 10, false, ErrLimit},
		{"a document under its bound", 3, 10, false, nil},
	}
	readers := map[string]func(io.Reader) io.Reader{
		"plain":         func(r io.Reader) io.Reader { return r },
		"byte by byte":  iotest.OneByteReader,
		"data with EOF": iotest.DataErrReader,
		"half":          iotest.HalfReader,
	}
	for _, c := range cases {
		for rname, wrap := range readers {
			data := []byte(strings.Repeat("x", c.body))
			b := newBounds(nil)
			body := &boundedBody{rc: io.NopCloser(wrap(bytes.NewReader(data))), left: c.limit, limit: c.limit, exact: c.exact, what: "test", b: b}
			got, err := io.ReadAll(body)
			if !errors.Is(err, c.want) || c.want == nil && err != nil {
				t.Errorf("%s (%s): got %v, want %v", c.name, rname, err, c.want)
			}
			if int64(len(got)) > c.limit || !bytes.Equal(got, data[:len(got)]) {
				t.Errorf("%s (%s): read %d bytes of %d, bound %d", c.name, rname, len(got), len(data), c.limit)
			}
			if c.want != nil && !errors.Is(b.err(), c.want) {
				t.Errorf("%s (%s): the breach was not kept: %v", c.name, rname, b.err())
			}
			// Read again after the end: still the end, or still the error.
			if n, err2 := body.Read(make([]byte, 8)); n != 0 || c.want == nil && err2 != io.EOF || c.want != nil && err2 != err {
				t.Errorf("%s (%s): a read after the end: %d %v", c.name, rname, n, err2)
			}
		}
	}
}

// FuzzBoundedBody: whatever the answer and the bound, what is read is a
// prefix of the answer no longer than the bound, and it is all of it
// exactly when the answer fits.
func FuzzBoundedBody(f *testing.F) {
	f.Add([]byte("0123456789"), uint16(10), true)
	f.Add([]byte("0123456789a"), uint16(10), false)
	f.Add([]byte{}, uint16(0), true)
	f.Fuzz(func(t *testing.T, data []byte, limit uint16, exact bool) {
		b := newBounds(nil)
		body := &boundedBody{rc: io.NopCloser(iotest.HalfReader(bytes.NewReader(data))), left: int64(limit), limit: int64(limit), exact: exact, what: "fuzz", b: b}
		got, err := io.ReadAll(body)
		if len(got) > int(limit) || !bytes.Equal(got, data[:len(got)]) {
			t.Fatalf("read %d bytes of %d, bound %d", len(got), len(data), limit)
		}
		if fits := len(data) <= int(limit); fits != (err == nil) || fits && len(got) != len(data) || !fits && !errors.Is(err, ErrLimit) {
			t.Fatalf("%d bytes, bound %d: read %d, %v", len(data), limit, len(got), err)
		}
	})
}

// TestBoundsTransport: through the pull's transport, an answer streamed
// without end (1 GiB offered, chunked) is cut at its bound whatever was
// asked for: a blob the pull did not declare a layer (the config), a
// manifest, a token; a declared layer at its size.
func TestBoundsTransport(t *testing.T) {
	h := newHostile(t)
	layer := digestOf([]byte("layer")).String()
	for _, p := range []string{"blobs/sha256:config", "manifests/1", "token", "blobs/" + layer} {
		h.set(p, answer{body: []byte("{"), endless: true})
	}
	cases := []struct {
		path string
		max  int64
	}{
		{"/v2/t/blobs/sha256:config", MaxDocument},
		{"/v2/t/manifests/1", MaxDocument},
		{"/v2/t/token", MaxDocument},
		{"/v2/t/blobs/" + layer, 1000},
	}
	for _, c := range cases {
		b := newBounds(http.DefaultTransport)
		b.allowLayer(layer, 1000)
		client := &http.Client{Transport: b}
		var got []byte
		var err error
		alloc := allocated(func() {
			resp, gerr := client.Get(h.srv.URL + c.path)
			if gerr != nil {
				err = gerr
				return
			}
			defer resp.Body.Close()
			got, err = io.ReadAll(resp.Body)
		})
		if !errors.Is(err, ErrLimit) || !errors.Is(b.err(), errdefs.ErrLimit) || int64(len(got)) > c.max {
			t.Errorf("%s: read %d bytes, %v (kept: %v)", c.path, len(got), err, b.err())
		}
		if alloc > 32<<20 {
			t.Errorf("%s: %d bytes allocated", c.path, alloc)
		}
	}
}
