package tracing

import (
	"strconv"
)

// The OTLP/HTTP JSON encoding of an export request
// (opentelemetry-proto's ExportTraceServiceRequest in the protocol's JSON
// mapping: ids in hex, 64-bit integers as strings, enums as numbers).

type exportRequest struct {
	ResourceSpans []resourceSpans `json:"resourceSpans"`
}

type resourceSpans struct {
	Resource   resource     `json:"resource"`
	ScopeSpans []scopeSpans `json:"scopeSpans"`
}

type resource struct {
	Attributes []kv `json:"attributes"`
}

type scopeSpans struct {
	Scope scope      `json:"scope"`
	Spans []spanJSON `json:"spans"`
}

type scope struct {
	Name    string `json:"name"`
	Version string `json:"version,omitempty"`
}

type spanJSON struct {
	TraceID      string `json:"traceId"`
	SpanID       string `json:"spanId"`
	ParentSpanID string `json:"parentSpanId,omitempty"`
	Name         string `json:"name"`
	Kind         Kind   `json:"kind"`
	Start        string `json:"startTimeUnixNano"`
	End          string `json:"endTimeUnixNano"`
	Attributes   []kv   `json:"attributes,omitempty"`
	Status       status `json:"status"`
}

// status codes: unset, ok, error.
const statusError = 2

type status struct {
	Code    int    `json:"code,omitempty"`
	Message string `json:"message,omitempty"`
}

type kv struct {
	Key   string   `json:"key"`
	Value anyValue `json:"value"`
}

type anyValue struct {
	String *string `json:"stringValue,omitempty"`
	Int    *string `json:"intValue,omitempty"`
	Bool   *bool   `json:"boolValue,omitempty"`
}

func attrKV(a Attr) kv {
	switch a.kind {
	case attrInt:
		v := strconv.FormatInt(a.num, 10)
		return kv{Key: a.Key, Value: anyValue{Int: &v}}
	case attrBool:
		v := a.num != 0
		return kv{Key: a.Key, Value: anyValue{Bool: &v}}
	}
	v := a.str
	return kv{Key: a.Key, Value: anyValue{String: &v}}
}

// scopeName names the instrumentation: airlock's own.
const scopeName = "github.com/airlockhq/airlock"

func (t *Tracer) request(batch []*Span) exportRequest {
	spans := make([]spanJSON, 0, len(batch))
	for _, s := range batch {
		s.mu.Lock()
		j := spanJSON{
			TraceID: s.ctx.Trace.String(),
			SpanID:  s.ctx.Span.String(),
			Name:    s.name,
			Kind:    s.kind,
			Start:   strconv.FormatInt(s.start.UnixNano(), 10),
			End:     strconv.FormatInt(s.end.UnixNano(), 10),
		}
		if s.parent.IsValid() {
			j.ParentSpanID = s.parent.String()
		}
		for _, a := range s.attrs {
			j.Attributes = append(j.Attributes, attrKV(a))
		}
		if s.failed != "" {
			j.Status = status{Code: statusError, Message: s.failed}
		}
		s.mu.Unlock()
		spans = append(spans, j)
	}
	return exportRequest{ResourceSpans: []resourceSpans{{
		Resource:   resource{Attributes: t.resource},
		ScopeSpans: []scopeSpans{{Scope: scope{Name: scopeName, Version: t.opts.Version}, Spans: spans}},
	}}}
}
