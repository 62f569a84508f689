package dns

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"syscall"
	"time"
)

// udpBufSize is the UDP read buffer. Queries are far smaller; a longer
// datagram is cut short and then fails to parse.
const udpBufSize = 4096

// ServeUDP serves on conn until ctx is done or conn is closed, answering each
// datagram to its sender. It returns nil on either. To stop a blocked read on
// ctx done it sets conn's deadline in the past; it does not close conn.
func (s *Server) ServeUDP(ctx context.Context, conn net.PacketConn) error {
	defer s.flushLimitLog("udp")
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()

	buf := make([]byte, udpBufSize)
	for {
		if ctx.Err() != nil {
			return nil
		}
		n, addr, err := conn.ReadFrom(buf)
		if n > 0 && addr != nil {
			if resp := s.Handle(buf[:n], "udp"); resp != nil {
				// A failed write loses one answer to a sender that
				// may be gone; the client retries.
				_, _ = conn.WriteTo(resp, addr)
			}
		}
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return nil
			}
			return fmt.Errorf("dns: udp read: %w", err)
		}
	}
}

// ServeTCP serves RFC 1035/7766 length-prefixed messages, several per
// connection answered in order, until ctx is done or ln is closed. It closes
// ln when ctx is done, closes its connections when it returns, and waits for
// their goroutines before returning. It returns nil on ctx done or ln closed.
func (s *Server) ServeTCP(ctx context.Context, ln net.Listener) error {
	var wg sync.WaitGroup
	defer s.flushLimitLog("tcp")
	defer wg.Wait()
	// Cancelling on any return closes the open connections, so Wait does
	// not hang on a client that keeps its connection busy.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(ctx, func() { _ = ln.Close() })
	defer stop()

	var backoff time.Duration
	for {
		c, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return nil
			}
			if !temporaryAcceptError(err) {
				return fmt.Errorf("dns: tcp accept: %w", err)
			}
			// Out of descriptors or buffers: retry later rather than
			// spin or give up on the sandbox's resolver.
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			t := time.NewTimer(backoff)
			select {
			case <-ctx.Done():
				t.Stop()
				return nil
			case <-t.C:
			}
			continue
		}
		backoff = 0
		if !s.acquireConn() {
			// Each connection pins a goroutine and up to 64 KiB; a
			// sandbox opening many must not exhaust the host.
			_ = c.Close()
			continue
		}
		wg.Go(func() {
			defer s.releaseConn()
			s.serveConn(ctx, c)
		})
	}
}

// serveConn answers the messages on one TCP connection until the client
// closes it, it idles, a frame is malformed, or ctx is done.
func (s *Server) serveConn(ctx context.Context, c net.Conn) {
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { _ = c.Close() })
	defer stop()

	idle := s.IdleTimeout
	if idle <= 0 {
		idle = defaultIdleTimeout
	}
	var (
		prefix [2]byte
		buf    []byte
	)
	for {
		// One deadline for the whole message, prefix and body, so a
		// client trickling bytes cannot hold the connection open forever.
		if c.SetReadDeadline(time.Now().Add(idle)) != nil {
			return
		}
		if _, err := io.ReadFull(c, prefix[:]); err != nil {
			return
		}
		n := int(binary.BigEndian.Uint16(prefix[:]))
		if n == 0 {
			return
		}
		if cap(buf) < n {
			buf = make([]byte, n)
		}
		msg := buf[:n]
		if _, err := io.ReadFull(c, msg); err != nil {
			return
		}
		resp := s.Handle(msg, "tcp")
		if resp == nil {
			// Not a query: nothing that follows on this stream can be
			// trusted to be framed sensibly.
			return
		}
		out := make([]byte, 2+len(resp))
		binary.BigEndian.PutUint16(out, uint16(len(resp)))
		copy(out[2:], resp)
		// A client that never reads must not pin the goroutine.
		if c.SetWriteDeadline(time.Now().Add(idle)) != nil {
			return
		}
		if _, err := c.Write(out); err != nil {
			return
		}
	}
}

func (s *Server) acquireConn() bool {
	limit := s.MaxTCPConns
	if limit <= 0 {
		limit = defaultMaxTCPConns
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.tcpConns >= limit {
		return false
	}
	s.tcpConns++
	return true
}

func (s *Server) releaseConn() {
	s.mu.Lock()
	s.tcpConns--
	s.mu.Unlock()
}

// temporaryAcceptError reports whether an Accept error is worth retrying.
func temporaryAcceptError(err error) bool {
	for _, errno := range []syscall.Errno{syscall.EMFILE, syscall.ENFILE, syscall.ENOBUFS, syscall.ENOMEM, syscall.ECONNABORTED, syscall.EINTR} {
		if errors.Is(err, errno) {
			return true
		}
	}
	return false
}
