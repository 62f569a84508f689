// Package front is a cluster's front (docs/cluster.md): a stateless HTTP
// server that checks the caller's token, places each new run and session
// on a node (cluster.View: warm capacity first), sends every call on a
// session to the node its id names, and passes answers through as they
// stream. Nodes check the token again. Any number of fronts serve the
// same cluster: they share nothing but the nodes' leases.
package front

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"github.com/airlockhq/airlock/internal/cluster"
	"github.com/airlockhq/airlock/internal/config"
	"github.com/airlockhq/airlock/internal/console"
	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/httpx"
	"github.com/airlockhq/airlock/internal/netlimit"
	"github.com/airlockhq/airlock/internal/tokens"
)

// MaxBody bounds a request body the front reads to place it (a run's
// stdin included).
const MaxBody = 64 << 20

// downFor keeps a node the front could not reach out of its placements.
const downFor = 10 * time.Second

// Front serves the API of a cluster.
type Front struct {
	view *cluster.View
	// toks are the tokens calls may present (a reload's: SetTokens).
	toks   atomic.Pointer[tokens.Set]
	logger *slog.Logger
	// console is the web console's logins (docs/console.md): a session
	// stands for its token, which the front sends on to the nodes.
	console *console.Console
	hc      *http.Client
	// uploads holds a token for each upload passing through (see
	// e2b_files.go).
	uploads chan struct{}
}

// New returns a front placing on view's nodes and accepting toks.
func New(view *cluster.View, toks *tokens.Set, logger *slog.Logger) *Front {
	tr := &http.Transport{
		Proxy:               nil,
		DialContext:         (&net.Dialer{Timeout: 2 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConnsPerHost: 64,
		// Under a node's own idle timeout (30 s), so that the front
		// drops a kept connection before the node closes it: a call
		// sent on one the node is closing fails, and a POST is not
		// sent again.
		IdleConnTimeout: 20 * time.Second,
		// A file's bytes go to a node only once it has accepted the
		// call (see e2b_files.go).
		ExpectContinueTimeout: expectWait,
	}
	// A node's redirect is the caller's to follow: passed on as it is.
	noRedirects := func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	f := &Front{view: view, logger: logger, hc: &http.Client{Transport: tr, CheckRedirect: noRedirects},
		uploads: make(chan struct{}, maxUploads)}
	f.toks.Store(toks)
	f.console = console.New(f.tokens)
	return f
}

// tokens are the tokens calls may present now.
func (f *Front) tokens() *tokens.Set { return f.toks.Load() }

// SetTokens replaces the tokens calls may present, from the next call on
// (a reload's); console sessions of a token no longer there end.
func (f *Front) SetTokens(toks *tokens.Set) { f.toks.Store(toks) }

// Handler is the front's HTTP API.
func (f *Front) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/runs", f.placed)
	mux.HandleFunc("POST /v1/sessions", f.placed)
	mux.HandleFunc("GET /v1/audit", f.audit)
	mux.HandleFunc("GET /v1/sessions", f.mergedList)
	mux.HandleFunc("GET /v1/pools", f.mergedList)
	mux.HandleFunc("GET /v1/tools", f.mergedList)
	mux.HandleFunc("GET /v1/ps", f.mergedPS)
	mux.HandleFunc("GET /metrics", f.metrics)
	mux.HandleFunc("DELETE /v1/runs/{id}", f.killRun)
	mux.HandleFunc("/mcp", f.mcp)
	mux.HandleFunc("/v1/sessions/{id}", f.routed)
	mux.HandleFunc("/v1/sessions/{id}/{rest...}", f.routed)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeErr(w, errdefs.Errorf(errdefs.ErrNotFound, "%s %s is not served by a cluster's front (docs/cluster.md lists what is)", r.Method, r.URL.Path))
	})
	// Health alone needs no token: a probe of the pod's.
	outer := http.NewServeMux()
	outer.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		if len(f.view.Nodes()) == 0 {
			writeErr(w, errNoNodeLive)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	outer.Handle("/", f.console.Handler(f.auth(mux)))
	return outer
}

type tokenKey struct{}

// auth admits a request with a valid bearer token only, or a web
// console session of one: the session's request goes on as its token's,
// without the cookie (a node has no use for it) or the page's origin.
func (f *Front) auth(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t := f.tokens().Bearer(r)
		if t == nil && r.Header.Get("Authorization") == "" {
			if tok, bearer, ok := f.console.Session(r); ok && tok != nil {
				// The page's origin is the front's, not a node's (whose
				// guard refuses a call from another origin): the session's
				// own check, the console's header on every change, has
				// stood for it here.
				r = r.Clone(r.Context())
				r.Header.Del("Cookie")
				r.Header.Del("Origin")
				r.Header.Del("Referer")
				r.Header.Set("Authorization", "Bearer "+bearer)
				t = tok
			}
		}
		if t == nil {
			w.Header().Set("WWW-Authenticate", tokens.Challenge(r))
			writeErr(w, errdefs.Errorf(errUnauthenticated, "%s", tokens.ChallengeMessage(r)))
			return
		}
		netlimit.Vouch(r.Context())
		h.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), tokenKey{}, t)))
	})
}

// errNoNodeLive: the cluster has no live node at all.
var errNoNodeLive = errdefs.New(errdefs.ErrUnavailable, "no node is live")

// placed serves a new run or session: the body names the tool, the
// tool's best node gets it (sendPlaced).
func (f *Front) placed(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, MaxBody+1))
	if err != nil {
		writeErr(w, errdefs.Errorf(errdefs.ErrInvalid, "reading the request: %s", err))
		return
	}
	if len(body) > MaxBody {
		writeErr(w, errdefs.Errorf(errdefs.ErrLimit, "the request is over %d MiB", MaxBody>>20))
		return
	}
	var req struct {
		Tool string `json:"tool"`
	}
	if err := json.Unmarshal(body, &req); err != nil || req.Tool == "" {
		// The node explains what is wrong with the body; any node will
		// do.
		req.Tool = ""
	}
	if t := r.Context().Value(tokenKey{}).(*config.Token); req.Tool != "" && !t.AllowsTool(req.Tool) {
		writeErr(w, errdefs.Errorf(errdefs.ErrDenied, "token:%s may not use tool %q", t.Name, req.Tool))
		return
	}
	if isUpgrade(r) {
		// A terminal: the connection is the node's from the first node
		// placed on, reached or not (the proxy marks it down).
		n, err := f.placeNode(req.Tool, nil)
		if err != nil {
			writeErr(w, f.toolNotPlaced(req.Tool, err))
			return
		}
		r.Body, r.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
		f.upgrade(w, r, n)
		return
	}
	resp, n, err := f.sendPlaced(r, req.Tool, body, func(n cluster.Node) string { return n.Endpoint })
	if err != nil {
		var none *noNode
		if errors.As(err, &none) {
			writeErr(w, f.toolNotPlaced(req.Tool, err))
			return
		}
		f.gone(w, r, n.Name, err)
		return
	}
	relay(w, resp, n.Name)
}

// toolNotPlaced is the native API's error for a new run or session of
// tool that no node could be given (err, a *noNode): not found when no
// node of the cluster has the tool, else unavailable.
func (f *Front) toolNotPlaced(tool string, err error) error {
	var none *noNode
	errors.As(err, &none)
	if none.tried == 0 && !f.view.Serves(tool) {
		return errdefs.Errorf(errdefs.ErrNotFound, "no node of the cluster has tool %q", tool)
	}
	msg := fmt.Sprintf("no live node serves tool %q", tool)
	if none.tried > 0 {
		msg += fmt.Sprintf(" (%d could not be reached)", none.tried)
	}
	return errdefs.Errorf(errdefs.ErrUnavailable, "%s", msg)
}

// noNode is placement's failure: no live node is left to give a new call
// to, tried of them having been passed over or not reached.
type noNode struct{ tried int }

func (e *noNode) Error() string        { return fmt.Sprintf("no live node (%d tried)", e.tried) }
func (e *noNode) Is(target error) bool { return target == errdefs.ErrUnavailable }

// sendPlaced is the front's placement loop, for a new run or session
// (the native API) and a new sandbox (the E2B API): it sends r with body
// to the best node for tool (placeNode), at the node's endpoint(n) (a
// node whose endpoint is "" is passed over). A node that cannot be
// reached is marked down and the next is tried: nothing reached it, so
// nothing ran. Once a node has the request, its answer is the answer,
// whatever it is: a call that may have started is never sent twice.
// The error is a *noNode when no node is left, else the send's failure
// on the node returned.
func (f *Front) sendPlaced(r *http.Request, tool string, body []byte, endpoint func(cluster.Node) string) (*http.Response, cluster.Node, error) {
	tried := map[string]bool{}
	for {
		n, err := f.placeNode(tool, tried)
		if err != nil {
			return nil, cluster.Node{}, err
		}
		tried[n.Name] = true
		base := endpoint(n)
		if base == "" {
			continue
		}
		resp, err := f.forwardTo(r, base, body)
		if err != nil && notSent(err) && r.Context().Err() == nil {
			f.logger.Warn("front: a node could not be reached; placing elsewhere", "node", n.Name, "err", err)
			f.view.MarkDown(n.Name, downFor)
			continue
		}
		return resp, n, err
	}
}

// placeNode is View.Place, or any live node when the tool is not known
// (the node answers the error), skipping those in skip; a *noNode when
// there is none.
func (f *Front) placeNode(tool string, skip map[string]bool) (cluster.Node, error) {
	if tool != "" {
		if n, ok := f.view.Place(tool, skip); ok {
			return n, nil
		}
		return cluster.Node{}, &noNode{tried: len(skip)}
	}
	for _, n := range f.view.Nodes() {
		if !skip[n.Name] {
			return n, nil
		}
	}
	return cluster.Node{}, &noNode{tried: len(skip)}
}

// routed serves a call on a session: to its node, named by its id.
func (f *Front) routed(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	name := cluster.NodeOfID(id)
	if name == "" {
		writeErr(w, errdefs.Errorf(errdefs.ErrNotFound, "no session %q: a cluster's session ids name their node", id))
		return
	}
	n, live := f.view.Get(name)
	if n.Name == "" || !live {
		writeErr(w, errdefs.Errorf(errNodeGone, "session %s ended: its node %s is gone", id, name))
		return
	}
	if isUpgrade(r) {
		f.upgrade(w, r, n)
		return
	}
	resp, err := f.forward(r, n, nil)
	if err != nil {
		// A node killed outright can fail a call sent on a connection
		// kept from before, past its dial: whether it is gone is then
		// asked of a new connection.
		if notSent(err) || (r.Context().Err() == nil && unreachable(n.Endpoint)) {
			// Nothing answers there: the node died before its lease
			// says so, and its sessions with it.
			f.view.MarkDown(name, downFor)
			writeErr(w, errdefs.Errorf(errNodeGone, "session %s ended: its node %s is gone", id, name))
			return
		}
		f.gone(w, r, name, err)
		return
	}
	relay(w, resp, name)
}

// unreachable tells an endpoint that no longer takes connections.
func unreachable(endpoint string) bool {
	u, err := url.Parse(endpoint)
	if err != nil {
		return false
	}
	port := u.Port()
	if port == "" {
		port = "80"
		if u.Scheme == "https" {
			port = "443"
		}
	}
	c, err := net.DialTimeout("tcp", net.JoinHostPort(u.Hostname(), port), 2*time.Second)
	if err != nil {
		return true
	}
	c.Close()
	return false
}

// gone answers a call its node could not finish.
func (f *Front) gone(w http.ResponseWriter, r *http.Request, node string, err error) {
	if r.Context().Err() != nil {
		return // the caller went away
	}
	f.logger.Warn("front: a node failed a call", "node", node, "err", err)
	writeErr(w, errdefs.Errorf(errNodeFailed, "node %s failed the call: %v", node, errors.Unwrap(err)))
}

// notSent tells a failure to reach the node (dial) from one after the
// request may have reached it.
func notSent(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// forward sends r to node n's API (with body, or r's own when nil) and
// returns the node's answer.
func (f *Front) forward(r *http.Request, n cluster.Node, body []byte) (*http.Response, error) {
	return f.forwardTo(r, n.Endpoint, body)
}

// hopHeaders are a connection's own headers, never passed on.
var hopHeaders = map[string]bool{
	"Connection": true, "Keep-Alive": true, "Proxy-Authenticate": true, "Proxy-Authorization": true,
	"Te": true, "Trailer": true, "Transfer-Encoding": true, "Upgrade": true, "Host": true,
}

// forwardTo sends r to base (a node's URL) with body, or r's own when
// nil, and its end-to-end headers.
func (f *Front) forwardTo(r *http.Request, base string, body []byte) (*http.Response, error) {
	var rd io.Reader = r.Body
	length := r.ContentLength
	if body != nil {
		rd, length = bytes.NewReader(body), int64(len(body))
	}
	out, err := f.outgoing(r, base, rd, length)
	if err != nil {
		return nil, err
	}
	return f.hc.Do(out)
}

// outgoing is r to send to base with the body rd of length (-1: not
// known), with r's end-to-end headers.
func (f *Front) outgoing(r *http.Request, base string, rd io.Reader, length int64) (*http.Request, error) {
	out, err := http.NewRequestWithContext(r.Context(), r.Method, strings.TrimSuffix(base, "/")+r.URL.RequestURI(), rd)
	if err != nil {
		return nil, err
	}
	out.ContentLength = length
	for k, vs := range r.Header {
		if !hopHeaders[k] {
			out.Header[k] = vs
		}
	}
	out.Header.Set("X-Forwarded-For", clientIP(r))
	return out, nil
}

func clientIP(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

// isUpgrade tells a request that asks to switch protocols (a terminal:
// docs/api.md#terminals).
func isUpgrade(r *http.Request) bool {
	return r.Header.Get("Upgrade") != "" && strings.Contains(strings.ToLower(r.Header.Get("Connection")), "upgrade")
}

// upgrade passes a request that switches protocols to node n and, once
// it has switched, joins the two connections both ways.
func (f *Front) upgrade(w http.ResponseWriter, r *http.Request, n cluster.Node) {
	target, err := url.Parse(n.Endpoint)
	if err != nil {
		writeErr(w, errdefs.Errorf(errNodeFailed, "node %s: a bad endpoint", n.Name))
		return
	}
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			pr.SetXForwarded()
		},
		Transport: f.hc.Transport,
		ModifyResponse: func(resp *http.Response) error {
			resp.Header.Set(NodeHeader, n.Name)
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if notSent(err) {
				f.view.MarkDown(n.Name, downFor)
			}
			f.gone(w, r, n.Name, err)
		},
		ErrorLog: slog.NewLogLogger(f.logger.Handler(), slog.LevelDebug),
	}
	rp.ServeHTTP(stallBounded{w}, r)
}

// stallBounded bounds each write to a switched connection (a terminal)
// by StallTimeout, as relay bounds a streamed answer's: a caller that
// stops reading its terminal, connection open, ends the join (the proxy
// closes both connections when a copy fails) rather than holding it and
// the node's connection for as long as it likes.
type stallBounded struct{ http.ResponseWriter }

func (s stallBounded) Unwrap() http.ResponseWriter { return s.ResponseWriter }

func (s stallBounded) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	c, brw, err := http.NewResponseController(s.ResponseWriter).Hijack()
	if err != nil {
		return nil, nil, err
	}
	return httpx.StallConn(c, StallTimeout), brw, nil
}

// NodeHeader names, in each answer, the node that gave it.
const NodeHeader = "X-Airlock-Node"

// MaxConns bounds the connections each of the front's listeners serves
// at once (the rest wait in the backlog), as a daemon's TCP listener's.
const MaxConns = 512

// Listener bounds ln as a daemon's TCP listener is: MaxConns at once, and
// a share of them per remote address under pressure (netlimit.Network).
// The front faces the network.
func Listener(ln net.Listener) net.Listener { return netlimit.Network(ln, MaxConns) }

// Server is the front's HTTP server of h (Handler or E2BHandler), with
// every server's bounds (internal/httpx): a header, a body's each
// next bytes and an idle connection each bounded in time.
func (f *Front) Server(h http.Handler) *http.Server {
	return httpx.New(h, httpx.Options{IdleTimeout: 60 * time.Second, Logger: f.logger})
}

// StallTimeout bounds one write of an answer relayed from a node: a
// caller that takes nothing for this long has stopped reading, and the
// relay ends, closing the node's answer too (the node then ends the
// command, as for a caller of its own). A variable for tests.
var StallTimeout = 30 * time.Second

// relay passes a node's answer on as it comes: streamed answers
// (NDJSON events) are flushed piece by piece, each write bounded by
// StallTimeout.
func relay(w http.ResponseWriter, resp *http.Response, node string) {
	defer resp.Body.Close()
	for k, vs := range resp.Header {
		if !hopHeaders[k] && k != "Content-Length" {
			w.Header()[k] = vs
		}
	}
	w.Header().Set(NodeHeader, node)
	// The caller's body may still be on its way to the node (a stream's
	// last chunk) when the node's answer starts: HTTP/1 would close it
	// at the answer's first flush, cutting the node's connection and the
	// answer with it.
	_ = http.NewResponseController(w).EnableFullDuplex()
	w.WriteHeader(resp.StatusCode)
	out := httpx.NewStream(w, StallTimeout)
	buf := make([]byte, 32<<10)
	for {
		n, err := resp.Body.Read(buf)
		if n > 0 && out.Send(buf[:n]) != nil {
			return
		}
		if err != nil {
			// Done: the connection may carry the caller's next request.
			out.End()
			return
		}
	}
}
