package edge

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlockhq/airlock/internal/audit"
	"github.com/airlockhq/airlock/internal/node"
	"github.com/airlockhq/airlock/internal/tracing"
)

// peerKey holds a unix socket connection's peer.
type peerKey struct{}

// ConnContext notes who is at the other end of a unix socket connection,
// from the kernel's credentials of the connecting process.
func ConnContext(ctx context.Context, c net.Conn) context.Context {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return ctx
	}
	rc, err := uc.SyscallConn()
	if err != nil {
		return ctx
	}
	var cred *unix.Ucred
	_ = rc.Control(func(fd uintptr) {
		cred, err = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	})
	if err != nil || cred == nil {
		return ctx
	}
	return context.WithValue(ctx, peerKey{}, fmt.Sprintf("unix:uid=%d,pid=%d", cred.Uid, cred.Pid))
}

// ClientOf is the identity the audit log records for a request.
func ClientOf(r *http.Request) string {
	c := CallerOf(r.Context())
	if seen, ok := r.Context().Value(seenKey{}).(*caller); ok && seen.Name != "" {
		c = seen
	}
	if c != nil && c.Token != nil {
		return c.Name
	}
	if p, ok := r.Context().Value(peerKey{}).(string); ok {
		return p
	}
	if r.RemoteAddr != "" && r.RemoteAddr != "@" {
		return "tcp:" + r.RemoteAddr
	}
	return "unix"
}

// statusWriter remembers the status a handler answered with.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (s *statusWriter) WriteHeader(code int) {
	if s.status == 0 {
		s.status = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusWriter) Write(b []byte) (int, error) {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	return s.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach Flush.
func (s *statusWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// FlushError passes flushes on with their failure: a stream's writer
// (eventWriter) learns from it that its caller stopped reading. Without
// it http.ResponseController would call Flush, and a write that failed
// in the flush would pass for one that succeeded.
func (s *statusWriter) FlushError() error {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	return http.NewResponseController(s.ResponseWriter).Flush()
}

// Flush is FlushError for handlers that assert http.Flusher.
func (s *statusWriter) Flush() { _ = s.FlushError() }

// Audited records every API request with its caller and answer, except
// successful health and metrics probes, the continuation pages of audit
// reads (a follower's polls would otherwise record themselves without
// end), and the web console's reads (its page's files, and the GETs its
// session makes every second or two to draw what runs). Refusals are
// always recorded; so is anything a console session changes.
func (g *Guard) Audited(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w}
		var refused string
		ctx := context.WithValue(r.Context(), seenKey{}, &caller{})
		// A caller's trace context (W3C traceparent), on any listener
		// and any protocol: runs and sessions the call makes are traced
		// under it. Malformed, it is ignored.
		if tp := r.Header.Get("traceparent"); tp != "" {
			ctx = tracing.WithParent(ctx, tracing.ParseTraceparent(tp))
		}
		r = r.WithContext(context.WithValue(ctx, refusedKey{}, &refused))
		h.ServeHTTP(sw, r)
		e := audit.Event{Kind: audit.KindAPI, Time: start, Client: ClientOf(r), Decision: audit.Allow}
		if refused != "" || sw.status == http.StatusUnauthorized || sw.status == http.StatusForbidden || sw.status == http.StatusMisdirectedRequest ||
			sw.status == http.StatusTooManyRequests && sw.Header().Get("Connection") == "close" {
			// Refusals are summed per client over a window (see
			// flood.go): the first is recorded now, the rest as one
			// count when the window ends, so a flood of them cannot
			// flood the log.
			key := ClientKey(r)
			if !g.refusals.note(key, sw.status, r.URL.Path) {
				return
			}
			g.logger.Warn("refused API request", "client", key, "status", sw.status, "method", r.Method, "path", node.Shorten(r.URL.Path))
			e.Decision = audit.Deny
		} else if r.Method == http.MethodGet && (r.URL.Path == "/healthz" || r.URL.Path == "/metrics" ||
			(r.URL.Path == "/v1/audit" && r.URL.Query().Has("after")) || consoleRead(r)) {
			return
		}
		detail := map[string]any{
			"method": r.Method, "path": node.Shorten(r.URL.Path), "status": sw.status,
			"duration_ms": time.Since(start).Milliseconds(),
		}
		if refused != "" {
			detail["reason"] = refused
		}
		e.Detail = audit.Detail(detail)
		g.node.Audit().Record(e)
	})
}

// refusedKey holds a *string in which a handler that refuses a request
// with a status the audit wrapper would not take for a refusal (the 404
// an MCP session id gets from a caller other than its opener) says why.
type refusedKey struct{}

// MarkRefused records, for the audit wrapper, that r was refused and why.
func MarkRefused(r *http.Request, reason string) {
	if p, ok := r.Context().Value(refusedKey{}).(*string); ok {
		*p = reason
	}
}

// ConsoleCookie is the web console's session cookie (package console).
const ConsoleCookie = "airlock_console"

// consoleRead says r is a read of the web console's: its page's files,
// or a GET its session makes (a login is recorded: it is a redirect).
func consoleRead(r *http.Request) bool {
	if strings.HasPrefix(r.URL.Path, "/console/") && r.URL.Path != "/console/login" {
		return true
	}
	_, err := r.Cookie(ConsoleCookie)
	return err == nil && strings.HasPrefix(r.URL.Path, "/v1/") && r.Header.Get("Authorization") == ""
}
