package httpapi

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
)

// getMetrics serves the Prometheus text format (version 0.0.4).
func (d *Server) getMetrics(w http.ResponseWriter, _ *http.Request) {
	var b strings.Builder
	metric := func(name, help, typ string) {
		fmt.Fprintf(&b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, typ)
	}
	line := func(name, tool string, v int64) {
		fmt.Fprintf(&b, "%s{tool=%s} %d\n", name, strconv.Quote(tool), v)
	}
	stats := make([]struct {
		tool string
		s    [8]int64
		rate float64
	}, 0, len(d.tools().Order))
	for _, name := range d.tools().Order {
		st, _ := d.PoolStats(name)
		stats = append(stats, struct {
			tool string
			s    [8]int64
			rate float64
		}{name, [8]int64{int64(st.Warm), int64(st.Idle), st.Hits, st.Misses, st.CreateFailures, st.Discarded, st.ClaimNanos, st.Released}, st.ClaimRate})
	}
	cols := []struct{ name, help, typ string }{
		{"airlock_pool_warm_target", "Sandboxes the tool's pool keeps ready.", "gauge"},
		{"airlock_pool_idle", "Sandboxes ready now.", "gauge"},
		{"airlock_pool_hits_total", "Claims served by a warm sandbox.", "counter"},
		{"airlock_pool_misses_total", "Claims that created a sandbox on the spot.", "counter"},
		{"airlock_pool_create_failures_total", "Failed attempts to create a sandbox for the pool.", "counter"},
		{"airlock_pool_discarded_total", "Ready sandboxes found dead and destroyed unused.", "counter"},
		{"airlock_pool_claim_nanoseconds_total", "Time spent in claims.", "counter"},
		{"airlock_pool_released_total", "Ready sandboxes an adaptive pool destroyed unused because demand fell.", "counter"},
	}
	for i, c := range cols {
		metric(c.name, c.help, c.typ)
		for _, st := range stats {
			line(c.name, st.tool, st.s[i])
		}
	}
	metric("airlock_pool_claim_rate", "Claims per second an adaptive pool sizes its target for (0 for a fixed pool).", "gauge")
	for _, st := range stats {
		fmt.Fprintf(&b, "airlock_pool_claim_rate{tool=%s} %s\n", strconv.Quote(st.tool), strconv.FormatFloat(st.rate, 'g', 4, 64))
	}
	u, bud := d.Usage(), d.Budget()
	for _, g := range []struct {
		name, help string
		v          int64
	}{
		{"airlock_sandboxes_live", "Sandboxes live now (warm, running, held by sessions, paused).", int64(u.Sandboxes)},
		{"airlock_sandboxes_memory_reserved_bytes", "The memory ceilings of the live sandboxes, together: what the node's budget holds.", u.Memory},
		{"airlock_sandboxes_paused", "Sandboxes of paused sessions: frozen, still live and reserved.", int64(u.Paused)},
		{"airlock_sandboxes_paused_memory_bytes", "The memory ceilings of the paused sessions' sandboxes, part of airlock_sandboxes_memory_reserved_bytes.", u.PausedMemory},
		{"airlock_capacity_sandboxes", "The most sandboxes the node holds at once (server.capacity).", int64(bud.Sandboxes)},
		{"airlock_capacity_memory_bytes", "The memory the node's sandboxes' ceilings may reserve together (server.capacity).", bud.Memory},
		{"airlock_capacity_pids", "The processes the node's sandboxes' ceilings may reserve together (server.capacity).", bud.Pids},
	} {
		metric(g.name, g.help, "gauge")
		fmt.Fprintf(&b, "%s %d\n", g.name, g.v)
	}
	metric("airlock_runs_total", "Runs answered.", "counter")
	fmt.Fprintf(&b, "airlock_runs_total %d\n", d.Counts().Runs.Load())
	metric("airlock_run_sandbox_failures_total", "Runs refused because no sandbox could be had.", "counter")
	fmt.Fprintf(&b, "airlock_run_sandbox_failures_total %d\n", d.Counts().Failures.Load())
	metric("airlock_api_requests_total", "API requests received.", "counter")
	fmt.Fprintf(&b, "airlock_api_requests_total %d\n", d.Counts().Requests.Load())
	metric("airlock_api_unauthorized_total", "API requests refused for want of a valid token.", "counter")
	fmt.Fprintf(&b, "airlock_api_unauthorized_total %d\n", d.Counts().Unauthorized.Load())
	metric("airlock_api_connections_shed_total", "TCP connections closed as soon as accepted: their address held its share of a listener under pressure.", "counter")
	fmt.Fprintf(&b, "airlock_api_connections_shed_total %d\n", d.opts.Shed())
	metric("airlock_api_forbidden_total", "API requests refused for a tool outside the token's scope.", "counter")
	fmt.Fprintf(&b, "airlock_api_forbidden_total %d\n", d.Counts().Forbidden.Load())
	metric("airlock_audit_refusals_total", "Runs and sessions refused because the audit log could not be written.", "counter")
	fmt.Fprintf(&b, "airlock_audit_refusals_total %d\n", d.Counts().AuditRefusals.Load())
	metric("airlock_audit_lost_events_total", "Audit events that could not be written.", "counter")
	fmt.Fprintf(&b, "airlock_audit_lost_events_total %d\n", d.Audit().Lost())
	metric("airlock_audit_last_id", "The id of the newest audit event.", "gauge")
	fmt.Fprintf(&b, "airlock_audit_last_id %d\n", d.Audit().Last())
	_ = d.WriteMetrics(&b)
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	_, _ = w.Write([]byte(b.String()))
}
