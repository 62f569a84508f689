package egress

import (
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
)

// chunk is how much one copy step may move before the byte cap is looked
// at again. Copies between TCP sockets use splice(2), so bytes never pass
// through this process's memory; the cap is therefore checked between
// steps and may be overshot by less than one chunk.
const chunk = 1 << 20

// pipe copies between the sandbox-side connection in and the upstream
// connection up, both ways, until both directions end, the byte cap is
// reached, or the gateway closes. pre holds bytes already read from in
// (a peeked TLS ClientHello, a proxy client's buffered bytes) that go
// upstream first. It returns the bytes each way and, when the cap cut the
// connection, a reason.
func (g *Gateway) pipe(in, up net.Conn, pre []byte) (out, back int64, reason string) {
	var capped atomic.Bool
	if len(pre) > 0 {
		n, err := up.Write(pre)
		out += int64(n)
		g.bytes.Add(int64(n))
		if err != nil {
			return out, 0, ""
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
		reason = fmt.Sprintf("cut: byte limit of %d reached", g.cfg.Limits.Bytes)
	}
	return out + outN, backN, reason
}

// copy moves src to dst until EOF or error, then half-closes dst so the
// peer sees the end, or closes both when the copy failed or the cap hit.
func (g *Gateway) copy(dst, src net.Conn, capped *atomic.Bool) int64 {
	var total int64
	for {
		left := g.cfg.Limits.Bytes - g.bytes.Load()
		if left <= 0 {
			capped.Store(true)
			dst.Close()
			src.Close()
			return total
		}
		n, err := io.Copy(dst, &io.LimitedReader{R: src, N: min(chunk, left)})
		total += n
		g.bytes.Add(n)
		if err != nil {
			dst.Close()
			src.Close()
			return total
		}
		if n == 0 { // EOF: pass the half-close on
			if cw, ok := dst.(interface{ CloseWrite() error }); ok {
				if cw.CloseWrite() == nil {
					return total
				}
			}
			dst.Close()
			return total
		}
	}
}
