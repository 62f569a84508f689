package egress

import (
	"io"
	"net"
	"sync"
	"sync/atomic"
)

// bufSize is the copy buffer of one direction of one connection. Measured
// here, a userspace copy with 64 KiB buffers moved bulk data faster than
// splice(2) through a pipe, and 200 connections held open cost 25 MiB at
// most.
const bufSize = 64 << 10

var bufs = sync.Pool{New: func() any { return new([bufSize]byte) }}

// pipe copies between the sandbox-side connection in and the upstream
// connection up, both ways, until both directions end, the byte cap is
// reached, or the gateway closes. pre holds bytes already read from in
// (a peeked TLS ClientHello, a proxy client's buffered bytes) that go
// upstream first. It returns the bytes each way and, when the cap cut the
// connection, a note saying so (g.cut).
func (g *Gateway) pipe(in, up net.Conn, pre []byte) (out, back int64, cut Decision) {
	var capped atomic.Bool
	if len(pre) > 0 {
		n, err := up.Write(pre)
		out += int64(n)
		g.bytes.Add(int64(n))
		if err != nil {
			return out, 0, Decision{}
		}
	}
	var wg sync.WaitGroup
	var outN, backN int64
	wg.Add(2)
	go func() {
		defer wg.Done()
		outN = g.copy(up, in, &capped)
	}()
	go func() {
		defer wg.Done()
		backN = g.copy(in, up, &capped)
	}()
	wg.Wait()
	if capped.Load() {
		cut = g.cut()
	}
	return out + outN, backN, cut
}

// copy moves src to dst until EOF or error, then half-closes dst so the
// peer sees the end, or closes both when the copy failed or the byte cap
// was reached. Every byte counts against the sandbox's cap before it is
// written, so the cap is never overshot.
func (g *Gateway) copy(dst, src net.Conn, capped *atomic.Bool) int64 {
	buf := bufs.Get().(*[bufSize]byte)
	defer bufs.Put(buf)
	var total int64
	for {
		left := g.cfg.Limits.Bytes - g.bytes.Load()
		if left <= 0 {
			capped.Store(true)
			dst.Close()
			src.Close()
			return total
		}
		n, rerr := src.Read(buf[:min(int64(bufSize), left)])
		if n > 0 {
			if g.bytes.Add(int64(n)) > g.cfg.Limits.Bytes {
				// Another connection spent the budget meanwhile.
				capped.Store(true)
				dst.Close()
				src.Close()
				return total
			}
			w, werr := dst.Write(buf[:n])
			total += int64(w)
			if werr != nil {
				dst.Close()
				src.Close()
				return total
			}
		}
		if rerr != nil {
			if n == 0 && isEOF(rerr) {
				// Pass the half-close on; the other direction may
				// still be sending.
				if cw, ok := dst.(interface{ CloseWrite() error }); ok && cw.CloseWrite() == nil {
					return total
				}
			}
			dst.Close()
			src.Close()
			return total
		}
	}
}

func isEOF(err error) bool { return err == io.EOF }
