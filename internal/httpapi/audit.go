package httpapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/internal/audit"
	"github.com/airlockhq/airlock/internal/edge"
	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/node"
)

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
func (d *Server) getAudit(w http.ResponseWriter, r *http.Request) {
	q, wait, err := parseAuditQuery(r.URL.Query(), time.Now())
	if err != nil {
		edge.WriteErr(w, errdefs.Errorf(errdefs.ErrInvalid, "%w", err))
		return
	}
	c := edge.CallerOf(r.Context())
	if c == nil {
		// Not the whole log (auditScope's nil scope) for no caller.
		edge.WriteErr(w, node.ErrNoCaller)
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
				edge.WriteErr(w, errors.New("the audit log could not be read; see the daemon's log"))
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
			edge.WriteJSON(w, http.StatusOK, api.AuditPage{Events: evs, Next: next})
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
			edge.WriteJSON(w, http.StatusOK, api.AuditPage{Events: []api.AuditEvent{}, Next: q.After})
			return
		}
		if err != nil && !errors.Is(err, context.DeadlineExceeded) {
			if errors.Is(err, audit.ErrClosed) {
				edge.WriteErr(w, node.ErrShutdown)
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
// other callers' requests) is the host's, for the node.Local socket.
func (d *Server) auditScope(c *node.Caller) *audit.Scope {
	if c.Token == nil {
		return nil
	}
	sc := &audit.Scope{Client: c.Name}
	if c.Token.Auditor {
		for _, name := range d.tools().Order {
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
			return q, 0, fmt.Errorf("unknown parameter %q (known: %s)", node.Shorten(k), strings.Join(auditParams, ", "))
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
				err = fmt.Errorf(`no events are of kind %q (kinds: %s, or the part before a dot)`, node.Shorten(s), strings.Join(audit.Kinds, ", "))
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
func (d *Server) getHealth(w http.ResponseWriter, _ *http.Request) {
	if err := d.Audit().Err(); err != nil {
		edge.WriteJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "degraded", "audit": "unwritable; see the daemon's log"})
		return
	}
	edge.WriteJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}
