package pull

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"

	"github.com/airlockhq/airlock/internal/errdefs"
)

// A registry is untrusted: it chooses what it declares and what it
// streams. These bound what a pull holds in memory and writes to disk,
// whatever the registry says.
const (
	// MaxDocument bounds every document a pull reads into memory: an
	// index, a manifest, an image config, a token answer, any blob not a
	// layer. Real ones are kilobytes; this is the archive import's bound.
	MaxDocument = 4 << 20
	// MaxLayers bounds an image's layers. Docker refuses images deeper
	// than about 125 layers (an overlay mount's options must fit in a
	// page), so no image a builder makes has more.
	MaxLayers = 128
	// maxNesting bounds indexes within indexes (each is fetched).
	maxNesting = 4
)

// ErrLimit is a pull refused because the registry declared or sent more
// than a bound allows.
var ErrLimit = errdefs.New(errdefs.ErrLimit, "over a pull bound")

// bounds is the pull's HTTP transport: every answer's body is capped, so
// that neither a declared size nor a chunked answer lets a registry make
// the pull read more than the bound of what was asked for. Layer blobs
// are capped at their declared size, checked against the pull's bound
// before any is fetched; everything else (manifests, indexes, the
// config, tokens, blobs the pull did not expect) at MaxDocument. The
// first breach is kept, because the registry client wraps (and may
// rewrite) the error a body returns: Pull reports the breach itself.
type bounds struct {
	inner http.RoundTripper

	mu sync.Mutex
	// layers are the declared sizes of the layer blobs, by digest.
	layers map[string]int64
	breach error
}

func newBounds(inner http.RoundTripper) *bounds {
	return &bounds{inner: inner, layers: map[string]int64{}}
}

// allowLayer lets the blob digest be read up to size bytes.
func (b *bounds) allowLayer(digest string, size int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.layers[digest] = size
}

// err is the first breach, or nil.
func (b *bounds) err() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.breach
}

func (b *bounds) fail(err error) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.breach == nil {
		b.breach = err
	}
	return b.breach
}

// limitFor is what an answer to req may carry, and what it is (for the
// error). A redirect's target is bounded as what was first asked for: a
// blob moved to a storage host is still that blob.
func (b *bounds) limitFor(req *http.Request) (int64, bool, string) {
	first := req
	for first.Response != nil && first.Response.Request != nil {
		first = first.Response.Request
	}
	p := first.URL.Path
	if i := strings.LastIndex(p, "/blobs/"); i >= 0 && strings.HasPrefix(p, "/v2/") {
		digest := p[i+len("/blobs/"):]
		b.mu.Lock()
		size, ok := b.layers[digest]
		b.mu.Unlock()
		if ok {
			return size, true, "layer " + digest
		}
		return MaxDocument, false, "blob " + digest
	}
	if i := strings.LastIndex(p, "/manifests/"); i >= 0 && strings.HasPrefix(p, "/v2/") {
		return MaxDocument, false, "manifest " + p[i+len("/manifests/"):]
	}
	return MaxDocument, false, "the answer to " + first.URL.Path
}

func (b *bounds) RoundTrip(req *http.Request) (*http.Response, error) {
	limit, exact, what := b.limitFor(req)
	resp, err := b.inner.RoundTrip(req)
	if err != nil || req.Method == http.MethodHead {
		return resp, err
	}
	if resp.StatusCode/100 != 2 {
		// An error or a redirect: its body is a document, whatever was
		// asked for (a layer's 404 is not the layer).
		limit, exact = MaxDocument, false
		what = fmt.Sprintf("%d answer for %s", resp.StatusCode, what)
	}
	// A declared length over the bound is refused before a byte of the
	// body is read.
	if resp.ContentLength > limit {
		resp.Body.Close()
		return nil, b.fail(fmt.Errorf("%w: the registry's %s is %d bytes, over its bound of %d", ErrLimit, what, resp.ContentLength, limit))
	}
	resp.Body = &boundedBody{rc: resp.Body, left: limit, exact: exact, what: what, limit: limit, b: b}
	return resp, nil
}

// boundedBody reads at most limit bytes of an answer, and fails when the
// answer goes on past them: a reader that merely stopped at the limit
// would take the first limit bytes of a stream that never ends for the
// whole. For a layer (exact) the end is checked as soon as the declared
// size is reached, since the registry client stops reading there itself.
type boundedBody struct {
	rc    io.ReadCloser
	left  int64
	limit int64
	exact bool
	ended bool
	// failed is the breach, returned by every read after it.
	failed error
	what   string
	b      *bounds
}

func (r *boundedBody) Read(p []byte) (int, error) {
	if r.failed != nil {
		return 0, r.failed
	}
	if r.ended {
		return 0, io.EOF
	}
	if r.left <= 0 {
		return 0, r.atLimit()
	}
	if int64(len(p)) > r.left {
		p = p[:r.left]
	}
	n, err := r.rc.Read(p)
	r.left -= int64(n)
	if errors.Is(err, io.EOF) {
		r.ended = true
	}
	if r.left == 0 && err == nil && r.exact {
		err = r.atLimit()
	}
	return n, err
}

// atLimit reads one byte past the limit: the answer must end there.
func (r *boundedBody) atLimit() error {
	var one [1]byte
	n, err := io.ReadFull(r.rc, one[:])
	if n > 0 {
		if r.exact {
			r.failed = fmt.Errorf("%w: the registry sent more of %s than the %d bytes the manifest declares", ErrLimit, r.what, r.limit)
		} else {
			r.failed = fmt.Errorf("%w: the registry's %s goes on past its bound of %d bytes", ErrLimit, r.what, r.limit)
		}
		r.b.fail(r.failed)
		return r.failed
	}
	if errors.Is(err, io.EOF) {
		r.ended = true
		return io.EOF
	}
	return err
}

func (r *boundedBody) Close() error { return r.rc.Close() }

// checkLayers bounds what a manifest's layers declare before any is
// fetched: their number, each size, and their sum (checked against
// overflow: two layers of 2^62 bytes sum to a negative int64).
func checkLayers(sizes []int64, max int64, why string) error {
	if len(sizes) > MaxLayers {
		return fmt.Errorf("%w: the image has %d layers; at most %d are pulled", ErrLimit, len(sizes), MaxLayers)
	}
	var total int64
	for i, size := range sizes {
		if size < 0 {
			return errdefs.Errorf(errdefs.ErrInvalid, "layer %d of %d declares a negative size (%d)", i+1, len(sizes), size)
		}
		if size > max || total > max-size {
			return fmt.Errorf("%w: the image's layers declare more than the pull's bound of %d bytes (%s), reached at layer %d of %d (%d bytes)", ErrLimit, max, why, i+1, len(sizes), size)
		}
		total += size
	}
	return nil
}
