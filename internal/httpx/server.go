// Package httpx is the HTTP plumbing every airlock server shares, so that
// each faces a hostile caller the same way: the server builder (a bound
// on each part of a request a caller could withhold: its header block,
// its body, the wait for the next request; and on the header's size), the
// stall-bounded writer of a streamed answer (Stream), and the decoding of
// a caller's JSON with errors written for the caller (JSONBody.Decode,
// DescribeJSON). The daemon's edges, the front, the egress gateway and
// the broker build their servers here.
package httpx

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/airlockhq/airlock/internal/netlimit"
)

const (
	// HeaderTimeout bounds the reading of a request's header block.
	HeaderTimeout = 10 * time.Second
	// MaxHeaderBytes bounds a request's header block.
	MaxHeaderBytes = 64 << 10
	// defaultIdle closes a keep-alive connection with no request for
	// this long, unless Options say otherwise.
	defaultIdle = 60 * time.Second
)

// BodyStall bounds each wait for the next bytes of a request's body: a
// caller that sends nothing of a body it declared for this long has
// stopped sending, and the read fails. A body that keeps coming (a
// streamed upload, a streamed Connect call) is never cut, however long
// it lasts. A variable for tests.
var BodyStall = 30 * time.Second

// Options are a server's own settings.
type Options struct {
	// IdleTimeout closes a keep-alive connection that sends no request
	// for this long; 0 means 60 s.
	IdleTimeout time.Duration
	// Logger receives the server's own errors (a caller's malformed
	// request, a failed handshake), at debug level; nil discards them.
	Logger *slog.Logger
	// ConnContext, if set, is the server's ConnContext.
	ConnContext func(ctx context.Context, c net.Conn) context.Context
	// BodyStall, if set, is the server's bound on each wait for a body's
	// next bytes, in place of the package's BodyStall.
	BodyStall time.Duration
}

// DrainGrace bounds how long the server may go on reading a body its
// handler did not read to the end, once the answer is given: long enough
// for a caller that is still sending a small body to finish, and so to
// read the answer (a caller whose connection is closed mid-send sees the
// reset, not the answer), too short to hold the connection. A variable
// for tests.
var DrainGrace = 2 * time.Second

// New returns a server of h with airlock's bounds: the header block read
// within HeaderTimeout and at most MaxHeaderBytes, each wait for a body's
// next bytes within BodyStall (see Bound), an idle connection closed
// after o.IdleTimeout.
func New(h http.Handler, o Options) *http.Server {
	if o.IdleTimeout <= 0 {
		o.IdleTimeout = defaultIdle
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	connContext := func(ctx context.Context, c net.Conn) context.Context {
		// The connection, for netlimit.Vouch: a request that shows a
		// credential frees its address from its listener's share.
		ctx = netlimit.WithConn(ctx, c)
		if o.ConnContext != nil {
			ctx = o.ConnContext(ctx, c)
		}
		return ctx
	}
	return &http.Server{
		Handler:           bound(h, o.BodyStall),
		ConnContext:       connContext,
		ReadHeaderTimeout: HeaderTimeout,
		IdleTimeout:       o.IdleTimeout,
		MaxHeaderBytes:    MaxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(o.Logger.Handler(), slog.LevelDebug),
	}
}

// Bound bounds the reading of each request's body that h is given.
//
// http.Server has no deadline of its own for a body: its ReadTimeout
// counts from the request's start, and would cut a long upload however
// fast it comes. So each read of the body waits at most BodyStall for
// its bytes. And when h answers without reading the body to its end (a
// refusal: no token, too many requests), the server reads on, as it
// does, up to 256 KiB of the body to keep the connection for another
// request — but for DrainGrace at most: it would otherwise wait with no
// deadline, whatever the answer said, and a caller that declares a body
// and never sends it would hold the connection, and the listener's
// slot, for as long as it liked, without a token. A body not whole by
// then closes the connection.
//
// A connection taken over by h (a terminal, a proxied tunnel) is h's:
// its deadline is cleared at the switch, and left alone after.
func Bound(h http.Handler) http.Handler { return bound(h, 0) }

// bound is Bound with a stall bound of its own (0: BodyStall).
func bound(h http.Handler, stall time.Duration) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		stall := stall
		if stall <= 0 {
			stall = BodyStall
		}
		if r.Body == nil || r.Body == http.NoBody {
			// No body: nothing to wait for. The server's own read of the
			// connection (which tells a caller gone) runs from the
			// start, and a deadline would end the request.
			h.ServeHTTP(w, r)
			return
		}
		rc := http.NewResponseController(w)
		b := &body{ReadCloser: r.Body, rc: rc, stall: stall}
		bw := &writer{ResponseWriter: w, b: b}
		// Until h reads: the server may read the body itself before
		// then (it discards an unread one when h's answer starts).
		_ = rc.SetReadDeadline(time.Now().Add(stall))
		r.Body = b
		h.ServeHTTP(bw, r)
		switch {
		case bw.hijacked.Load():
			return
		case b.failed.Load() && !bw.wrote.Load():
			// h did not answer: the request's context ends with its
			// body's failure, which h may take for a caller gone, and
			// the server's answer would be a 200.
			if b.timedOut.Load() {
				http.Error(bw, fmt.Sprintf("the request's body stopped coming (nothing for %v)", stall), http.StatusRequestTimeout)
			} else {
				http.Error(bw, "the request's body could not be read: malformed, or cut", http.StatusBadRequest)
			}
		case !b.ended.Load():
			bw.begin()
			b.cap(time.Now().Add(DrainGrace))
		}
		b.finish()
	})
}

// errAfterHandler fails a read of a body after its handler returned.
var errAfterHandler = errors.New("http: the request's body was read after its handler returned")

// body is a request's body whose every read waits at most BodyStall.
type body struct {
	io.ReadCloser
	rc    *http.ResponseController
	stall time.Duration
	// mu is held by a Read, so that the handler's end can wait for one
	// in flight (see finish); done is set then, and fails later ones.
	mu   sync.Mutex
	done bool
	// ended is set once a read returned an error (the body's end
	// included). From then on the server reads the connection itself,
	// in the background, to tell a caller that went away; a deadline
	// set then would end the request.
	ended atomic.Bool
	// failed is set when that error was not the body's end, timedOut
	// when it was BodyStall's.
	failed, timedOut atomic.Bool
	// until, once set (Unix nanoseconds), is a deadline no read may
	// wait past, whatever its stall bound: the drain's end once the
	// handler returned, or the past for a body cut (Cut). A read arming
	// its own deadline checks it after, so that one set in between
	// (by another goroutine) is never overwritten.
	until atomic.Int64
	// capMu orders the caps' deadlines (not held by a read).
	capMu sync.Mutex
	// closed is set by Close.
	closed atomic.Bool
}

// Close ends the handler's reading of the body, and only that: the
// server reads what remains of it (to keep the connection, within
// DrainGrace and 256 KiB) or closes the connection, and closes the body
// itself. Closed here before its end (a transport that forwarded it and
// gave up), the server would take it as read whole, and keep the
// connection with the rest of the body unread on it. It does not wait
// for a read in flight.
func (b *body) Close() error {
	b.closed.Store(true)
	return nil
}

// cap sets a deadline no read of b may wait past, and applies it to a
// read in flight.
func (b *body) cap(t time.Time) {
	b.capMu.Lock()
	defer b.capMu.Unlock()
	if u := b.until.Load(); u != 0 && u <= t.UnixNano() {
		return
	}
	b.until.Store(t.UnixNano())
	_ = b.rc.SetReadDeadline(t)
}

// Cut ends the reading of rc, a request's body as a server of this
// package gives it to its handler: a read in flight returns at once with
// a timeout, and later ones fail the same way. It reports false, doing
// nothing, for any other body. (A handler that ends a body from another
// goroutine, when the request's sandbox ends say, cannot do it with the
// connection's deadline alone: the body's next read would arm its stall
// bound over it.)
func Cut(rc io.Reader) bool {
	b, ok := rc.(*body)
	if ok {
		b.cap(time.Unix(1, 0))
	}
	return ok
}

func (b *body) Read(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.done {
		return 0, errAfterHandler
	}
	if b.closed.Load() {
		return 0, http.ErrBodyReadAfterClose
	}
	if !b.ended.Load() {
		d := time.Now().Add(b.stall)
		if u := b.until.Load(); u != 0 && u < d.UnixNano() {
			d = time.Unix(0, u)
		}
		_ = b.rc.SetReadDeadline(d)
		if u := b.until.Load(); u != 0 && u < d.UnixNano() {
			_ = b.rc.SetReadDeadline(time.Unix(0, u)) // capped meanwhile
		}
	}
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF && b.until.Load() == 0 {
		// The body is whole: the server now reads the connection in the
		// background, to tell a caller gone, for as long as the answer
		// takes. The stall bound armed for this read must not end that
		// read (and with it the request, as if the caller had left).
		_ = b.rc.SetReadDeadline(time.Time{})
	}
	if err != nil {
		b.ended.Store(true)
		if err != io.EOF {
			b.failed.Store(true)
			b.timedOut.Store(errors.Is(err, os.ErrDeadlineExceeded))
		}
	}
	return n, err
}

// finish ends the body's reads as its handler returns. A read may still
// be in flight: a transport that was sending the body on to another
// server, and gave up when that one answered. It is waited for (the
// deadline just set cuts it), and later ones fail: the server reads
// what remains of the body itself next, and finding a read of the
// connection in flight it would clear the connection's deadline, then
// wait for the rest of a body that never comes.
func (b *body) finish() {
	b.mu.Lock()
	b.done = true
	b.mu.Unlock()
}

// writer is the ResponseWriter of a request with a body: the server's,
// with an answer that closes the connection when the body is not whole
// as it starts, and a switch of protocols that clears the body's
// deadline.
type writer struct {
	http.ResponseWriter
	b          *body
	wrote      atomic.Bool // the answer has started
	hijacked   atomic.Bool
	fullDuplex atomic.Bool // the handler answers as the body comes
}

// begin is called as the answer starts. After a body's failure the
// connection closes: what remains of it on the wire must not be read as
// another request. An answer that starts before the body's end (a
// refusal that did not read it, an answer streamed as the body comes)
// caps what remains of the body at DrainGrace: the server reads up to
// 256 KiB of it, for DrainGrace at most, before it sends the answer, to
// keep the connection (more than that, and it closes the connection,
// gracefully, so that a caller still sending reads the answer and not a
// reset); a handler still reading it as it streams its answer has as
// long. A Connection: close set here instead would make the server skip
// that read and close the connection at once under a caller still
// sending, who would then see the reset, not the answer.
//
// A handler that answers full duplex (a relay of a stream whose request
// goes on as its answer comes) reads the body as it answers, and the
// server will read none of it after: the connection closes, since what
// remains of the body, should it fail or stop, would otherwise be read
// as the next request, and the connection kept waiting for it.
func (w *writer) begin() {
	if w.wrote.Swap(true) {
		return
	}
	switch {
	case w.b.failed.Load():
		w.Header().Set("Connection", "close")
	case !w.b.ended.Load() && w.fullDuplex.Load():
		w.Header().Set("Connection", "close")
	case !w.b.ended.Load():
		w.b.cap(time.Now().Add(DrainGrace))
	}
}

// EnableFullDuplex enables it on the server's writer, and says so to
// begin.
func (w *writer) EnableFullDuplex() error {
	w.fullDuplex.Store(true)
	return http.NewResponseController(w.ResponseWriter).EnableFullDuplex()
}

func (w *writer) WriteHeader(status int) {
	// Not for 1xx: informational, or a switch whose Connection header
	// is the switch's.
	if status >= 200 {
		w.begin()
	}
	w.ResponseWriter.WriteHeader(status)
}

func (w *writer) Write(p []byte) (int, error) {
	w.begin()
	return w.ResponseWriter.Write(p)
}

// Unwrap lets http.ResponseController reach the server's writer.
func (w *writer) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// FlushError and Flush flush as the server's writer does: handlers that
// stream check for http.Flusher.
func (w *writer) FlushError() error {
	w.begin()
	return http.NewResponseController(w.ResponseWriter).Flush()
}

func (w *writer) Flush() { _ = w.FlushError() }

// Hijack hands the connection over with no deadline: what the caller
// sends from now on is the new protocol's, bounded by its handler.
func (w *writer) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	c, brw, err := http.NewResponseController(w.ResponseWriter).Hijack()
	if err != nil {
		return nil, nil, err
	}
	w.hijacked.Store(true)
	w.b.ended.Store(true)
	_ = c.SetReadDeadline(time.Time{})
	return c, brw, nil
}
