package e2bserver

import (
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"os"
	"path"
	"sync"
	"time"

	"github.com/airlockhq/airlock/internal/e2b"
	"github.com/airlockhq/airlock/internal/edge"
	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/httpx"
	"github.com/airlockhq/airlock/internal/linux/inroot"
	"github.com/airlockhq/airlock/internal/node"
	"github.com/airlockhq/airlock/sandbox"
)

// The E2B upload: POST /files, one file (octet-stream, perhaps gzip) or
// several (multipart, each part named by its filename).

// errUploadEnded is why an upload's body stopped short when its sandbox
// ended; errUploadStalled (errors.go) when its client stopped sending.
var errUploadEnded = errdefs.Errorf(errEnded, "the sandbox was not found: it ended during the upload")

// uploadBody is an upload's body, cut when its sandbox ends; each wait
// for its next bytes is bounded by the server (httpx, at the
// daemon's stall timeout). Without them, a client that stops sending
// (between a multipart's parts, say) would hold the session, and its
// owner's kill, which waits for the session's calls, for as long as it
// liked.
type uploadBody struct {
	r   io.Reader
	raw io.Reader // the request's body as the server gave it (httpx.Cut)
	rc  *http.ResponseController

	// mu guards why.
	mu  sync.Mutex
	why error // errUploadStalled or errUploadEnded, once the body failed so
}

func (b *uploadBody) Read(p []byte) (int, error) {
	b.mu.Lock()
	if b.why != nil {
		b.mu.Unlock()
		return 0, b.why
	}
	b.mu.Unlock()
	n, err := b.r.Read(p)
	if err != nil && errors.Is(err, os.ErrDeadlineExceeded) {
		b.mu.Lock()
		if b.why == nil {
			b.why = errUploadStalled
		}
		err = b.why
		b.mu.Unlock()
	}
	return n, err
}

// cut ends the body's reading now: a Read blocked in the connection
// returns at once.
func (b *uploadBody) cut() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.why == nil {
		b.why = errUploadEnded
	}
	if !httpx.Cut(b.raw) {
		_ = b.rc.SetReadDeadline(time.Unix(1, 0))
	}
}

// failed is why the body stopped short, or nil.
func (b *uploadBody) failed() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.why
}

// maxUpload bounds what one upload call carries, as sent and, for a
// gzip body, inflated.
const maxUpload = maxFile + 1<<20

// MaxParts bounds the parts of a multipart upload.
const MaxParts = 1024

// errInflated ends a gzip body that inflates past maxUpload.
var errInflated = errdefs.New(inroot.ErrTooLarge, fmt.Sprintf("the gzip body inflates past %d bytes", maxUpload))

// inflated is a gzip body's inflated bytes, at most left of them.
type inflated struct {
	r    io.Reader
	left int64
}

func (f *inflated) Read(p []byte) (int, error) {
	if f.left <= 0 {
		return 0, errInflated
	}
	if int64(len(p)) > f.left {
		p = p[:f.left]
	}
	n, err := f.r.Read(p)
	f.left -= int64(n)
	return n, err
}

// partFileName is a multipart part's filename exactly as sent: Go's
// FileName keeps only its base name, which would write "a/b/f.txt" at
// "f.txt", and "../x" or "/etc/x" at "x" instead of refusing them.
func partFileName(p *multipart.Part) string {
	_, params, err := mime.ParseMediaType(p.Header.Get("Content-Disposition"))
	if err != nil {
		return ""
	}
	return params["filename"]
}

func (d *Server) e2bWriteFile(w http.ResponseWriter, r *http.Request) error {
	sb, err := d.e2bFileSandbox(r, "write")
	if err != nil {
		return err
	}
	defer sb.s.Leave()
	body := &uploadBody{r: http.MaxBytesReader(w, r.Body, maxUpload), raw: r.Body, rc: http.NewResponseController(w)}
	done := make(chan struct{})
	defer close(done)
	go func() {
		select {
		case <-sb.s.Ending():
			body.cut()
		case <-done:
		}
	}()
	// Each directory written into is opened once for the whole call,
	// while its init lives (sandbox.OpenDir), the workspace at once: a
	// part that comes after the sandbox ended is never written through a
	// path that could by then name another sandbox's.
	dirs := map[string]*os.File{}
	defer func() {
		for _, f := range dirs {
			f.Close()
		}
	}()
	open := func(dir string) (*os.File, error) {
		if f := dirs[dir]; f != nil {
			return f, nil
		}
		f, err := sb.s.Sandbox().OpenDir(dir)
		if err != nil {
			return nil, errEnded
		}
		dirs[dir] = f
		return f, nil
	}
	if _, err := open(sandbox.HomeDir); err != nil {
		return err
	}
	gone := func() bool {
		select {
		case <-sb.s.Ending():
			return true
		default:
			return !sb.s.Alive()
		}
	}
	// bodyFailed is why the body stopped short, if it did, else err.
	bodyFailed := func(err error) error {
		switch why := body.failed(); why {
		case errUploadStalled:
			return errdefs.Errorf(errUploadStalled, "the upload stalled: nothing came for %v", d.opts.StallTimeout)
		case errUploadEnded:
			return why
		}
		return err
	}
	meta, err := e2b.FileMetadata(r.Header)
	if err != nil {
		return errdefs.Errorf(errdefs.ErrInvalid, "invalid metadata: %v", err)
	}
	put := func(p string, r io.Reader) (e2b.WrittenFile, error) {
		loc, err := sb.path(p)
		if err != nil {
			return e2b.WrittenFile{}, err
		}
		if err := loc.writable(); err != nil {
			return e2b.WrittenFile{}, err
		}
		if gone() {
			return e2b.WrittenFile{}, errEnded
		}
		ws, err := open(loc.dir)
		if err != nil {
			return e2b.WrittenFile{}, err
		}
		// The file's metadata is replaced, as envd replaces it: an
		// upload without any clears what an earlier one set (a
		// truncated file keeps its attributes).
		var kept map[string]string
		setMeta := func(f *os.File) (err error) {
			kept, err = inroot.SetXattrs(f, e2b.MetadataXattrPrefix, meta)
			return err
		}
		if _, err := sb.s.WriteInThen(ws, loc.rel, r, setMeta); err != nil {
			return e2b.WrittenFile{}, bodyFailed(node.FileError(err))
		}
		return e2b.WrittenFile{Name: path.Base(loc.rel), Type: "file", Path: loc.String(), Metadata: kept}, nil
	}
	var in io.Reader = body
	switch enc := r.Header.Get("Content-Encoding"); enc {
	case "", "identity":
	case "gzip":
		// Decompressed, the call carries no more than a plain body may:
		// a few MiB of gzip inflate a thousandfold, into files each
		// under writeFile's cap, or parts skipped unwritten.
		zr, err := gzip.NewReader(body)
		if err != nil {
			return bodyFailed(errdefs.Errorf(errdefs.ErrInvalid, "the gzip body: %v", err))
		}
		defer zr.Close()
		in = &inflated{r: zr, left: maxUpload}
	default:
		return errdefs.Errorf(errdefs.ErrInvalid, "Content-Encoding %q: only gzip is supported", node.Shorten(enc))
	}
	var out []e2b.WrittenFile
	ct, params, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	switch {
	case ct == "multipart/form-data":
		mr := multipart.NewReader(in, params["boundary"])
		for parts := 0; ; parts++ {
			// Each part costs a write through the workspace: a body of
			// empty parts should not make a million.
			if parts == MaxParts {
				return errdefs.Errorf(errdefs.ErrInvalid, "the multipart body has over %d parts", MaxParts)
			}
			part, err := mr.NextPart()
			if err == io.EOF {
				break
			}
			if err != nil {
				return bodyFailed(errdefs.Errorf(errdefs.ErrInvalid, "the multipart body: %v", err))
			}
			if part.FormName() != "file" {
				continue
			}
			// A signed URL's path is the one signed; only a request
			// with the sandbox's token may name others in its parts,
			// each checked as a single file's path is.
			p := r.URL.Query().Get("path")
			if p == "" && !r.URL.Query().Has("signature") {
				p = partFileName(part)
			}
			wf, err := put(p, part)
			if err != nil {
				return err
			}
			out = append(out, wf)
		}
	default:
		wf, err := put(r.URL.Query().Get("path"), in)
		if err != nil {
			return err
		}
		out = append(out, wf)
	}
	if len(out) == 0 {
		return errdefs.New(errdefs.ErrInvalid, `no file in the body (a multipart field "file", or the bytes themselves)`)
	}
	edge.WriteJSON(w, http.StatusOK, out)
	return nil
}
