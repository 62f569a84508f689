package daemon

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/client"
	"github.com/airlockhq/airlock/internal/testutil"
	"github.com/airlockhq/airlock/result"
)

// otelSpan is a span as the collector wrote it (OTLP's JSON).
type otelSpan struct {
	TraceID      string `json:"traceId"`
	SpanID       string `json:"spanId"`
	ParentSpanID string `json:"parentSpanId"`
	Name         string `json:"name"`
	Start        string `json:"startTimeUnixNano"`
	End          string `json:"endTimeUnixNano"`
	Attributes   []struct {
		Key   string `json:"key"`
		Value struct {
			String *string `json:"stringValue"`
			Int    *string `json:"intValue"`
			Bool   *bool   `json:"boolValue"`
		} `json:"value"`
	} `json:"attributes"`
	Status struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"status"`
	service string
}

func (s otelSpan) attr(k string) string {
	for _, a := range s.Attributes {
		if a.Key != k {
			continue
		}
		switch v := a.Value; {
		case v.String != nil:
			return *v.String
		case v.Int != nil:
			return *v.Int
		case v.Bool != nil:
			return strconv.FormatBool(*v.Bool)
		}
	}
	return ""
}

// otelCollector starts the OpenTelemetry Collector (scripts/otelcol: the
// project's OTLP receiver and file exporter, built from the Go module
// proxy) on a free loopback port, and returns its OTLP/HTTP endpoint and
// a reader of the spans it has written out.
func otelCollector(t *testing.T) (endpoint string, spans func() []otelSpan) {
	t.Helper()
	bin := os.Getenv("AIRLOCK_TEST_OTELCOL")
	if bin == "" {
		if os.Getenv("CI") != "" {
			t.Fatal("AIRLOCK_TEST_OTELCOL is not set in CI: scripts/test builds the OpenTelemetry Collector (scripts/otel-collector)")
		}
		t.Skip("AIRLOCK_TEST_OTELCOL is not set (scripts/test builds the OpenTelemetry Collector)")
	}
	dir := t.TempDir()
	addr := testutil.FreeAddr(t)
	out := filepath.Join(dir, "spans.json")
	cfg := fmt.Sprintf(`receivers:
  otlp:
    protocols:
      http:
        endpoint: %s
exporters:
  file:
    path: %s
    flush_interval: 100ms
service:
  telemetry:
    metrics:
      level: none
  pipelines:
    traces:
      receivers: [otlp]
      exporters: [file]
`, addr, out)
	cfgPath := filepath.Join(dir, "collector.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	var log bytes.Buffer
	cmd := exec.Command(bin, "--config", "file:"+cfgPath)
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		if t.Failed() {
			t.Logf("the collector's log:\n%s", log.String())
		}
	})
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the collector never listened on %s:\n%s", addr, log.String())
		}
	}
	return "http://" + addr, func() []otelSpan {
		f, err := os.Open(out)
		if err != nil {
			return nil
		}
		defer f.Close()
		var all []otelSpan
		sc := bufio.NewScanner(f)
		sc.Buffer(nil, 16<<20)
		for sc.Scan() {
			var req struct {
				ResourceSpans []struct {
					Resource struct {
						Attributes []struct {
							Key   string `json:"key"`
							Value struct {
								String string `json:"stringValue"`
							} `json:"value"`
						} `json:"attributes"`
					} `json:"resource"`
					ScopeSpans []struct {
						Spans []otelSpan `json:"spans"`
					} `json:"scopeSpans"`
				} `json:"resourceSpans"`
			}
			if err := json.Unmarshal(sc.Bytes(), &req); err != nil {
				t.Errorf("the collector wrote a line that is not OTLP JSON: %v", err)
				continue
			}
			for _, rs := range req.ResourceSpans {
				service := ""
				for _, a := range rs.Resource.Attributes {
					if a.Key == "service.name" {
						service = a.Value.String
					}
				}
				for _, ss := range rs.ScopeSpans {
					for _, s := range ss.Spans {
						s.service = service
						all = append(all, s)
					}
				}
			}
		}
		return all
	}
}

// TestTraces sends a daemon's traces to a real OpenTelemetry Collector
// and reads back what it took: a run under the caller's traceparent,
// with its claim, bind, exec and destroy, and its egress and broker
// decisions (allowed and refused) under its exec, each with the audit
// event's id; a breach's exec failed with the limit named; a session's
// open (under its caller's traceparent), command and end in one trace. A daemon whose collector is down
// runs as well, and counts the failure.
func TestTraces(t *testing.T) {
	endpoint, spans := otelCollector(t)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "upstream %s\n", r.URL.Path)
	}))
	t.Cleanup(up.Close)
	port := up.Listener.Addr().(*net.TCPAddr).Port
	t.Setenv("TRACE_TEST_SECRET", "trace-test-s3cret-value")
	d, sock := serveConfig(t, fmt.Sprintf(`
tracing:
  endpoint: %s
  service_name: airlockd-test
tools:
  web:
    egress:
      - {host: plain.test, ports: [%d], addresses: [127.0.0.1], private: true}
    services: [api]
  sh:
    limits: {memory: 64MiB}
services:
  api:
    upstream: %s
    private: true
    credential: {secret: k}
    operations: [GET /hello]
secrets:
  k: {env: TRACE_TEST_SECRET}
`, endpoint, port, up.URL), nil)
	_ = d
	c := client.New(sock)
	ctx := t.Context()

	// A run with the caller's trace context.
	const callerTrace, callerSpan = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	hc, url := c.Endpoint("/v1/runs")
	body, _ := json.Marshal(api.RunRequest{Tool: "web", Argv: []string{"sh", "-c", fmt.Sprintf(
		`curl -sS http://plain.test:%d/; curl -sS http://refused.test/ || true; curl -sS "$AIRLOCK_BROKER_URL/api/hello"; curl -sS "$AIRLOCK_BROKER_URL/api/nope" || true`, port)}})
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("traceparent", "00-"+callerTrace+"-"+callerSpan+"-01")
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var run result.Result
	if err := json.Unmarshal(b, &run); err != nil || run.Outcome != result.Exited {
		t.Fatalf("the run: %s (%v)", b, err)
	}
	if !strings.Contains(string(run.Stdout), "upstream /hello") || len(run.Egress) < 2 || len(run.Broker) < 2 {
		t.Fatalf("the run did not make its calls: stdout %q, egress %+v, broker %+v", run.Stdout, run.Egress, run.Broker)
	}
	breach, err := c.Run(ctx, api.RunRequest{Tool: "sh", Argv: []string{"sh", "-c", "head -c 200M /dev/zero | tail"}})
	if err != nil || breach.Outcome != result.LimitExceeded {
		t.Fatalf("the breach: %+v %v", breach, err)
	}
	// A session, under another caller's span.
	const sessionTrace, sessionSpan = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"
	hc, url = c.Endpoint("/v1/sessions")
	req, _ = http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(`{"tool":"sh"}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("traceparent", "00-"+sessionTrace+"-"+sessionSpan+"-01")
	resp, err = hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	var s api.Session
	if err := json.Unmarshal(b, &s); err != nil || s.ID == "" {
		t.Fatalf("the session: %s (%v)", b, err)
	}
	if r, err := c.Exec(ctx, s.ID, api.ExecRequest{Argv: []string{"true"}}); err != nil || r.ExitCode != 0 {
		t.Fatalf("exec: %+v %v", r, err)
	}
	if err := c.DeleteSession(ctx, s.ID); err != nil {
		t.Fatal(err)
	}

	// The audit events of the run, for the ids on its decisions' spans.
	evs := waitAudit(t, c, client.AuditQuery{Run: run.RunID}, func(evs []api.AuditEvent) bool {
		n := 0
		for _, e := range evs {
			if e.Kind == "egress" || e.Kind == "broker" {
				n++
			}
		}
		return n >= 4
	})
	kindOf := map[string]string{}
	for _, e := range evs {
		kindOf[strconv.FormatInt(e.ID, 10)] = e.Kind
	}

	var got []otelSpan
	byName := func(trace, name string) []otelSpan {
		var out []otelSpan
		for _, s := range got {
			if s.TraceID == trace && s.Name == name {
				out = append(out, s)
			}
		}
		return out
	}
	// The breach's spans come in an export of their own, perhaps after
	// the run's: it is waited for too.
	breachExported := func() bool {
		for _, s := range got {
			if s.Name == "airlock.exec" && s.attr("airlock.run.id") == breach.RunID {
				return true
			}
		}
		return false
	}
	complete := func() bool {
		got = spans()
		return len(byName(callerTrace, "airlock.run")) == 1 && len(byName(callerTrace, "airlock.egress")) >= 2 &&
			len(byName(callerTrace, "airlock.broker")) >= 2 && len(byName(callerTrace, "airlock.destroy")) == 1 && breachExported()
	}
	for deadline := time.Now().Add(20 * time.Second); !complete(); time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the collector never had the run's spans; it has %d: %+v", len(got), got)
		}
	}

	root := byName(callerTrace, "airlock.run")[0]
	if root.ParentSpanID != callerSpan || root.service != "airlockd-test" || root.attr("airlock.run.id") != run.RunID ||
		root.attr("airlock.tool") != "web" || root.attr("airlock.outcome") != "exited" || root.Status.Code == 2 {
		t.Errorf("the run's span = %+v: want the caller's child, of service airlockd-test, run %s, exited", root, run.RunID)
	}
	var exec otelSpan
	for _, name := range []string{"airlock.claim", "airlock.bind", "airlock.exec", "airlock.destroy"} {
		ss := byName(callerTrace, name)
		if len(ss) != 1 {
			t.Errorf("%d %s spans in the run's trace, want 1", len(ss), name)
			continue
		}
		if ss[0].ParentSpanID != root.SpanID || ss[0].attr("airlock.run.id") != run.RunID || ss[0].attr("airlock.sandbox.id") != run.SandboxID {
			t.Errorf("%s = %+v: want the run's child, with its run and sandbox ids", name, ss[0])
		}
		if name == "airlock.exec" {
			exec = ss[0]
		}
	}
	// The decisions: under the exec, each with its audit event's id.
	var allowed, refused, brokered, brokerRefused bool
	for _, s := range append(byName(callerTrace, "airlock.egress"), byName(callerTrace, "airlock.broker")...) {
		id := s.attr("airlock.audit.id")
		if s.ParentSpanID != exec.SpanID || s.attr("airlock.run.id") != run.RunID || kindOf[id] != strings.TrimPrefix(s.Name, "airlock.") {
			t.Errorf("decision span %+v: want the exec's child with its audit event's id (%q is a %q)", s, id, kindOf[id])
		}
		deny := s.attr("airlock.decision") == "deny"
		if deny != (s.Status.Code == 2) {
			t.Errorf("decision span %s %s has status %+v", s.Name, s.attr("airlock.decision"), s.Status)
		}
		switch {
		case s.Name == "airlock.egress" && !deny && strings.HasPrefix(s.attr("airlock.destination"), "plain.test"):
			allowed = true
		case s.Name == "airlock.egress" && deny && strings.HasPrefix(s.attr("airlock.destination"), "refused.test") && s.attr("airlock.code") != "":
			refused = true
		case s.Name == "airlock.broker" && !deny && s.attr("airlock.broker.service") == "api" && s.attr("airlock.broker.operation") == "GET /hello":
			brokered = true
		case s.Name == "airlock.broker" && deny && s.attr("airlock.code") != "":
			brokerRefused = true
		}
	}
	if !allowed || !refused || !brokered || !brokerRefused {
		t.Errorf("decision spans: allowed egress %v, refused egress %v, broker call %v, refused broker call %v; want all", allowed, refused, brokered, brokerRefused)
	}

	// The breach: its own trace; the exec failed with the limit named.
	var breachExec *otelSpan
	for _, s := range got {
		if s.Name == "airlock.exec" && s.attr("airlock.run.id") == breach.RunID {
			breachExec = &s
		}
	}
	if breachExec == nil {
		t.Errorf("no exec span of the breach %s", breach.RunID)
	} else if breachExec.Status.Code != 2 || breachExec.attr("airlock.limit") != "memory" || breachExec.attr("airlock.outcome") != "limit" ||
		breachExec.attr("airlock.limit.ceiling") != strconv.Itoa(64<<20) {
		t.Errorf("the breach's exec span = %+v: want failed, limit memory at 64 MiB", *breachExec)
	}

	// The session: open, its command and its end in one trace.
	var open *otelSpan
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		got = spans()
		for _, sp := range got {
			if sp.Name == "airlock.session.open" && sp.attr("airlock.session.id") == s.ID {
				open = &sp
			}
		}
		if open != nil && len(byName(open.TraceID, "airlock.session.end")) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the session's spans never all came (open %v)", open)
		}
	}
	ex := byName(open.TraceID, "airlock.session.exec")
	end := byName(open.TraceID, "airlock.session.end")[0]
	if open.TraceID != sessionTrace || open.ParentSpanID != sessionSpan {
		t.Errorf("the session's open span %s/%s is not under its caller's %s/%s", open.TraceID, open.ParentSpanID, sessionTrace, sessionSpan)
	}
	if len(ex) != 1 || ex[0].ParentSpanID != open.SpanID || ex[0].attr("airlock.outcome") != "exited" || end.ParentSpanID != open.SpanID ||
		end.attr("airlock.session.end_reason") != "deleted" || len(byName(open.TraceID, "airlock.claim")) != 1 {
		t.Errorf("the session's trace: exec %+v, end %+v", ex, end)
	}

	raw := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
	if m := getText(t, raw, "http://airlock/metrics"); !strings.Contains(m, `airlock_trace_spans_total{result="sent"} `) ||
		strings.Contains(m, `airlock_trace_spans_total{result="sent"} 0`+"\n") {
		t.Errorf("/metrics does not count the spans sent:\n%s", grepLines(m, "airlock_trace"))
	}

	// A collector that is down: runs go on; the failures are counted.
	down := "http://" + testutil.FreeAddr(t)
	_, sock2 := serveConfig(t, "tracing: {endpoint: '"+down+"'}\ntools: {sh: {}}\n", nil)
	c2 := client.New(sock2)
	if r, err := c2.Run(ctx, api.RunRequest{Tool: "sh", Argv: []string{"true"}}); err != nil || r.ExitCode != 0 {
		t.Fatalf("a run with the collector down: %+v %v", r, err)
	}
	raw2 := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock2)
	}}}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		m := getText(t, raw2, "http://airlock/metrics")
		if !strings.Contains(m, "airlock_trace_export_failures_total 0\n") && !strings.Contains(m, `airlock_trace_spans_total{result="dropped"} 0`+"\n") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the failures to reach a collector that is down are not counted:\n%s", grepLines(m, "airlock_trace"))
		}
	}
}

func getText(t *testing.T, hc *http.Client, url string) string {
	t.Helper()
	resp, err := hc.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
