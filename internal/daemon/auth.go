package daemon

import (
	"context"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"

	"github.com/airlockhq/airlock/internal/netlimit"
	"github.com/airlockhq/airlock/internal/node"

	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/tokens"
)

// caller is who made a request (node.Caller): the local socket (trusted
// by its file permissions) or a bearer token on TCP, scoped to some
// tools.
type caller = node.Caller

// local is every request on the unix socket, and the daemon's own
// callers on the host (the stdio MCP server). It is fully trusted: every
// tool, every session, the whole audit log. A listener gets it only by
// saying so, with withCaller(local, ...).
var local = node.Local

type callerKey struct{}

// callerOf is who made the request ctx belongs to, or nil when no
// listener wrapper said: there is no default. A missing caller used to
// be taken for local, so a listener wired without authentication would
// have handed root-socket rights (every tool, every session, the whole
// audit log) to whoever could reach it. requireCaller refuses such a
// request before any handler runs, and d.hold refuses a run or session
// without a caller, wherever it comes from.
func callerOf(ctx context.Context) *caller {
	c, _ := ctx.Value(callerKey{}).(*caller)
	return c
}

// requireCaller refuses, with 401, a request that no listener wrapper
// (withCaller, requireToken) gave a caller: it fails closed, where the
// API used to take such a request for the local socket's.
func (d *Daemon) requireCaller(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if callerOf(r.Context()) == nil {
			d.Counts().Unauthorized.Add(1)
			// A wiring bug, not a caller's: said once, not for every
			// request a client can send.
			d.noCallerOnce.Do(func() {
				d.opts.Logger.Error("a request reached the API with no authenticated caller: a listener is wired without authentication; its requests are refused", "path", shortenPath(r.URL.Path))
			})
			writeErr(w, errNoCaller)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// withCaller serves h with every request made by c: how a listener says
// whom it trusts its requests to be from (the unix socket: local; the
// TCP listener: a token's caller, after requireToken checked it).
func withCaller(c *caller, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The audit wrapper outside learns who the caller turned out to be.
		if seen, ok := r.Context().Value(seenKey{}).(*caller); ok {
			*seen = *c
		}
		h.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), callerKey{}, c)))
	})
}

// seenKey holds a *caller that withCaller fills in for the wrappers
// outside it.
type seenKey struct{}

// requireToken guards the TCP listener: no valid bearer token, no
// answer but 401.
func (d *Daemon) requireToken(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t := d.tokens.Bearer(r)
		if t == nil {
			d.Counts().Unauthorized.Add(1)
			if d.slowFailures(w, r) {
				return
			}
			w.Header().Set("WWW-Authenticate", tokens.Challenge(r))
			writeErr(w, errdefs.New(errUnauthenticated, tokens.ChallengeMessage(r)))
			return
		}
		netlimit.Vouch(r.Context())
		withCaller(node.TokenCaller(t), h).ServeHTTP(w, r)
	})
}

// forbidTool answers that the caller may not use tool, when it may not;
// true when it answered.
func (d *Daemon) forbidTool(w http.ResponseWriter, r *http.Request, tool string) bool {
	c := callerOf(r.Context())
	if c == nil {
		writeErr(w, errNoCaller)
		return true
	}
	if c.Allows(tool) {
		return false
	}
	d.Counts().Forbidden.Add(1)
	writeErr(w, errdefs.Errorf(errdefs.ErrDenied, "%s may not use tool %q", c.Name, tool))
	return true
}

// checkHost guards a loopback TCP listener against DNS rebinding: a web
// page could point a name it controls at 127.0.0.1 and have a browser
// send requests here, but its Host (and Origin) header then names that
// page's host, not this listener. Listeners on other addresses are meant
// to sit behind a reverse proxy, which sets the host it serves.
func checkHost(addr netip.AddrPort, h http.Handler) http.Handler {
	if !addr.Addr().IsLoopback() {
		return h
	}
	port := strconv.Itoa(int(addr.Port()))
	allowed := map[string]bool{
		"localhost:" + port: true,
		"127.0.0.1:" + port: true,
		"[::1]:" + port:     true,
		addr.String():       true,
		net.JoinHostPort(addr.Addr().String(), port): true,
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !allowed[strings.ToLower(r.Host)] {
			writeErr(w, errdefs.New(errMisdirected, "this listener answers only to its own loopback address (Host header)"))
			return
		}
		if o := r.Header.Get("Origin"); o != "" {
			u, err := url.Parse(o)
			if err != nil || !allowed[strings.ToLower(u.Host)] {
				writeErr(w, errdefs.New(errdefs.ErrDenied, "cross-origin requests are refused"))
				return
			}
		}
		h.ServeHTTP(w, r)
	})
}
