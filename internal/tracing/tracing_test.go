package tracing

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// collector is a unit test's stand-in for the collector (the daemon's
// trace test sends to a real one): it keeps what it was sent and answers
// with code and body.
type collector struct {
	mu     sync.Mutex
	got    []exportRequest
	header http.Header
	code   int
	body   string
}

func (c *collector) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	var req exportRequest
	if err := json.Unmarshal(b, &req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	c.mu.Lock()
	c.got = append(c.got, req)
	c.header = r.Header.Clone()
	code, body := c.code, c.body
	c.mu.Unlock()
	if code == 0 {
		code = http.StatusOK
	}
	w.WriteHeader(code)
	io.WriteString(w, body)
}

func (c *collector) spans() []spanJSON {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []spanJSON
	for _, r := range c.got {
		for _, rs := range r.ResourceSpans {
			for _, ss := range rs.ScopeSpans {
				out = append(out, ss.Spans...)
			}
		}
	}
	return out
}

func newTestTracer(t *testing.T, c *collector) *Tracer {
	srv := httptest.NewServer(c)
	t.Cleanup(srv.Close)
	tr := New(Options{Endpoint: srv.URL + "/v1/traces", Headers: map[string]string{"Authorization": "Bearer x"}, Version: "test", Host: "h", Every: time.Hour})
	t.Cleanup(func() { tr.Close(t.Context()) })
	return tr
}

func attr(s spanJSON, key string) string {
	for _, a := range s.Attributes {
		if a.Key == key {
			switch {
			case a.Value.String != nil:
				return *a.Value.String
			case a.Value.Int != nil:
				return *a.Value.Int
			case a.Value.Bool != nil:
				if *a.Value.Bool {
					return "true"
				}
				return "false"
			}
		}
	}
	return "<none>"
}

func TestSpansSent(t *testing.T) {
	c := &collector{}
	tr := newTestTracer(t, c)
	root := tr.Start(Context{}, "airlock.run", Server, String("airlock.tool", "sh"))
	child := tr.Start(root.Context(), "airlock.exec", Internal, Int("airlock.exit_code", 3), Bool("airlock.warm", true))
	child.Fail("limit")
	child.End()
	child.Set(String("late", "x")) // after End: ignored
	at := time.Unix(100, 5)
	tr.Record(child.Context(), "airlock.egress", at, at.Add(-time.Second), "", String("airlock.destination", strings.Repeat("a", 2000)))
	root.End()
	root.End() // a second End sends nothing more
	if err := tr.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	got := c.spans()
	if len(got) != 3 {
		t.Fatalf("the collector got %d spans, want 3: %+v", len(got), got)
	}
	exec, egress, run := got[0], got[1], got[2]
	if run.Name != "airlock.run" || run.ParentSpanID != "" || run.Kind != Server || attr(run, "airlock.tool") != "sh" {
		t.Errorf("run span = %+v", run)
	}
	if exec.TraceID != run.TraceID || exec.ParentSpanID != run.SpanID || exec.Kind != Internal {
		t.Errorf("exec span %+v is not the run's child (%s/%s)", exec, run.TraceID, run.SpanID)
	}
	if attr(exec, "airlock.exit_code") != "3" || attr(exec, "airlock.warm") != "true" || attr(exec, "late") != "<none>" {
		t.Errorf("exec attributes = %+v", exec.Attributes)
	}
	if exec.Status.Code != statusError || exec.Status.Message != "limit" {
		t.Errorf("exec status = %+v, want error \"limit\"", exec.Status)
	}
	if egress.ParentSpanID != exec.SpanID || egress.Start != "100000000005" || egress.End != egress.Start {
		t.Errorf("egress span = %+v (an end before its start is its start)", egress)
	}
	if n := len(attr(egress, "airlock.destination")); n != maxValueLen {
		t.Errorf("a long value is sent with %d bytes, want %d", n, maxValueLen)
	}
	if len(run.TraceID) != 32 || len(run.SpanID) != 16 {
		t.Errorf("ids %q %q are not hex of 16 and 8 bytes", run.TraceID, run.SpanID)
	}
	if h := c.header.Get("Authorization"); h != "Bearer x" || c.header.Get("Content-Type") != "application/json" {
		t.Errorf("headers = %v", c.header)
	}
	res := c.got[0].ResourceSpans[0].Resource.Attributes
	if len(res) != 3 || res[0].Key != "service.name" || *res[0].Value.String != "airlockd" {
		t.Errorf("resource = %+v", res)
	}
	if s := tr.Stats(); s != (Stats{Sent: 3}) {
		t.Errorf("Stats = %+v, want 3 sent", s)
	}
}

func TestSpansDropped(t *testing.T) {
	c := &collector{code: http.StatusServiceUnavailable, body: "busy"}
	tr := newTestTracer(t, c)
	tr.Start(Context{}, "a", Internal).End()
	if err := tr.Flush(t.Context()); err == nil || !strings.Contains(err.Error(), "503") {
		t.Errorf("Flush to a failing collector = %v, want its 503", err)
	}
	c.mu.Lock()
	c.code, c.body = http.StatusOK, `{"partialSuccess":{"rejectedSpans":"1","errorMessage":"bad span"}}`
	c.mu.Unlock()
	tr.Start(Context{}, "b", Internal).End()
	tr.Start(Context{}, "c", Internal).End()
	if err := tr.Flush(t.Context()); err == nil || !strings.Contains(err.Error(), "bad span") {
		t.Errorf("Flush with a partial success = %v, want its message", err)
	}
	if s := tr.Stats(); s != (Stats{Sent: 1, Dropped: 2, Failures: 2}) {
		t.Errorf("Stats = %+v, want 1 sent, 2 dropped, 2 failures", s)
	}
	// A full queue drops what ends past it, without waiting.
	tr.mu.Lock()
	tr.q = make([]*Span, queueCap)
	tr.mu.Unlock()
	tr.Start(Context{}, "d", Internal).End()
	if s := tr.Stats(); s.Dropped != 3 {
		t.Errorf("dropped = %d past a full queue, want 3", s.Dropped)
	}
	tr.mu.Lock()
	tr.q = nil
	tr.mu.Unlock()
}

func TestNilTracer(t *testing.T) {
	var tr *Tracer
	s := tr.Start(Context{}, "x", Internal, String("k", "v"))
	if s != nil || s.Context().IsValid() {
		t.Fatalf("a nil Tracer's span = %v", s)
	}
	s.Set(String("a", "b"))
	s.Fail("x")
	s.End()
	tr.Record(Context{}, "y", time.Now(), time.Now(), "")
	if err := tr.Flush(t.Context()); err != nil {
		t.Error(err)
	}
	if err := tr.Close(t.Context()); err != nil {
		t.Error(err)
	}
}

// TestCloseSends: what ended before Close is sent by it; what ends after
// is dropped.
func TestCloseSends(t *testing.T) {
	c := &collector{}
	srv := httptest.NewServer(c)
	defer srv.Close()
	tr := New(Options{Endpoint: srv.URL, Every: time.Hour})
	tr.Start(Context{}, "before", Internal).End()
	late := tr.Start(Context{}, "after", Internal)
	if err := tr.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	late.End()
	if got := c.spans(); len(got) != 1 || got[0].Name != "before" {
		t.Errorf("sent %+v, want the span that ended before Close", got)
	}
	if s := tr.Stats(); s != (Stats{Sent: 1, Dropped: 1}) {
		t.Errorf("Stats = %+v", s)
	}
}

func TestParseTraceparent(t *testing.T) {
	const good = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	tests := []struct {
		in string
		ok bool
	}{
		{good, true},
		{"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00", true},
		{"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-more", true},
		{"", false},
		{good[:54], false},
		{good + "-x", false}, // version 00 has no more fields
		{"ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", false},
		{"00-00000000000000000000000000000000-00f067aa0ba902b7-01", false},
		{"00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01", false},
		{"00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01", false},
		{"00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01", false},
		{"00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", false},
		{"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-zz", false},
	}
	for _, tt := range tests {
		c := ParseTraceparent(tt.in)
		if c.IsValid() != tt.ok {
			t.Errorf("ParseTraceparent(%q) = %v, want valid %v", tt.in, c, tt.ok)
		}
	}
	if c := ParseTraceparent(good); c.Trace.String() != "4bf92f3577b34da6a3ce929d0e0e4736" || c.Span.String() != "00f067aa0ba902b7" {
		t.Errorf("ParseTraceparent(%q) = %s/%s", good, c.Trace, c.Span)
	}
}

func FuzzParseTraceparent(f *testing.F) {
	f.Add("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	f.Fuzz(func(t *testing.T, s string) {
		c := ParseTraceparent(s)
		if c.IsValid() && (len(s) < 55 || s[3:35] != c.Trace.String() || s[36:52] != c.Span.String()) {
			t.Errorf("ParseTraceparent(%q) = %s/%s", s, c.Trace, c.Span)
		}
	})
}
