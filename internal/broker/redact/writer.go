package redact

import (
	"errors"
	"io"
)

// ErrClosed is returned by a [Writer] used after Close.
var ErrClosed = errors.New("redact: writer closed")

// chunk bounds how much of one Write is buffered at a time, so a large Write
// costs a bounded amount of memory beyond the held-back bytes.
const chunk = 32 << 10

// Writer redacts a stream; see [Redactor.Writer]. It is not safe for
// concurrent use.
type Writer struct {
	r *Redactor
	w io.Writer
	// buf holds the bytes not yet decided: fewer than the longest form
	// between calls, plus at most one chunk during a Write.
	buf []byte
	// end is how many leading bytes of buf belong to a redacted run that
	// has already been replaced by its Mask.
	end int
	// out is reused for the output of each step.
	out []byte
	// err is the first error from w; the stream is broken after it,
	// since some output may be lost.
	err    error
	closed bool
}

// Writer returns a streaming redactor: bytes written to it reach w with
// every form replaced, even when an occurrence is split across Write calls.
// The output is exactly what [Redactor.Bytes] gives for everything written,
// however the input was split and wherever Flush was called.
//
// To see an occurrence whole, it holds back at most the length of the
// longest form minus one byte. Flush writes out all of those except a
// trailing part that could still become a form; Close writes out the rest.
// Close does not close w, and neither flushes it.
func (r *Redactor) Writer(w io.Writer) *Writer {
	return &Writer{r: r, w: w}
}

// Write redacts p and writes to the underlying writer what can be decided
// so far. It returns len(p) unless the underlying writer failed.
func (w *Writer) Write(p []byte) (int, error) {
	if w.closed {
		return 0, ErrClosed
	}
	if w.err != nil {
		return 0, w.err
	}
	hold := max(w.r.maxLen-1, 0)
	written := 0
	for len(p) > 0 {
		n := min(len(p), chunk)
		if need := len(w.buf) + n; need > cap(w.buf) {
			// Grow as append would, but never past hold+chunk.
			nb := make([]byte, len(w.buf), max(need, min(2*cap(w.buf), hold+chunk)))
			copy(nb, w.buf)
			w.buf = nb
		}
		w.buf = append(w.buf, p[:n]...)
		// Positions with at least maxLen bytes after them are decided
		// whatever comes next.
		if err := w.step(len(w.buf)-hold, true); err != nil {
			return written, err
		}
		written += n
		p = p[n:]
	}
	return written, nil
}

// Flush writes out every held byte that can no longer become part of a
// form, for a caller that must pass on data promptly (a streamed response).
// What it keeps back is a prefix of some form, so a secret split by a Flush
// is still redacted whole.
func (w *Writer) Flush() error {
	if w.closed {
		return ErrClosed
	}
	if w.err != nil {
		return w.err
	}
	return w.step(len(w.buf), false)
}

// Close writes out everything held back, redacted as the end of the stream.
// It does not close the underlying writer. Closing again returns nil.
func (w *Writer) Close() error {
	if w.closed {
		return nil
	}
	w.closed = true
	if w.err != nil {
		return w.err
	}
	err := w.step(len(w.buf), true)
	w.buf, w.out = nil, nil
	return err
}

// step decides buf up to limit (see Redactor.scan), writes the output, and
// keeps the undecided rest.
func (w *Writer) step(limit int, final bool) error {
	if limit <= 0 {
		return nil
	}
	out, next, end := w.r.scan(w.out[:0], w.buf, 0, w.end, limit, final)
	w.out = out
	n := copy(w.buf, w.buf[next:])
	w.buf = w.buf[:n]
	w.end = max(end-next, 0)
	if len(out) == 0 {
		return nil
	}
	m, err := w.w.Write(out)
	if err == nil && m < len(out) {
		err = io.ErrShortWrite
	}
	if err != nil {
		w.err = err
	}
	return err
}
