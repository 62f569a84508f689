package egress

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/airlockhq/airlock/internal/httpx"
	"github.com/airlockhq/airlock/result"
)

// Plain HTTP on the transparent path and in the proxy's CONNECT tunnels. A
// connection to a name's address, or a tunnel to a name, that does not
// start with TLS must be HTTP/1, and every request on it must name that
// host (Host, with the connection's port or none): a client could
// otherwise connect for an allowed name and ask the same upstream, a CDN
// serving thousands, for another site. Each request is relayed as the
// proxy relays an absolute-form request (serveForward), to the name the
// connection is for and with its own event. Anything else (another
// protocol, HTTP/2 without TLS) needs opaque: true.

// maxRequestLine bounds the first line read to tell HTTP/1 from anything
// else.
const maxRequestLine = 8 << 10

// serveTransparentHTTP serves the HTTP/1 requests of connection c to
// name:port, pre being what was read of it already; kind is their events'
// (transparent, or proxy for a CONNECT tunnel). It returns the refusal (or
// closedEarly) when the connection does not carry HTTP/1 at all.
func (g *Gateway) serveTransparentHTTP(c net.Conn, pre []byte, name string, port uint16, kind string) Decision {
	br := bufio.NewReaderSize(io.MultiReader(bytes.NewReader(pre), c), maxRequestLine)
	// The first line, read as it arrives (a Peek of what is buffered, or
	// of one byte more, which waits for it), each byte searched once.
	c.SetReadDeadline(time.Now().Add(g.cfg.HelloWait))
	var line []byte
	var err error
	for n, seen := 1, 0; ; {
		line, err = br.Peek(n)
		if i := bytes.IndexByte(line[seen:], '\n'); i >= 0 {
			line = line[:seen+i]
			break
		}
		seen = len(line)
		if err != nil || n >= maxRequestLine {
			break
		}
		if b := br.Buffered(); b > n {
			n = b // look at what has arrived
		} else {
			n++ // wait for one more byte
		}
		n = min(n, maxRequestLine)
	}
	c.SetReadDeadline(time.Time{})
	if len(line) == 0 && err != nil {
		return closedEarly
	}
	if why := notHTTP1(line); why != "" {
		return Decision{Code: result.EgressNotHTTP1, Reason: why}
	}
	conn := &readerConn{Conn: c, r: br}
	done := make(chan struct{})
	var once sync.Once
	srv := httpx.New(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { g.serveTransparentRequest(w, r, name, port, kind) }),
		httpx.Options{Logger: g.cfg.Logger})
	srv.BaseContext = func(net.Listener) context.Context { return g.ctx }
	srv.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateClosed || s == http.StateHijacked {
			once.Do(func() { close(done) })
		}
	}
	_ = srv.Serve(&oneConn{c: conn})
	select {
	case <-done:
	case <-g.ctx.Done():
		_ = srv.Close()
		<-done
	}
	return Decision{}
}

// serveTransparentRequest relays one request, after checking that it names
// the host the connection is for.
func (g *Gateway) serveTransparentRequest(w http.ResponseWriter, r *http.Request, name string, port uint16, kind string) {
	dest := net.JoinHostPort(name, strconv.Itoa(int(port)))
	ev := result.EgressEvent{Time: time.Now(), Kind: kind, Method: r.Method, Destination: dest}
	switch {
	case r.Method == http.MethodConnect:
		g.deny(w, ev, http.StatusMethodNotAllowed, denial(result.EgressMalformed, "CONNECT on a connection to %q", dest))
		return
	case !sameHost(r.Host, name, port):
		ev.Destination = r.Host
		g.deny(w, ev, http.StatusMisdirectedRequest, denial(result.EgressHostMismatch, "HTTP Host %q is not %q, the host this connection is for", r.Host, dest))
		return
	}
	r.URL.Scheme, r.URL.Host = "http", dest
	g.serveForward(w, r, ev)
}

// sameHost reports whether an HTTP authority names name, with port or no
// port.
func sameHost(authority, name string, port uint16) bool {
	h, p, err := net.SplitHostPort(authority)
	if err != nil {
		h, p = authority, ""
	}
	h = strings.TrimSuffix(h, ".")
	return strings.EqualFold(h, name) && (p == "" || p == strconv.Itoa(int(port)))
}

// notHTTP1 says why a first line is not an HTTP/1 request line
// ("METHOD target HTTP/1.x"), or "" when it is one.
func notHTTP1(line []byte) string {
	line = bytes.TrimSuffix(line, []byte("\r"))
	if bytes.HasPrefix(line, []byte("PRI * HTTP/2.0")) {
		return "HTTP/2 without TLS (h2c): its requests cannot be checked here; the destination needs opaque: true"
	}
	parts := bytes.Split(line, []byte(" "))
	if len(parts) != 3 || len(parts[0]) == 0 || len(parts[1]) == 0 ||
		!(bytes.Equal(parts[2], []byte("HTTP/1.1")) || bytes.Equal(parts[2], []byte("HTTP/1.0"))) {
		return "neither TLS nor HTTP/1: another protocol needs opaque: true on the destination"
	}
	for _, c := range parts[0] {
		if c < 'A' || c > 'Z' {
			return "neither TLS nor HTTP/1: another protocol needs opaque: true on the destination"
		}
	}
	return ""
}

// readerConn is a connection whose reads come from r (which holds what was
// read of it already).
type readerConn struct {
	net.Conn
	r io.Reader
}

func (c *readerConn) Read(b []byte) (int, error) { return c.r.Read(b) }

// oneConn is a listener that hands out one connection, then none.
type oneConn struct {
	mu sync.Mutex // guards c
	c  net.Conn
}

func (l *oneConn) Accept() (net.Conn, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.c == nil {
		return nil, net.ErrClosed
	}
	c := l.c
	l.c = nil
	return c, nil
}

func (l *oneConn) Close() error   { return nil }
func (l *oneConn) Addr() net.Addr { return &net.TCPAddr{} }
