package egress

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

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
		g.deny(w, ev, http.StatusBadRequest, "not a proxy request: send absolute-form requests (GET http://host/path) or CONNECT host:port")
	case r.URL.Scheme != "http":
		ev.Destination = r.URL.Host
		g.deny(w, ev, http.StatusBadRequest, fmt.Sprintf("scheme %q is not proxied: use CONNECT for https", r.URL.Scheme))
	default:
		g.serveForward(w, r, ev)
	}
}

// refuse answers with a plain-text body meant for the person reading the
// tool's output. It never carries internal errors.
func refuse(w http.ResponseWriter, status int, msg string) {
	h := w.Header()
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Connection", "close")
	w.WriteHeader(status)
	io.WriteString(w, "airlock: "+msg+"\n")
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

// deny logs a refusal and answers the client.
func (g *Gateway) deny(w http.ResponseWriter, ev result.EgressEvent, status int, reason string) {
	ev.Reason = reason
	ev.Status = status
	ev.DurationMs = time.Since(ev.Time).Milliseconds()
	g.emit(ev)
	refuse(w, status, fmt.Sprintf("egress to %q denied: %s", ev.Destination, reason))
}

// dialFor dials for a proxy request, answering the client itself when the
// request is refused or fails. ok is false when it answered.
func (g *Gateway) dialFor(w http.ResponseWriter, r *http.Request, ev *result.EgressEvent, host string, port uint16) (outbound, bool) {
	out, dec, err := g.dial(r.Context(), host, port)
	ev.Allow = dec.Allow
	switch {
	case !dec.Allow:
		g.deny(w, *ev, http.StatusForbidden, dec.Reason)
	case errors.Is(err, errCapped):
		g.deny(w, *ev, http.StatusTooManyRequests, dec.Reason)
	case err != nil:
		g.deny(w, *ev, http.StatusBadGateway, dec.Reason)
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
		g.deny(w, ev, http.StatusBadRequest, err.Error())
		return
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
	defer g.release()
	up := out.conn
	rc := http.NewResponseController(w)
	conn, brw, err := rc.Hijack()
	if err != nil {
		up.Close()
		logged = true
		g.deny(w, ev, http.StatusInternalServerError, "proxy could not take over the connection")
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
	conn.SetDeadline(time.Time{})
	if _, err := io.WriteString(conn, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		return
	}
	// Bytes the client sent after its request (often the TLS
	// ClientHello) are already in the server's buffer.
	var pre []byte
	if n := brw.Reader.Buffered(); n > 0 {
		pre, _ = brw.Reader.Peek(n)
	}
	ev.Status = http.StatusOK
	ev.BytesOut, ev.BytesIn, ev.Reason = g.pipe(conn, up, pre)
}

// serveForward relays an absolute-form http:// request. The proxy never
// follows redirects: a 3xx goes back to the client like any answer, so a
// redirect to a forbidden address is decided when (and if) the client asks
// for it.
func (g *Gateway) serveForward(w http.ResponseWriter, r *http.Request, ev result.EgressEvent) {
	ev.Destination = r.URL.Host
	host, port, err := splitHostPort(r.URL.Host, 80)
	if err != nil {
		g.deny(w, ev, http.StatusBadRequest, err.Error())
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
	var used atomic.Bool
	var status atomic.Int64
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL = pr.In.URL
			pr.Out.Host = pr.In.Host
		},
		Transport: &http.Transport{
			// One request, one connection: the one dialed and checked
			// above, never a pooled one to somewhere else.
			DialContext: func(context.Context, string, string) (net.Conn, error) {
				if used.Swap(true) {
					return nil, errors.New("connection already used")
				}
				return cc, nil
			},
			DisableKeepAlives:  true,
			DisableCompression: true,
			Proxy:              nil,
		},
		FlushInterval: -1,
		ModifyResponse: func(resp *http.Response) error {
			status.Store(int64(resp.StatusCode))
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, _ *http.Request, err error) {
			status.Store(http.StatusBadGateway)
			ev.Reason = "upstream failed: " + dialReason(err)
			if cc.capped.Load() {
				ev.Reason = fmt.Sprintf("cut: byte limit of %d reached", g.cfg.Limits.Bytes)
			}
			refuse(w, http.StatusBadGateway, fmt.Sprintf("request to %q failed", ev.Destination))
		},
	}
	rp.ServeHTTP(w, r)
	ev.Status = int(status.Load())
	ev.BytesOut, ev.BytesIn = cc.out.Load(), cc.in.Load()
	if cc.capped.Load() && ev.Reason == "" {
		ev.Reason = fmt.Sprintf("cut: byte limit of %d reached", g.cfg.Limits.Bytes)
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
	n, err := c.Conn.Write(b)
	c.out.Add(int64(n))
	c.g.bytes.Add(int64(n))
	return n, err
}
