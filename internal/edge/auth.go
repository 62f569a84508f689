package edge

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

// Local is every request on the unix socket, and the daemon's own
// callers on the host (the stdio MCP server). It is fully trusted: every
// tool, every session, the whole audit log. A listener gets it only by
// saying so, with WithCaller(Local, ...).
var Local = node.Local

type callerKey struct{}

// CallerOf is who made the request ctx belongs to, or nil when no
// listener wrapper said: there is no default. A missing caller used to
// be taken for Local, so a listener wired without authentication would
// have handed root-socket rights (every tool, every session, the whole
// audit log) to whoever could reach it. RequireCaller refuses such a
// request before any handler runs, and the node refuses a run or session
// without a caller, wherever it comes from.
func CallerOf(ctx context.Context) *caller {
	c, _ := ctx.Value(callerKey{}).(*caller)
	return c
}

// RequireCaller refuses, with 401, a request that no listener wrapper
// (WithCaller, RequireToken) gave a caller: it fails closed, where the
// API used to take such a request for the local socket's.
func (g *Guard) RequireCaller(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if CallerOf(r.Context()) == nil {
			g.node.Counts().Unauthorized.Add(1)
			// A wiring bug, not a caller's: said once, not for every
			// request a client can send.
			g.noCallerOnce.Do(func() {
				g.logger.Error("a request reached the API with no authenticated caller: a listener is wired without authentication; its requests are refused", "path", ShortenPath(r.URL.Path))
			})
			WriteErr(w, node.ErrNoCaller)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// WithCaller serves h with every request made by c: how a listener says
// whom it trusts its requests to be from (the unix socket: Local; the
// TCP listener: a token's caller, after RequireToken checked it).
func WithCaller(c *caller, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(w, As(r, c))
	})
}

// As is r made by c, for a handler that authenticated r itself (the E2B
// API's key): the audit wrapper outside learns who the caller turned
// out to be.
func As(r *http.Request, c *caller) *http.Request {
	if seen, ok := r.Context().Value(seenKey{}).(*caller); ok {
		*seen = *c
	}
	return r.WithContext(context.WithValue(r.Context(), callerKey{}, c))
}

// seenKey holds a *caller that WithCaller fills in for the wrappers
// outside it.
type seenKey struct{}

// RequireToken guards the TCP listener: no valid bearer token, no
// answer but 401.
func (g *Guard) RequireToken(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t := g.Tokens().Bearer(r)
		if t == nil && r.Header.Get("Authorization") == "" && g.console != nil {
			if c := g.console(r); c != nil {
				netlimit.Vouch(r.Context())
				WithCaller(c, h).ServeHTTP(w, r)
				return
			}
		}
		if t == nil {
			g.node.Counts().Unauthorized.Add(1)
			if g.SlowFailures(w, r) {
				return
			}
			w.Header().Set("WWW-Authenticate", tokens.Challenge(r))
			WriteErr(w, errdefs.New(ErrUnauthenticated, tokens.ChallengeMessage(r)))
			return
		}
		netlimit.Vouch(r.Context())
		WithCaller(node.TokenCaller(t), h).ServeHTTP(w, r)
	})
}

// ForbidTool answers that the caller may not use tool, when it may not;
// true when it answered.
func (g *Guard) ForbidTool(w http.ResponseWriter, r *http.Request, tool string) bool {
	if err := g.node.Authorize(CallerOf(r.Context()), tool); err != nil {
		WriteErr(w, err)
		return true
	}
	return false
}

// CheckHost guards a loopback TCP listener against DNS rebinding: a web
// page could point a name it controls at 127.0.0.1 and have a browser
// send requests here, but its Host (and Origin) header then names that
// page's host, not this listener. Listeners on other addresses are meant
// to sit behind a reverse proxy, which sets the host it serves.
func CheckHost(addr netip.AddrPort, h http.Handler) http.Handler {
	return CheckHostOr(addr, "", h)
}

// CheckHostOr is CheckHost that also takes the hosts just below domain
// (X.domain, with any port) when domain is not empty: the E2B
// listener's sandbox ports, each of which needs its sandbox's own token
// besides. A page of such a host may call that host, and nothing else
// here.
func CheckHostOr(addr netip.AddrPort, domain string, h http.Handler) http.Handler {
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
	below := func(host string) bool {
		if domain == "" {
			return false
		}
		if h, _, err := net.SplitHostPort(host); err == nil {
			host = h
		}
		sub, ok := strings.CutSuffix(host, "."+domain)
		return ok && sub != "" && !strings.Contains(sub, ".")
	}
	originOK := func(origin, host string) bool {
		u, err := url.Parse(origin)
		if err != nil {
			return false
		}
		oh := strings.ToLower(u.Host)
		return allowed[oh] || below(oh) && oh == host
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host := strings.ToLower(r.Host)
		if !allowed[host] && !below(host) {
			WriteErr(w, errdefs.New(ErrMisdirected, "this listener answers Only to its own loopback address (Host header)"))
			return
		}
		if o := r.Header.Get("Origin"); o != "" && !originOK(o, host) {
			WriteErr(w, errdefs.New(errdefs.ErrDenied, "cross-origin requests are refused"))
			return
		}
		h.ServeHTTP(w, r)
	})
}

// Healthz serves GET /healthz before h, with no token: a probe's (a
// load balancer's, Kubernetes'), on every listener. It says only whether
// the daemon can serve: 200 {"status":"ok"}, or 503
// {"status":"unavailable"} when check fails; what failed is the
// authenticated /healthz's to say.
func Healthz(check func() error, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/healthz" || r.Method != http.MethodGet && r.Method != http.MethodHead {
			h.ServeHTTP(w, r)
			return
		}
		if check() != nil {
			WriteJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "unavailable"})
			return
		}
		WriteJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
}
