package e2bserver

import (
	"context"
	"crypto/subtle"
	"errors"
	"net"
	"net/http"
	"net/http/httputil"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/internal/edge"
	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/netlimit"
	"github.com/airlockhq/airlock/internal/node"
	"github.com/airlockhq/airlock/sandbox"
)

// A sandbox's ports. E2B's getHost(port) names a server a sandbox runs
// (a preview, a notebook, an app under test) P-ID.DOMAIN; with
// server.e2b_domain set, the listener serves those hosts: envd's port
// (49983) and the code interpreter's (49999) as the calls they are, every
// other port proxied into the sandbox, to what listens on its own
// loopback at that port (sandbox.DialPort), and nowhere else.
//
// Every request to a port carries the sandbox's traffic access token
// (E2B's e2b-traffic-access-token header; E2B asks for it only of a
// sandbox created with allowPublicTraffic false, airlock of every one),
// which is taken off before the request goes in: no credential of
// airlock's enters a sandbox. Each request is recorded (session.port),
// and a sandbox holds at most maxPortRequests at once.

// Ports the SDKs reach the sandbox's own services on.
const (
	envdPort        = 49983
	interpreterPort = 49999
)

// maxPortRequests bounds one sandbox's requests to its ports at once (a
// WebSocket holds one for its life).
const maxPortRequests = 64

// trafficHeader is E2B's header for the traffic access token.
const trafficHeader = "E2b-Traffic-Access-Token"

// errNoTraffic: a request to a sandbox's port without its traffic token.
var errNoTraffic = errdefs.New(errdefs.ErrDenied, "a sandbox's ports need its traffic access token (the e2b-traffic-access-token header; the SDK's trafficAccessToken)")

// errPortClosed: nothing listens on the port; worded as E2B's proxy
// ("port is not open"), which the SDKs recognize.
var errPortClosed = errdefs.New(errdefs.ErrUnavailable, "the sandbox is running but port is not open")

// portHost is the port and sandbox id of host (P-ID.DOMAIN[:PORT]), ok
// false when host names no sandbox port of domain.
func portHost(host, domain string) (port int, id string, ok bool) {
	if domain == "" {
		return 0, "", false
	}
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	label, ok := strings.CutSuffix(strings.ToLower(host), "."+domain)
	if !ok || strings.Contains(label, ".") {
		return 0, "", false
	}
	p, id, ok := strings.Cut(label, "-")
	if !ok || id == "" || len(p) > 5 {
		return 0, "", false
	}
	port, err := strconv.Atoi(p)
	if err != nil || port < 1 || port > 65535 || p[0] == '0' {
		return 0, "", false
	}
	return port, id, true
}

// routePorts serves requests to a sandbox's port (portHost) and passes
// every other to h.
func (d *Server) routePorts(h http.Handler) http.Handler {
	domain := d.opts.Domain
	if domain == "" {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		port, id, ok := portHost(r.Host, domain)
		if !ok {
			h.ServeHTTP(w, r)
			return
		}
		switch port {
		case envdPort, interpreterPort:
			// The SDK's own calls, which name the sandbox by host
			// when it has no E2B_SANDBOX_URL: as those that name it
			// by header, each checked by its own token.
			if r.Header.Get("E2b-Sandbox-Id") == "" {
				r.Header.Set("E2b-Sandbox-Id", id)
			}
			if r.Header.Get("E2b-Sandbox-Port") == "" {
				r.Header.Set("E2b-Sandbox-Port", strconv.Itoa(port))
			}
			h.ServeHTTP(w, r)
			return
		}
		if err := d.servePort(w, r, port, id); err != nil {
			writeAPIError(w, err)
		}
	})
}

// servePort proxies r into the sandbox id's port.
func (d *Server) servePort(w http.ResponseWriter, r *http.Request, port int, id string) error {
	d.e2b.mu.Lock()
	sb := d.e2b.m[id]
	d.e2b.mu.Unlock()
	if sb == nil || sb.s.View().State == api.SessionEnded {
		return errdefs.Errorf(errEnded, "sandbox %q was not found", node.Shorten(id))
	}
	if subtle.ConstantTimeCompare([]byte(r.Header.Get(trafficHeader)), []byte(sb.traffic)) != 1 {
		d.Counts().Unauthorized.Add(1)
		return errNoTraffic
	}
	netlimit.Vouch(r.Context())
	// A paused sandbox's kernel would take the connection and hold it
	// unanswered: it is resumed first, or the request refused.
	if err := d.awake(r, sb); err != nil {
		return err
	}
	if sb.portRequests.Add(1) > maxPortRequests {
		sb.portRequests.Add(-1)
		return errdefs.Errorf(node.ErrTooMany, "sandbox %q has %d requests to its ports in flight; try again later", node.Shorten(id), maxPortRequests)
	}
	defer sb.portRequests.Add(-1)

	// The request ends with the sandbox: a WebSocket or a long poll does
	// not outlive it.
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	go func() {
		select {
		case <-sb.s.Ending():
			cancel()
		case <-ctx.Done():
		}
	}()

	began := time.Now()
	rec := &portWriter{ResponseWriter: w}
	// Why the dial failed, for the answer: set by the transport's dial,
	// which may end after the request did (hence atomic).
	var dialErr atomic.Pointer[error]
	p := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme, pr.Out.URL.Host = "http", "127.0.0.1:"+strconv.Itoa(port)
			// The host as the client named it, as E2B's proxy keeps it.
			pr.Out.Host = pr.In.Host
			pr.SetXForwarded()
			// airlock's credentials stay out of the sandbox.
			for _, h := range []string{trafficHeader, "X-Access-Token", "X-Api-Key", "E2b-Sandbox-Id", "E2b-Sandbox-Port"} {
				pr.Out.Header.Del(h)
			}
		},
		Transport: &http.Transport{
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				c, err := dialPort(ctx, sb.s.Sandbox(), port)
				if err != nil {
					dialErr.Store(&err)
				}
				return c, err
			},
			DisableKeepAlives:      true,
			DisableCompression:     true,
			MaxResponseHeaderBytes: 64 << 10,
			ResponseHeaderTimeout:  5 * time.Minute,
		},
		FlushInterval: -1,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if de := dialErr.Load(); de != nil {
				err = *de
			}
			switch {
			case errors.Is(err, unix.ECONNREFUSED):
				writeAPIError(w, errdefs.Errorf(errPortClosed, "the sandbox %q is running but port is not open (port %d)", node.Shorten(id), port))
			case errors.Is(err, sandbox.ErrDead), sb.s.View().State != "active":
				writeAPIError(w, errdefs.Errorf(errEnded, "sandbox %q was not found", node.Shorten(id)))
			default:
				writeAPIError(w, errdefs.Errorf(errdefs.ErrUnavailable, "the sandbox's port %d did not answer", port))
			}
		},
	}
	p.ServeHTTP(rec, r.WithContext(ctx))
	d.RecordPort(edge.ClientOf(r), sb.s, node.Port{Port: port, Method: r.Method, Path: r.URL.Path,
		Status: rec.status(), Bytes: rec.bytes.Load(), Took: time.Since(began)})
	return nil
}

// dialPortTimeout bounds a connect to a sandbox's port: inside one
// namespace on loopback, one that does not answer at once is a listener
// whose backlog is full.
const dialPortTimeout = 5 * time.Second

// dialPort connects to port on the sandbox's own loopback (127.0.0.1
// inside its network namespace), as a process of the sandbox would: what
// its servers listen on there, or on all addresses, and nothing else —
// not the host's ports, another sandbox's, or the egress gateway's (on
// other loopback addresses).
func dialPort(ctx context.Context, sb *sandbox.Sandbox, port int) (net.Conn, error) {
	var c net.Conn
	err := sb.InNetNS(func() error {
		d := net.Dialer{Timeout: dialPortTimeout}
		var err error
		c, err = d.DialContext(ctx, "tcp4", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		return err
	})
	return c, err
}

// portWriter is the proxied answer's writer, counting what it writes.
type portWriter struct {
	http.ResponseWriter
	code  atomic.Int32
	bytes atomic.Int64
}

func (w *portWriter) WriteHeader(code int) {
	w.code.CompareAndSwap(0, int32(code))
	w.ResponseWriter.WriteHeader(code)
}

func (w *portWriter) Write(b []byte) (int, error) {
	w.code.CompareAndSwap(0, http.StatusOK)
	n, err := w.ResponseWriter.Write(b)
	w.bytes.Add(int64(n))
	return n, err
}

// Unwrap lets http.ResponseController reach the connection (a flush, a
// WebSocket's upgrade).
func (w *portWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (w *portWriter) status() int { return int(w.code.Load()) }
