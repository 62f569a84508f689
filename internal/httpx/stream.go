package httpx

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"time"
)

// ErrStalled is the failure of a stream's write that made no progress
// for its stall bound: the caller stopped reading, its connection open.
var ErrStalled = errors.New("the caller stopped reading")

// Stream writes an answer piece by piece (NDJSON events, Connect
// envelopes, a relayed stream, a terminal's output), each write and each
// flush bounded by a stall time. A caller that stops taking the answer
// then holds nothing: the write fails with ErrStalled, and the writer
// ends what it was streaming, rather than keeping a command (its sandbox,
// its share of the node) for as long as the caller keeps the connection
// open. A stream that keeps moving is never cut, however long it lasts.
//
// A Stream is not safe for concurrent use; its writers serialize.
type Stream struct {
	w        io.Writer
	flush    func() error
	deadline func(time.Time) error
	stall    time.Duration
}

// NewStream streams the answer w, each write bounded by stall (0: no
// bound).
func NewStream(w http.ResponseWriter, stall time.Duration) *Stream {
	rc := http.NewResponseController(w)
	return &Stream{w: w, flush: rc.Flush, deadline: rc.SetWriteDeadline, stall: stall}
}

// ConnStream streams to a connection taken over from its server (a
// terminal): writes go to bw, which flushes to conn.
func ConnStream(bw *bufio.Writer, conn net.Conn, stall time.Duration) *Stream {
	return &Stream{w: bw, flush: bw.Flush, deadline: conn.SetWriteDeadline, stall: stall}
}

// Stall is the stream's bound on one write.
func (s *Stream) Stall() time.Duration { return s.stall }

// arm sets the deadline of the next write.
func (s *Stream) arm() {
	if s.stall > 0 {
		_ = s.deadline(time.Now().Add(s.stall))
	}
}

// wrap says that a write's failure was a stall, when it was.
func (s *Stream) wrap(err error) error {
	if err != nil && errors.Is(err, os.ErrDeadlineExceeded) {
		return fmt.Errorf("%w for %v", ErrStalled, s.stall)
	}
	return err
}

// Write writes p, bounded by the stall time; it may stay buffered.
func (s *Stream) Write(p []byte) error {
	s.arm()
	_, err := s.w.Write(p)
	return s.wrap(err)
}

// Flush sends what is buffered, bounded by the stall time.
func (s *Stream) Flush() error {
	s.arm()
	return s.wrap(s.flush())
}

// Send writes p and flushes it.
func (s *Stream) Send(p []byte) error {
	if err := s.Write(p); err != nil {
		return err
	}
	return s.Flush()
}

// End lifts the write deadline once the stream is over: the connection
// may carry the caller's next request.
func (s *Stream) End() { _ = s.deadline(time.Time{}) }

// StallConn bounds each write to c, a connection taken over from its
// server and handed on (a proxied terminal), by stall.
func StallConn(c net.Conn, stall time.Duration) net.Conn { return stallConn{c, stall} }

type stallConn struct {
	net.Conn
	stall time.Duration
}

func (c stallConn) Write(b []byte) (int, error) {
	if err := c.SetWriteDeadline(time.Now().Add(c.stall)); err != nil {
		return 0, err
	}
	return c.Conn.Write(b)
}
