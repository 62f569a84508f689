package node

import (
	"encoding/json"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/airlockhq/airlock/internal/audit"
	"github.com/airlockhq/airlock/internal/config"
	"github.com/airlockhq/airlock/internal/tracing"
	"github.com/airlockhq/airlock/result"
)

// Traces (docs/decisions/0032-traces.md): a run is a trace of its own
// (or a child of the caller's, given a traceparent), with a span each for
// its claim, bind, exec and destroy; a session's open, commands and end
// share one. Each span carries the run's or session's id, the key of its
// audit events; the egress, DNS and broker decisions are spans made from
// their audit events as they are committed, under the exec (or session)
// that made them, with the event's own audit id.

// Span attributes airlock sets.
const (
	attrTool     = "airlock.tool"
	attrRun      = "airlock.run.id"
	attrSession  = "airlock.session.id"
	attrSandbox  = "airlock.sandbox.id"
	attrClient   = "airlock.client"
	attrAuditID  = "airlock.audit.id"
	attrWarm     = "airlock.pool.warm"
	attrOutcome  = "airlock.outcome"
	attrExit     = "airlock.exit_code"
	attrSignal   = "airlock.signal"
	attrLimit    = "airlock.limit"
	attrCeiling  = "airlock.limit.ceiling"
	attrObserved = "airlock.limit.observed"
	attrDecision = "airlock.decision"
	attrCode     = "airlock.code"
)

// maxTraced bounds the sandboxes whose decisions are traced at once:
// past it (sandboxes whose end was never committed to the log), new
// ones' decisions go untraced.
const maxTraced = 1 << 16

// traces are the node's tracer and the spans sandboxes' decisions go
// under, until the sandbox's end is committed to the audit log.
type traces struct {
	t *tracing.Tracer // nil: tracing is off

	mu      sync.Mutex
	parents map[string]tracing.Context // sandbox id → span
}

// newTracer is the tracer c configures; nil when tracing is off.
func newTracer(c config.Tracing, version string, logger *slog.Logger) *tracing.Tracer {
	if c.Endpoint == "" {
		return nil
	}
	host, _ := os.Hostname()
	return tracing.New(tracing.Options{Endpoint: c.Endpoint, Headers: c.Headers, Service: c.ServiceName, Version: version, Host: host, Logger: logger})
}

// span begins a span of scope s named name under parent, with s's
// attributes and extra; nil, at no cost, when tracing is off.
func (n *Node) span(parent tracing.Context, name string, s runScope, extra ...tracing.Attr) *tracing.Span {
	return n.startSpan(parent, name, tracing.Internal, s, extra...)
}

// rootSpan is span for a run's or session's own span: a trace's first,
// or the first of airlock's under the caller's.
func (n *Node) rootSpan(parent tracing.Context, name string, s runScope) *tracing.Span {
	return n.startSpan(parent, name, tracing.Server, s)
}

func (n *Node) startSpan(parent tracing.Context, name string, kind tracing.Kind, s runScope, extra ...tracing.Attr) *tracing.Span {
	if n.traces.t == nil {
		return nil
	}
	return n.traces.t.Start(parent, name, kind, append(scopeAttrs(s), extra...)...)
}

// endSpan ends s, failed with err's text if err is set.
func endSpan(s *tracing.Span, err error) {
	if err != nil {
		s.Fail(err.Error())
	}
	s.End()
}

// scopeAttrs are what every span of s carries.
func scopeAttrs(s runScope) []tracing.Attr {
	a := []tracing.Attr{tracing.String(attrTool, s.tool), tracing.String(attrClient, s.client)}
	if s.run != "" {
		a = append(a, tracing.String(attrRun, s.run))
	}
	if s.session != "" {
		a = append(a, tracing.String(attrSession, s.session))
	}
	if s.sandbox != "" {
		a = append(a, tracing.String(attrSandbox, s.sandbox))
	}
	return a
}

// traceResult sets what r says on s: its outcome, and a breach's limit;
// an error or a breach fails the span.
func traceResult(s *tracing.Span, r *result.Result) {
	if s == nil || r == nil {
		return
	}
	s.Set(tracing.String(attrOutcome, string(r.Outcome)), tracing.Int(attrExit, int64(r.ExitCode)))
	if r.Signal != 0 {
		s.Set(tracing.Int(attrSignal, int64(r.Signal)))
	}
	if r.SandboxID != "" {
		s.Set(tracing.String(attrSandbox, r.SandboxID))
	}
	switch {
	case r.Limit != nil:
		s.Set(tracing.String(attrLimit, r.Limit.Name), tracing.Int(attrCeiling, r.Limit.Ceiling), tracing.Int(attrObserved, r.Limit.Observed))
		s.Fail("limit " + r.Limit.Name + " breached")
	case r.Outcome == result.Error:
		s.Fail(r.Error)
	}
}

// traceDecisions puts the decisions of sandbox sb under parent, from now
// until its end is committed.
func (n *Node) traceDecisions(sb string, parent tracing.Context) {
	tr := &n.traces
	if tr.t == nil || !parent.IsValid() {
		return
	}
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if tr.parents == nil {
		tr.parents = map[string]tracing.Context{}
	}
	if _, ok := tr.parents[sb]; ok || len(tr.parents) < maxTraced {
		tr.parents[sb] = parent
	}
}

// observe makes spans of the committed decisions of traced sandboxes,
// and forgets a sandbox once its end is committed (after its decisions:
// its network is closed before it is destroyed). It runs in the audit
// log's committer: quick, and never calls the log.
func (tr *traces) observe(e audit.Event) {
	if tr.t == nil || e.Sandbox == "" {
		return
	}
	switch e.Kind {
	case audit.KindEgress, audit.KindDNS, audit.KindBroker:
	case audit.KindSandboxDestroyed, audit.KindSandboxSwept:
		tr.mu.Lock()
		delete(tr.parents, e.Sandbox)
		tr.mu.Unlock()
		return
	default:
		return
	}
	tr.mu.Lock()
	parent, ok := tr.parents[e.Sandbox]
	tr.mu.Unlock()
	if !ok {
		return
	}
	var d struct {
		Kind        string `json:"kind"`
		Destination string `json:"destination"`
		Method      string `json:"method"`
		Address     string `json:"address"`
		Code        string `json:"code"`
		Reason      string `json:"reason"`
		Status      int    `json:"status"`
		Service     string `json:"service"`
		Operation   string `json:"operation"`
		Path        string `json:"path"`
		BytesOut    int64  `json:"bytes_out"`
		BytesIn     int64  `json:"bytes_in"`
		DurationMs  int64  `json:"duration_ms"`
	}
	_ = json.Unmarshal(e.Detail, &d)
	attrs := []tracing.Attr{
		tracing.Int(attrAuditID, e.ID), tracing.String(attrTool, e.Tool), tracing.String(attrSandbox, e.Sandbox),
		tracing.String(attrDecision, e.Decision), tracing.String(attrCode, d.Code),
		tracing.Int("airlock.bytes_out", d.BytesOut), tracing.Int("airlock.bytes_in", d.BytesIn),
	}
	if e.Run != "" {
		attrs = append(attrs, tracing.String(attrRun, e.Run))
	}
	if e.Session != "" {
		attrs = append(attrs, tracing.String(attrSession, e.Session))
	}
	if d.Status != 0 {
		attrs = append(attrs, tracing.Int("http.response.status_code", int64(d.Status)))
	}
	name := "airlock." + e.Kind
	if e.Kind == audit.KindBroker {
		attrs = append(attrs, tracing.String("airlock.broker.service", d.Service), tracing.String("airlock.broker.operation", d.Operation),
			tracing.String("http.request.method", d.Method), tracing.String("url.path", d.Path))
	} else {
		attrs = append(attrs, tracing.String("airlock.destination", d.Destination), tracing.String("airlock.egress.kind", d.Kind),
			tracing.String("airlock.egress.method", d.Method), tracing.String("airlock.address", d.Address))
	}
	failed := ""
	if e.Decision == audit.Deny {
		failed = strings.TrimSpace(d.Code + ": " + d.Reason)
	}
	start := e.Time
	tr.t.Record(parent, name, start, start.Add(time.Duration(d.DurationMs)*time.Millisecond), failed, attrs...)
}
