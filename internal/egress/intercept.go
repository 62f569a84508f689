package egress

import (
	"bytes"
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/airlockhq/airlock/internal/httpx"
	"github.com/airlockhq/airlock/result"
)

// Transparent brokering (docs/decisions/0035): a CONNECT for a name the
// broker serves at its real host is not tunnelled. The gateway answers
// it, requires TLS naming that host (no downgrade to plain HTTP, no
// other server name), terminates it with the sandbox's own authority
// and serves the requests with the broker's handler, which holds each
// to the service's operations and attaches the credential on this
// side. Nothing is dialled from here: the broker dials the upstream.

// serveIntercepted serves one CONNECT to name, an intercepted name.
func (g *Gateway) serveIntercepted(w http.ResponseWriter, ev result.EgressEvent, name string, h http.Handler, tc *tls.Config) {
	// An intercepted connection counts against the sandbox's
	// connection cap as a tunnel does: the broker's calls on it are
	// bounded by the broker's own.
	if n := g.active.Add(1); n > int64(g.cfg.Limits.Connections) {
		g.active.Add(-1)
		g.deny(w, ev, http.StatusTooManyRequests, denial(result.EgressCapped, "connection limit of %d reached", g.cfg.Limits.Connections))
		return
	}
	defer g.release()
	ev.Allow, ev.Reason = true, "brokered: each request is the broker's call"
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
	method := ev.Method
	ev.Method = "plain"
	pre, why := g.checkHello(conn, pre, name, false, &ev)
	plain := ev.Method == "plain"
	ev.Method = method
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
	// The connection's requests go to the broker: a server of this
	// connection alone, over TLS with the sandbox's authority.
	done := make(chan struct{})
	var once sync.Once
	srv := httpx.New(h, httpx.Options{Logger: g.cfg.Logger})
	srv.TLSConfig = tc.Clone()
	srv.BaseContext = func(net.Listener) context.Context { return g.ctx }
	srv.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateClosed || s == http.StateHijacked {
			once.Do(func() { close(done) })
		}
	}
	_ = srv.ServeTLS(&oneConn{c: &readerConn{Conn: conn, r: io.MultiReader(bytes.NewReader(pre), conn)}}, "", "")
	select {
	case <-done:
	case <-g.ctx.Done():
		_ = srv.Close()
		<-done
	}
}
