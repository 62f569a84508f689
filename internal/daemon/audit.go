package daemon

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/internal/audit"
	"github.com/airlockhq/airlock/internal/errdefs"
)

// peerKey holds a unix socket connection's peer.
type peerKey struct{}

// connContext notes who is at the other end of a unix socket connection,
// from the kernel's credentials of the connecting process.
func connContext(ctx context.Context, c net.Conn) context.Context {
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

// clientOf is the identity the audit log records for a request.
func clientOf(r *http.Request) string {
	c := callerOf(r.Context())
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

// audited records every API request with its caller and answer, except
// successful health and metrics probes and the continuation pages of
// audit reads (a follower's polls would otherwise record themselves
// without end). Refusals are always recorded.
func (d *Daemon) audited(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w}
		var refused string
		ctx := context.WithValue(r.Context(), seenKey{}, &caller{})
		r = r.WithContext(context.WithValue(ctx, refusedKey{}, &refused))
		h.ServeHTTP(sw, r)
		e := audit.Event{Kind: audit.KindAPI, Time: start, Client: clientOf(r), Decision: audit.Allow}
		if refused != "" || sw.status == http.StatusUnauthorized || sw.status == http.StatusForbidden || sw.status == http.StatusMisdirectedRequest ||
			sw.status == http.StatusTooManyRequests && sw.Header().Get("Connection") == "close" {
			// Refusals are summed per client over a window (see
			// flood.go): the first is recorded now, the rest as one
			// count when the window ends, so a flood of them cannot
			// flood the log.
			key := clientKey(r)
			if !d.refusals.note(key, sw.status, r.URL.Path) {
				return
			}
			d.opts.Logger.Warn("refused API request", "client", key, "status", sw.status, "method", r.Method, "path", shorten(r.URL.Path))
			e.Decision = audit.Deny
		} else if r.Method == http.MethodGet && (r.URL.Path == "/healthz" || r.URL.Path == "/metrics" ||
			(r.URL.Path == "/v1/audit" && r.URL.Query().Has("after"))) {
			return
		}
		detail := map[string]any{
			"method": r.Method, "path": shorten(r.URL.Path), "status": sw.status,
			"duration_ms": time.Since(start).Milliseconds(),
		}
		if refused != "" {
			detail["reason"] = refused
		}
		e.Detail = audit.Detail(detail)
		d.Audit().Record(e)
	})
}

// refusedKey holds a *string in which a handler that refuses a request
// with a status the audit wrapper would not take for a refusal (the 404
// an MCP session id gets from a caller other than its opener) says why.
type refusedKey struct{}

// markRefused records, for the audit wrapper, that r was refused and why.
func markRefused(r *http.Request, reason string) {
	if p, ok := r.Context().Value(refusedKey{}).(*string); ok {
		*p = reason
	}
}

// Audit query parameters.
var auditParams = []string{"after", "since", "until", "kind", "tool", "sandbox", "session", "run", "client", "decision", "limit", "tail", "wait"}

// maxWait bounds a long poll of GET /v1/audit.
const maxWait = time.Minute

// ReadAuditFile answers an audit query (GET /v1/audit's parameters) from
// the log file at path, as the daemon would, without one: for reading
// the log while no daemon runs. A wait is not taken.
func ReadAuditFile(ctx context.Context, path string, params url.Values) ([]api.AuditEvent, error) {
	q, wait, err := parseAuditQuery(params, time.Now())
	if err != nil {
		return nil, err
	}
	if wait > 0 {
		return nil, errors.New("waiting for new events needs the daemon")
	}
	r, err := audit.OpenReader(path)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	return r.Query(ctx, q)
}

// getAudit answers GET /v1/audit: the events the query selects, oldest
// first, with the cursor for the next page. With wait, it holds the
// request until an event newer than after exists (following the log).
func (d *Daemon) getAudit(w http.ResponseWriter, r *http.Request) {
	q, wait, err := parseAuditQuery(r.URL.Query(), time.Now())
	if err != nil {
		writeErr(w, errdefs.Errorf(errdefs.ErrInvalid, "%w", err))
		return
	}
	c := callerOf(r.Context())
	if c == nil {
		// Not the whole log (auditScope's nil scope) for no caller.
		writeErr(w, errNoCaller)
		return
	}
	q.Scope = d.auditScope(c)
	ctx := r.Context()
	// What is queued is written first: a run answered before this query
	// (its outcome queued, see queueFinish) is in what it reads.
	_ = d.Audit().Append(ctx)
	deadline := time.Now().Add(wait)
	for {
		// The newest commit is read before the query, which sees it and
		// everything before it: an event committed during the query is
		// then still past it. (Read after, it was skipped: a follower
		// waited for a commit past an event it had never been sent.)
		seen := d.Audit().Last()
		evs, err := d.Audit().Query(ctx, q)
		if err != nil {
			if ctx.Err() == nil {
				d.opts.Logger.Error("audit query failed", "err", err)
				writeErr(w, errors.New("the audit log could not be read; see the daemon's log"))
			}
			return
		}
		left := time.Until(deadline)
		if len(evs) > 0 || wait == 0 || left <= 0 || q.Tail {
			next := q.After
			if len(evs) > 0 {
				next = evs[len(evs)-1].ID
			} else if q.Tail {
				next = seen
			}
			writeJSON(w, http.StatusOK, api.AuditPage{Events: evs, Next: next})
			return
		}
		// Nothing yet: wait for any commit past the newest event seen,
		// then ask again (the new event may not match the filters).
		after := max(q.After, seen)
		wctx, cancel := context.WithTimeout(ctx, left)
		stop := context.AfterFunc(d.Quitting(), cancel)
		err = d.Audit().Wait(wctx, after)
		stop()
		cancel()
		if d.Quitting().Err() != nil {
			// Shutting down: answer what there is, now.
			writeJSON(w, http.StatusOK, api.AuditPage{Events: []api.AuditEvent{}, Next: q.After})
			return
		}
		if err != nil && !errors.Is(err, context.DeadlineExceeded) {
			if errors.Is(err, audit.ErrClosed) {
				writeErr(w, errShutdown)
			}
			return
		}
	}
}

// auditScope is what c may read of the log; nil for all of it.
//
// A token reads the events it caused itself (its runs, sessions, MCP
// calls, requests and refusals) and no other caller's: one tenant's
// command lines, paths and egress are its own, and an argv may carry a
// key. An auditor token reads too every event of the tools it may use,
// whoever caused it. The rest of the log (the daemon's own events,
// other callers' requests) is the host's, for the local socket.
func (d *Daemon) auditScope(c *caller) *audit.Scope {
	if c.Token == nil {
		return nil
	}
	sc := &audit.Scope{Client: c.Name}
	if c.Token.Auditor {
		for _, name := range d.opts.Config.Order {
			if c.Allows(name) {
				sc.Tools = append(sc.Tools, name)
			}
		}
	}
	return sc
}

// parseAuditQuery reads GET /v1/audit's parameters. Times are RFC 3339
// or a duration before now ("15m").
func parseAuditQuery(v map[string][]string, now time.Time) (audit.Query, time.Duration, error) {
	var q audit.Query
	var wait time.Duration
	for k, vs := range v {
		known := false
		for _, p := range auditParams {
			known = known || p == k
		}
		if !known {
			return q, 0, fmt.Errorf("unknown parameter %q (known: %s)", shorten(k), strings.Join(auditParams, ", "))
		}
		if len(vs) != 1 {
			return q, 0, fmt.Errorf("parameter %q is given %d times", k, len(vs))
		}
		s := vs[0]
		if len(s) > 256 {
			return q, 0, fmt.Errorf("parameter %q is over 256 bytes", k)
		}
		var err error
		switch k {
		case "after":
			q.After, err = strconv.ParseInt(s, 10, 64)
			if err != nil || q.After < 0 {
				err = fmt.Errorf(`"after" must be an event id (a number from 0)`)
			}
		case "limit":
			q.Limit, err = strconv.Atoi(s)
			if err != nil || q.Limit < 1 || q.Limit > audit.MaxLimit {
				err = fmt.Errorf(`"limit" must be a number from 1 to %d`, audit.MaxLimit)
			}
		case "since":
			q.Since, err = parseWhen(s, now, k)
		case "until":
			q.Until, err = parseWhen(s, now, k)
		case "tail":
			q.Tail, err = strconv.ParseBool(s)
			if err != nil {
				err = fmt.Errorf(`"tail" must be true or false`)
			}
		case "wait":
			wait, err = time.ParseDuration(s)
			if err != nil || wait < 0 || wait > maxWait {
				err = fmt.Errorf(`"wait" must be a duration from 0 to %s, like "30s"`, maxWait)
			}
		case "kind":
			q.Kind = s
			if !audit.KnownKind(s) {
				err = fmt.Errorf(`no events are of kind %q (kinds: %s, or the part before a dot)`, shorten(s), strings.Join(audit.Kinds, ", "))
			}
		case "tool":
			q.Tool = s
		case "sandbox":
			q.Sandbox = s
		case "session":
			q.Session = s
		case "run":
			q.Run = s
		case "client":
			q.Client = s
		case "decision":
			q.Decision = s
		}
		if err != nil {
			return q, 0, err
		}
	}
	if q.Tail && wait > 0 {
		return q, 0, errors.New(`"tail" and "wait" do not go together; follow with "after"`)
	}
	return q, wait, nil
}

// parseWhen reads a time: RFC 3339, or a duration before now.
func parseWhen(s string, now time.Time, name string) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	if d, err := time.ParseDuration(s); err == nil && d >= 0 {
		return now.Add(-d), nil
	}
	return time.Time{}, fmt.Errorf("%q must be an RFC 3339 time (2026-01-02T15:04:05Z) or a duration before now (15m)", name)
}

// getHealth answers ok, or 503 while the audit log cannot be written
// (runs are refused then).
func (d *Daemon) getHealth(w http.ResponseWriter, _ *http.Request) {
	if err := d.Audit().Err(); err != nil {
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "degraded", "audit": "unwritable; see the daemon's log"})
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}
