package egress

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/airlockhq/airlock/internal/httpx"
	"github.com/airlockhq/airlock/result"
)

// Transparent brokering (docs/decisions/0035): a connection to a name
// the broker serves at its real host is not tunnelled, whether it came
// as a CONNECT to the proxy or to the name's transparent address (a
// client that ignores HTTPS_PROXY). The gateway requires TLS naming
// that host (no downgrade to plain HTTP, no other server name),
// terminates it with the sandbox's own authority and serves the
// requests with the broker's handler, which holds each to the service's
// operations and attaches the credential on this side. Nothing is
// dialled from here: the broker dials the upstream.

// Interception is Config.Intercept: the names whose TLS the gateway
// terminates, each on one port, and what serves their requests.
type Interception struct {
	// Ports is each intercepted name (lower case, no final dot) and the
	// port it is served on.
	Ports map[string]uint16
	// Handler returns the handler of a name's requests.
	Handler func(name string) http.Handler
	// TLS is the server config the connections are terminated with
	// (the sandbox's authority).
	TLS *tls.Config
}

// TrustBundle is where, in the sandbox, the trust bundle of transparent
// brokering is written: the host's roots and the sandbox's authority.
const TrustBundle = "/tmp/airlock-ca.pem"

// intercepted returns the handler of name:port when the gateway
// terminates its connections, or nil.
func (g *Gateway) intercepted(name string, port uint16) http.Handler {
	i := g.cfg.Intercept
	if i == nil {
		return nil
	}
	if p, ok := i.Ports[name]; !ok || p != port {
		return nil
	}
	return i.Handler(name)
}

// serveIntercepted serves one CONNECT to name, an intercepted name.
func (g *Gateway) serveIntercepted(w http.ResponseWriter, ev result.EgressEvent, name string, h http.Handler) {
	// An intercepted connection counts against the sandbox's
	// connection cap as a tunnel does: the broker's calls on it are
	// bounded by the broker's own.
	if why := g.acquire(); why.Code != "" {
		g.deny(w, ev, http.StatusTooManyRequests, why)
		return
	}
	defer g.release()
	conn, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		g.deny(w, ev, http.StatusInternalServerError, denial(result.EgressInternal, "proxy could not take over the connection"))
		return
	}
	if !g.track(conn) {
		conn.Close()
		return
	}
	defer func() {
		g.untrack(conn)
		conn.Close()
		ev.DurationMs = time.Since(ev.Time).Milliseconds()
		g.emit(ev)
	}()
	pre, ok := established(conn, brw)
	if !ok {
		return
	}
	ev.Status = http.StatusOK
	g.terminate(conn, pre, name, h, &ev)
}

// serveInterceptedConn serves one connection to an intercepted name's
// transparent address.
func (g *Gateway) serveInterceptedConn(c net.Conn, ev result.EgressEvent, name string, h http.Handler) {
	defer func() {
		ev.DurationMs = time.Since(ev.Time).Milliseconds()
		g.emit(ev)
	}()
	if why := g.acquire(); why.Code != "" {
		ev.Code, ev.Reason = why.Code, why.Reason
		return // closing the connection is the client's answer
	}
	defer g.release()
	ev.Method = ""
	g.terminate(c, nil, name, h, &ev)
}

// acquire takes one of the sandbox's connection slots, or says why not.
func (g *Gateway) acquire() Decision {
	if n := g.active.Add(1); n > int64(g.cfg.Limits.Connections) {
		g.active.Add(-1)
		return denial(result.EgressCapped, "connection limit of %d reached", g.cfg.Limits.Connections)
	}
	return Decision{Allow: true}
}

// terminate checks that conn (pre being what was read of it already)
// starts a TLS handshake for name, then serves its requests with h over
// TLS with the sandbox's authority, until the client or the gateway is
// done. ev is the connection's event, filled in here.
func (g *Gateway) terminate(conn net.Conn, pre []byte, name string, h http.Handler, ev *result.EgressEvent) {
	ev.Allow, ev.Reason = true, "brokered: each request is the broker's call"
	method := ev.Method
	ev.Method = "plain"
	pre, why := g.checkHello(conn, pre, name, false, ev)
	plain := ev.Method == "plain"
	if method != "" {
		ev.Method = method // a CONNECT's event stays the CONNECT's
	}
	if why.Code == "" && plain {
		why = denial(result.EgressMalformed, "plain HTTP to %s, a brokered name: only TLS to it is served", name)
	}
	if why.Code != "" {
		ev.Code, ev.Reason = why.Code, why.Reason
		if why.Code != result.EgressClosed {
			ev.Allow = false
		}
		return
	}
	// The handshake is the gateway's own, so that a client that
	// refuses the sandbox's authority (it pins certificates, or reads
	// its roots from elsewhere than the bundle) is told apart, and the
	// event says what to change.
	cfg := g.cfg.Intercept.TLS.Clone()
	var offered atomic.Bool
	if get := cfg.GetCertificate; get != nil {
		cfg.GetCertificate = func(h *tls.ClientHelloInfo) (*tls.Certificate, error) {
			c, err := get(h)
			offered.Store(err == nil)
			return c, err
		}
	}
	tc := tls.Server(&readerConn{Conn: conn, r: io.MultiReader(bytes.NewReader(pre), conn)}, cfg)
	ctx, cancel := context.WithTimeout(g.ctx, g.cfg.HelloWait)
	err := tc.HandshakeContext(ctx)
	cancel()
	if err != nil {
		ev.Allow = false
		ev.Code, ev.Reason = result.EgressMalformed, "TLS handshake with the client failed: "+err.Error()
		// A client that refuses the certificate sends an alert (a
		// "remote error"), or, as OpenSSL does in TLS 1.3 before its
		// own keys are in use, one that does not decrypt, or closes:
		// anything but silence once the certificate was offered.
		var oe *net.OpError
		var ne net.Error
		if errors.As(err, &oe) && oe.Op == "remote error" || offered.Load() && !(errors.As(err, &ne) && ne.Timeout()) {
			ev.Code = result.EgressCertRefused
			ev.Reason = fmt.Sprintf("the client ended the TLS handshake after airlock's certificate for %s (%v): it pins certificates, or does not read the sandbox's trust bundle; point it at %s (SSL_CERT_FILE names it), or set transparent: false on the service and call the broker's endpoint", name, err, TrustBundle)
		}
		return
	}
	// The connection's requests go to the broker: a server of this
	// connection alone, over TLS with the sandbox's authority.
	done := make(chan struct{})
	var once sync.Once
	var served atomic.Bool
	counted := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		served.Store(true)
		h.ServeHTTP(w, r)
	})
	srv := httpx.New(counted, httpx.Options{Logger: g.cfg.Logger})
	srv.BaseContext = func(net.Listener) context.Context { return g.ctx }
	srv.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateClosed || s == http.StateHijacked {
			once.Do(func() { close(done) })
		}
	}
	// Serve hands a TLS connection that negotiated h2 to HTTP/2.
	_ = srv.Serve(&oneConn{c: tc})
	select {
	case <-done:
	case <-g.ctx.Done():
		_ = srv.Close()
		<-done
	}
	if !served.Load() {
		// A client that checks a pin after the handshake closes
		// without a word.
		ev.Reason = fmt.Sprintf("the client closed after the TLS handshake without a request; if it pins certificates for %s, it cannot be brokered transparently: set transparent: false on the service and call the broker's endpoint", name)
	}
}
