package audit

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"
)

// Query selects events. Empty fields do not filter.
type Query struct {
	// After returns only events with a larger id: the paging and
	// following cursor.
	After int64
	// Since and Until bound the event time (Since inclusive, Until
	// exclusive).
	Since, Until time.Time
	// Kind matches the kind and the kinds below it ("egress", "sandbox",
	// "run.finished").
	Kind     string
	Tool     string
	Sandbox  string
	Session  string
	Run      string
	Client   string
	Decision string
	// Scope, when not nil, restricts the answer to what one caller may
	// read (a caller on the TCP listener reads less than the host).
	Scope *Scope
	// Limit bounds the answer; 0 means DefaultLimit, and it is capped at
	// MaxLimit.
	Limit int
	// Tail returns the newest Limit matching events (still oldest first)
	// instead of the oldest.
	Tail bool
}

// Scope is what one caller may read of the log: the events it caused,
// and, for an auditor, every event of the tools it may use.
type Scope struct {
	// Client selects the events whose client is this one; "" none.
	Client string
	// Tools selects the events of these tools, whoever caused them.
	Tools []string
}

// Answer sizes.
const (
	DefaultLimit = 100
	MaxLimit     = 1000
)

// Query returns the events q selects, oldest first.
func (l *Log) Query(ctx context.Context, q Query) ([]Event, error) {
	var where []string
	var args []any
	add := func(cond string, v any) {
		where = append(where, cond)
		args = append(args, v)
	}
	if q.After > 0 {
		add("id > ?", q.After)
	}
	if !q.Since.IsZero() {
		add("time >= ?", q.Since.UnixNano())
	}
	if !q.Until.IsZero() {
		add("time < ?", q.Until.UnixNano())
	}
	if q.Kind != "" {
		where = append(where, "(kind = ? OR substr(kind, 1, ?) = ?)")
		args = append(args, q.Kind, len(q.Kind)+1, q.Kind+".")
	}
	for _, f := range []struct{ col, v string }{
		{"tool", q.Tool}, {"sandbox", q.Sandbox}, {"session", q.Session},
		{"run", q.Run}, {"client", q.Client}, {"decision", q.Decision},
	} {
		if f.v != "" {
			add(f.col+" = ?", f.v)
		}
	}
	if sc := q.Scope; sc != nil {
		var or []string
		if sc.Client != "" {
			or = append(or, "client = ?")
			args = append(args, sc.Client)
		}
		if len(sc.Tools) > 0 {
			or = append(or, "tool IN (?"+strings.Repeat(", ?", len(sc.Tools)-1)+")")
			for _, t := range sc.Tools {
				args = append(args, t)
			}
		}
		if len(or) == 0 {
			return []Event{}, nil
		}
		where = append(where, "("+strings.Join(or, " OR ")+")")
	}
	limit := q.Limit
	if limit <= 0 {
		limit = DefaultLimit
	}
	limit = min(limit, MaxLimit)
	stmt := `SELECT id, time, kind, tool, sandbox, session, run, client, decision, detail FROM events`
	if len(where) > 0 {
		stmt += " WHERE " + strings.Join(where, " AND ")
	}
	if q.Tail {
		stmt += " ORDER BY id DESC"
	} else {
		stmt += " ORDER BY id"
	}
	stmt += " LIMIT ?"
	args = append(args, limit)
	rows, err := l.r.QueryContext(ctx, stmt, args...)
	if err != nil {
		return nil, fmt.Errorf("audit: query: %w", err)
	}
	defer rows.Close()
	out := []Event{}
	for rows.Next() {
		var ev Event
		var t int64
		var detail string
		if err := rows.Scan(&ev.ID, &t, &ev.Kind, &ev.Tool, &ev.Sandbox, &ev.Session, &ev.Run, &ev.Client, &ev.Decision, &detail); err != nil {
			return nil, fmt.Errorf("audit: query: %w", err)
		}
		ev.Time = time.Unix(0, t).UTC()
		if detail != "" {
			ev.Detail = json.RawMessage(detail)
		}
		out = append(out, ev)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("audit: query: %w", err)
	}
	if q.Tail {
		for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
			out[i], out[j] = out[j], out[i]
		}
	}
	return out, nil
}

// Wait returns once an event newer than after has been committed, or
// when ctx ends (returning its error). It is the long poll behind
// following the log.
func (l *Log) Wait(ctx context.Context, after int64) error {
	for {
		l.fmu.Lock()
		ch := l.changed
		l.fmu.Unlock()
		if l.last.Load() > after {
			return nil
		}
		select {
		case <-ch:
		case <-l.done:
			return ErrClosed
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Detail encodes v as an event's detail; a value that cannot be encoded
// gives an empty detail rather than losing the event.
func Detail(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		return nil
	}
	return b
}
