package node

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"strings"
	"sync/atomic"

	"github.com/airlockhq/airlock/internal/audit"
	"github.com/airlockhq/airlock/internal/metrics"
)

// nodeMetrics are the node's labelled metrics, for an SRE to alert on.
// Most are counted from the audit events as they are committed (Observe):
// one record, two views, never apart. Label values are bounded: tools
// are the config's (any other reads "other"), outcomes, limits, codes
// and reasons are airlock's own small sets, and a broker's service and
// operation are the config's (a call that matched none reads "-").
type nodeMetrics struct {
	reg metrics.Registry
	// tools are the config's tool names, every generation's (a reload
	// adds; a removed tool's series keep their label).
	tools atomic.Pointer[map[string]bool]

	runs     *metrics.Counter   // tool, outcome
	runTime  *metrics.Histogram // tool, outcome
	breaches *metrics.Counter   // tool, limit
	egress   *metrics.Counter   // tool, kind, decision, code
	broker   *metrics.Counter   // tool, service, operation, decision, code
	opened   *metrics.Counter   // tool
	ended    *metrics.Counter   // tool, reason
	claims   *metrics.Histogram // tool, pool
	refusals *metrics.Counter   // reason
}

func newNodeMetrics(tools []string) *nodeMetrics {
	m := &nodeMetrics{}
	m.tools.Store(&map[string]bool{})
	m.addTools(tools)
	r := &m.reg
	m.runs = r.NewCounter("airlock_run_outcomes_total", "Runs and session commands finished, by tool and outcome (exited, signaled, limit, error).", "tool", "outcome")
	m.runTime = r.NewHistogram("airlock_run_duration_seconds", "Wall time of finished runs and session commands, by tool and outcome.", metrics.DurationBuckets, "tool", "outcome")
	m.breaches = r.NewCounter("airlock_limit_breaches_total", "Sandboxes destroyed for a breached ceiling, by tool and limit (memory, pids, disk, fds, output, time, cpu).", "tool", "limit")
	m.egress = r.NewCounter("airlock_egress_decisions_total", "Egress and DNS decisions, by tool, kind (egress, dns), decision (allow, deny) and code.", "tool", "kind", "decision", "code")
	m.broker = r.NewCounter("airlock_broker_calls_total", "Broker calls, by tool, service, operation (as configured; - when none matched), decision and code.", "tool", "service", "operation", "decision", "code")
	m.opened = r.NewCounter("airlock_sessions_opened_total", "Sessions opened, by tool.", "tool")
	m.ended = r.NewCounter("airlock_sessions_ended_total", "Sessions ended, by tool and reason (deleted, idle timeout, max lifetime, limit, shutdown, sandbox died, paused too long, other).", "tool", "reason")
	m.claims = r.NewHistogram("airlock_claim_duration_seconds", "Time to get a sandbox for a run or session, by tool and how (warm: from the pool; cold: made on the spot).", metrics.DurationBuckets, "tool", "pool")
	m.refusals = r.NewCounter("airlock_admission_refusals_total", "Calls refused for want of room, by reason (capacity: the node's budget; sessions: its open sessions; token_concurrency: a token's).", "reason")
	return m
}

// addTools adds tool names to those that are labels (Reload's; one at a
// time).
func (m *nodeMetrics) addTools(tools []string) {
	next := maps.Clone(*m.tools.Load())
	for _, t := range tools {
		next[t] = true
	}
	m.tools.Store(&next)
}

// tool is t as a label: a tool of the config, or "other".
func (m *nodeMetrics) tool(t string) string {
	if (*m.tools.Load())[t] {
		return t
	}
	return metrics.Other
}

// endReasons are the reasons a session ends with, as labels.
var endReasons = []string{"deleted", "idle timeout", "max lifetime", "limit", "shutdown", "sandbox died", "paused too long"}

func endReason(reason string) string {
	for _, r := range endReasons {
		if reason == r || strings.HasPrefix(reason, r+":") || strings.HasPrefix(reason, r+" (") {
			return r
		}
	}
	return metrics.Other
}

// observe counts one committed audit event.
func (m *nodeMetrics) observe(e audit.Event) {
	tool := m.tool(e.Tool)
	switch e.Kind {
	case audit.KindRunFinished:
		outcome := bounded(e.Decision, "exited", "signaled", "limit", "error")
		m.runs.Inc(tool, outcome)
		var d struct {
			Usage struct {
				Wall int64 `json:"wall_ms"`
			} `json:"usage"`
		}
		if json.Unmarshal(e.Detail, &d) == nil {
			m.runTime.Observe(float64(d.Usage.Wall)/1000, tool, outcome)
		}
	case audit.KindLimit:
		m.breaches.Inc(tool, bounded(e.Decision, "memory", "pids", "disk", "fds", "output", "time", "cpu"))
	case audit.KindEgress, audit.KindDNS:
		var d struct {
			Code string `json:"code"`
		}
		_ = json.Unmarshal(e.Detail, &d)
		m.egress.Inc(tool, e.Kind, bounded(e.Decision, audit.Allow, audit.Deny), code(d.Code))
	case audit.KindBroker:
		var d struct {
			Service   string `json:"service"`
			Operation string `json:"operation"`
			Code      string `json:"code"`
		}
		_ = json.Unmarshal(e.Detail, &d)
		// The service is named by the sandbox's call: only one that
		// matched a configured operation is the config's.
		if d.Operation == "" {
			d.Service, d.Operation = "-", "-"
		}
		m.broker.Inc(tool, d.Service, d.Operation, bounded(e.Decision, audit.Allow, audit.Deny), code(d.Code))
	case audit.KindSessionCreated:
		m.opened.Inc(tool)
	case audit.KindSessionEnded:
		var d struct {
			Reason string `json:"reason"`
		}
		_ = json.Unmarshal(e.Detail, &d)
		m.ended.Inc(tool, endReason(d.Reason))
	}
}

// bounded is v if it is one of allowed, else "other".
func bounded(v string, allowed ...string) string {
	for _, a := range allowed {
		if v == a {
			return v
		}
	}
	return metrics.Other
}

// code is a decision's code as a label: airlock's codes are short
// lower-case words with underscores; anything else reads "other".
func code(c string) string {
	if c == "" {
		return "-"
	}
	if len(c) > 48 {
		return metrics.Other
	}
	for _, r := range c {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '_' || r == '-' || r == '.') {
			return metrics.Other
		}
	}
	return c
}

// WriteMetrics writes the node's labelled metrics in the Prometheus text
// format.
func (n *Node) WriteMetrics(w io.Writer) error {
	if err := n.metrics.reg.Write(w); err != nil {
		return err
	}
	st := n.traces.t.Stats()
	_, err := fmt.Fprintf(w, `# HELP airlock_trace_spans_total Spans of the node's traces, by result (sent: the collector took them; dropped: a full queue, a failed request or the collector's refusal). Zero while tracing is off.
# TYPE airlock_trace_spans_total counter
airlock_trace_spans_total{result="sent"} %d
airlock_trace_spans_total{result="dropped"} %d
# HELP airlock_trace_export_failures_total Requests to the trace collector that failed.
# TYPE airlock_trace_export_failures_total counter
airlock_trace_export_failures_total %d
`, st.Sent, st.Dropped, st.Failures)
	return err
}
