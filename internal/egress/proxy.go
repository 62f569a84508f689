package egress

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/airlockhq/airlock/internal/egress/ipclass"
	"github.com/airlockhq/airlock/internal/refusal"
	"github.com/airlockhq/airlock/result"
)

// serveProxy handles one request to the sandbox's HTTP proxy.
func (g *Gateway) serveProxy(w http.ResponseWriter, r *http.Request) {
	ev := result.EgressEvent{Time: time.Now(), Kind: result.EgressProxy, Method: r.Method}
	switch {
	case r.Method == http.MethodConnect:
		g.serveConnect(w, r, ev)
	case !r.URL.IsAbs():
		ev.Destination = r.Host
		g.deny(w, ev, http.StatusBadRequest, denial(result.EgressMalformed, "not a proxy request: send absolute-form requests (GET http://host/path) or CONNECT host:port"))
	case r.URL.Scheme != "http":
		ev.Destination = r.URL.Host
		g.deny(w, ev, http.StatusBadRequest, denial(result.EgressMalformed, "scheme %q is not proxied: use CONNECT for https", r.URL.Scheme))
	default:
		g.serveForward(w, r, ev)
	}
}

// refuse answers with a plain-text body meant for whoever reads the
// tool's output, a model first (internal/refusal). It never carries
// internal errors.
func refuse(w http.ResponseWriter, status int, msg string) {
	h := w.Header()
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Connection", "close")
	w.WriteHeader(status)
	io.WriteString(w, msg+"\n")
}

// splitHostPort splits an authority; a missing port is def (0: required).
func splitHostPort(authority string, def uint16) (string, uint16, error) {
	host, ps, err := net.SplitHostPort(authority)
	if err != nil {
		if def == 0 || strings.Contains(authority, "]:") {
			return "", 0, fmt.Errorf("%q is not host:port", authority)
		}
		host, ps = strings.TrimSuffix(strings.TrimPrefix(authority, "["), "]"), strconv.Itoa(int(def))
	}
	p, err := strconv.ParseUint(ps, 10, 16)
	if err != nil || p == 0 {
		return "", 0, fmt.Errorf("invalid port %q", ps)
	}
	if host == "" {
		return "", 0, fmt.Errorf("%q has no host", authority)
	}
	return host, uint16(p), nil
}

// deny logs a refusal, with its code and reason, and answers the client
// with the reason.
func (g *Gateway) deny(w http.ResponseWriter, ev result.EgressEvent, status int, dec Decision) {
	ev.Code, ev.Reason = dec.Code, dec.Reason
	ev.Status = status
	ev.DurationMs = time.Since(ev.Time).Milliseconds()
	g.emit(ev)
	if ev.Method == http.MethodConnect && status == http.StatusForbidden && refusal.Policy(ev.Code) && refuseConnect(w, status, refusal.Egress(ev)) {
		return
	}
	refuse(w, status, refusal.Egress(ev))
}

// refuseConnect answers a refused CONNECT with refusal.ConnectPhrase as
// the status line's reason phrase: most clients show only the status
// line of a refused tunnel, never its body (curl and git print
// "CONNECT tunnel failed, response 403"; curl -v prints the line; pip,
// through Python's http.client, prints "Tunnel connection failed: 403"
// and the phrase). net/http writes only the standard phrase, so the
// answer is written on the hijacked connection. It reports false when
// the connection could not be taken over (the caller then answers as
// usual).
func refuseConnect(w http.ResponseWriter, status int, msg string) bool {
	conn, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return false
	}
	defer conn.Close()
	// A client that reads nothing holds the answer no longer than this.
	conn.SetWriteDeadline(time.Now().Add(5 * time.Second))
	body := msg + "\n"
	fmt.Fprintf(brw, "HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\nX-Content-Type-Options: nosniff\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s",
		status, refusal.ConnectPhrase, len(body), body)
	brw.Flush()
	return true
}

// dialFor dials for a proxy request, answering the client itself when the
// request is refused or fails. ok is false when it answered.
func (g *Gateway) dialFor(w http.ResponseWriter, r *http.Request, ev *result.EgressEvent, host string, port uint16) (outbound, bool) {
	out, dec, err := g.dial(r.Context(), host, port)
	ev.Allow = dec.Allow
	switch {
	case errors.Is(err, errCapped):
		g.deny(w, *ev, http.StatusTooManyRequests, dec)
	case !dec.Allow:
		g.deny(w, *ev, http.StatusForbidden, dec)
	case err != nil:
		g.deny(w, *ev, http.StatusBadGateway, dec)
	default:
		ev.Address = out.addr.String()
		return out, true
	}
	return out, false
}

// serveConnect tunnels a CONNECT request.
func (g *Gateway) serveConnect(w http.ResponseWriter, r *http.Request, ev result.EgressEvent) {
	ev.Destination = r.Host
	host, port, err := splitHostPort(r.Host, 0)
	if err != nil {
		g.deny(w, ev, http.StatusBadRequest, Decision{Code: result.EgressMalformed, Reason: err.Error()})
		return
	}
	if name := strings.ToLower(strings.TrimSuffix(host, ".")); g.cfg.Intercept != nil {
		if h := g.intercepted(name, port); h != nil {
			g.serveIntercepted(w, ev, name, h)
			return
		}
	}
	out, ok := g.dialFor(w, r, &ev, host, port)
	if !ok {
		return
	}
	// Deferred in this order so the slot is free before the event says
	// the connection ended.
	logged := false
	defer func() {
		if !logged {
			ev.DurationMs = time.Since(ev.Time).Milliseconds()
			g.emit(ev)
		}
	}()
	// The slot is given back early when the tunnel turns out to carry
	// plain HTTP, whose requests take slots of their own.
	released := false
	release := func() {
		if !released {
			released = true
			g.release()
		}
	}
	defer release()
	up := out.conn
	rc := http.NewResponseController(w)
	conn, brw, err := rc.Hijack()
	if err != nil {
		up.Close()
		logged = true
		g.deny(w, ev, http.StatusInternalServerError, denial(result.EgressInternal, "proxy could not take over the connection"))
		return
	}
	if !g.track(conn) || !g.track(up) {
		conn.Close()
		up.Close()
		return
	}
	defer func() {
		g.untrack(conn)
		g.untrack(up)
		conn.Close()
		up.Close()
	}()
	pre, ok := established(conn, brw)
	if !ok {
		return
	}
	ev.Status = http.StatusOK
	// What the client sends through the tunnel must be for the host it
	// asked for, as on the transparent path: a CONNECT for an allowed
	// name, then a ClientHello for another, reached every site served
	// at the same address.
	name := ""
	if _, isIP, err := ipclass.ParseHost(host); err == nil && !isIP {
		name = strings.ToLower(strings.TrimSuffix(host, "."))
	}
	method := ev.Method
	ev.Method = "plain" // unless checkHello finds TLS
	pre, why := g.checkHello(conn, pre, name, out.opaque, &ev)
	plain := ev.Method == "plain"
	ev.Method = method // the event is the CONNECT's
	if why.Code == "" && plain && !out.opaque && name != "" {
		// Not TLS, to a name: HTTP/1 only, every request checked
		// for the tunnel's host and relayed on its own, as on the
		// transparent path. Spliced, a CONNECT for allowed:80 then
		// "Host: other" reached any site served at the same address.
		// The connection dialed for the CONNECT carries nothing.
		up.Close()
		release()
		why = g.serveTransparentHTTP(conn, pre, name, port, result.EgressProxy)
		if why.Code == "" {
			ev.Reason = "plain HTTP: each request is logged on its own"
			return
		}
	}
	if why.Code != "" {
		ev.Code, ev.Reason = why.Code, why.Reason
		if why.Code != result.EgressClosed {
			ev.Allow = false
		}
		return
	}
	var cut Decision
	ev.BytesOut, ev.BytesIn, cut = g.pipe(conn, up, pre)
	ev.Code, ev.Reason = cut.Code, cut.Reason
}

// serveForward relays an absolute-form http:// request. The proxy never
// follows redirects: a 3xx goes back to the client like any answer, so a
// redirect to a forbidden address is decided when (and if) the client asks
// for it.
func (g *Gateway) serveForward(w http.ResponseWriter, r *http.Request, ev result.EgressEvent) {
	ev.Destination = r.URL.Host
	host, port, err := splitHostPort(r.URL.Host, 80)
	if err != nil {
		g.deny(w, ev, http.StatusBadRequest, Decision{Code: result.EgressMalformed, Reason: err.Error()})
		return
	}
	if ev.Destination == host {
		ev.Destination = net.JoinHostPort(host, strconv.Itoa(int(port)))
	}
	out, ok := g.dialFor(w, r, &ev, host, port)
	if !ok {
		return
	}
	defer func() {
		ev.DurationMs = time.Since(ev.Time).Milliseconds()
		g.emit(ev)
	}()
	defer g.release()
	cc := &countedConn{Conn: out.conn, g: g}
	if !g.track(cc) {
		return
	}
	defer func() {
		g.untrack(cc)
		cc.Close()
	}()
	st := &forwardState{cc: cc, ev: &ev}
	g.forward.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), forwardKey{}, st)))
	ev.Status = int(st.status.Load())
	ev.BytesOut, ev.BytesIn = cc.out.Load(), cc.in.Load()
	if cc.capped.Load() {
		cut := g.cut()
		ev.Code, ev.Reason = cut.Code, cut.Reason
	}
}

// forwardKey carries a relayed request's forwardState in its context.
type forwardKey struct{}

// forwardState is what the shared reverse proxy needs of one request.
type forwardState struct {
	cc     *countedConn // dialed and checked for this request only
	used   atomic.Bool
	status atomic.Int64
	ev     *result.EgressEvent
}

func stateOf(ctx context.Context) *forwardState {
	st, _ := ctx.Value(forwardKey{}).(*forwardState)
	return st
}

// newForwarder builds the reverse proxy that relays absolute-form
// requests, one per gateway. It never dials by itself: each request
// brings the one connection that was dialed and checked for it, and
// keep-alives are off, so no request can ride a connection made for
// another destination.
func (g *Gateway) newForwarder() *httputil.ReverseProxy {
	return &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL = pr.In.URL
			pr.Out.Host = pr.In.Host
		},
		Transport: &http.Transport{
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				st := stateOf(ctx)
				if st == nil || st.used.Swap(true) {
					return nil, errors.New("no checked connection for this request")
				}
				return st.cc, nil
			},
			DisableKeepAlives:  true,
			DisableCompression: true,
			Proxy:              nil,
			ReadBufferSize:     bufSize,
			WriteBufferSize:    bufSize,
		},
		// Zero still flushes streaming responses (unknown length,
		// text/event-stream) at once, and saves a write per response
		// otherwise.
		FlushInterval: 0,
		BufferPool:    bytePool{},
		ModifyResponse: func(resp *http.Response) error {
			if st := stateOf(resp.Request.Context()); st != nil {
				st.status.Store(int64(resp.StatusCode))
			}
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			st := stateOf(r.Context())
			if st == nil {
				refuse(w, http.StatusBadGateway, "airlock: request failed")
				return
			}
			st.status.Store(http.StatusBadGateway)
			st.ev.Code, st.ev.Reason = result.EgressUpstreamFailed, "upstream failed: "+dialReason(err)
			refuse(w, http.StatusBadGateway, fmt.Sprintf("airlock: request to %q failed", st.ev.Destination))
		},
		ErrorLog: slog.NewLogLogger(g.cfg.Logger.Handler(), slog.LevelDebug),
	}
}

// bytePool lends the reverse proxy the same 64 KiB buffers the tunnels
// use (its default is a fresh 32 KiB buffer per request).
type bytePool struct{}

func (bytePool) Get() []byte { return bufs.Get().(*[bufSize]byte)[:] }
func (bytePool) Put(b []byte) {
	if len(b) == bufSize {
		bufs.Put((*[bufSize]byte)(b))
	}
}

// countedConn counts the bytes of a relayed request against the byte cap.
type countedConn struct {
	net.Conn
	g       *Gateway
	in, out atomic.Int64
	capped  atomic.Bool
}

var errByteCap = errors.New("byte limit reached")

func (c *countedConn) budget() bool {
	if c.g.bytes.Load() >= c.g.cfg.Limits.Bytes {
		c.capped.Store(true)
		return false
	}
	return true
}

func (c *countedConn) Read(b []byte) (int, error) {
	if !c.budget() {
		return 0, errByteCap
	}
	n, err := c.Conn.Read(b)
	c.in.Add(int64(n))
	c.g.bytes.Add(int64(n))
	return n, err
}

func (c *countedConn) Write(b []byte) (int, error) {
	if !c.budget() {
		return 0, errByteCap
	}
	// Counted before the write: the transport writes on a goroutine of
	// its own, and the answer to these bytes may be relayed (and the
	// event logged) before that goroutine would get to count them.
	c.out.Add(int64(len(b)))
	c.g.bytes.Add(int64(len(b)))
	n, err := c.Conn.Write(b)
	if short := int64(len(b) - n); short > 0 {
		c.out.Add(-short)
		c.g.bytes.Add(-short)
	}
	return n, err
}

// established answers a CONNECT whose connection was taken over, and
// returns the bytes the client sent after its request (often the TLS
// ClientHello), already in the server's buffer; ok is false when the
// client is gone.
func established(conn net.Conn, brw *bufio.ReadWriter) (pre []byte, ok bool) {
	conn.SetDeadline(time.Time{})
	if _, err := io.WriteString(conn, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		return nil, false
	}
	if n := brw.Reader.Buffered(); n > 0 {
		pre, _ = brw.Reader.Peek(n)
		pre = bytes.Clone(pre)
	}
	return pre, true
}
