// Package tracing records spans of what the daemon does (a run's claim,
// bind, exec and destroy, and the egress and broker decisions under it)
// and sends them to an OpenTelemetry collector over OTLP/HTTP, encoded as
// JSON (the protocol's own JSON mapping: no protobuf or SDK dependency).
//
// Tracing is off by default: a nil *Tracer records nothing, and a nil
// *Span's methods do nothing, so callers never check. Spans are queued
// as they end and sent in batches by one goroutine; a queue that is full
// (a collector that is down or slow) drops spans and counts them, and
// never slows what is traced.
package tracing

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"sync"
	"time"
)

// TraceID and SpanID are OpenTelemetry's identifiers.
type (
	TraceID [16]byte
	SpanID  [8]byte
)

// IsValid reports whether the id is not all zeros.
func (t TraceID) IsValid() bool { return t != TraceID{} }

// IsValid reports whether the id is not all zeros.
func (s SpanID) IsValid() bool { return s != SpanID{} }

func (t TraceID) String() string { return hex.EncodeToString(t[:]) }
func (s SpanID) String() string  { return hex.EncodeToString(s[:]) }

// Context is a span's place in a trace: what a child names as its parent.
type Context struct {
	Trace TraceID
	Span  SpanID
}

// IsValid reports whether c names a span.
func (c Context) IsValid() bool { return c.Trace.IsValid() && c.Span.IsValid() }

// Kind is a span's OpenTelemetry kind.
type Kind int

// The kinds airlock uses (the protocol's numbers).
const (
	Internal Kind = 1
	Server   Kind = 2
)

// Attr is one attribute: a string, an integer or a boolean.
type Attr struct {
	Key  string
	str  string
	num  int64
	kind uint8
}

const (
	attrString = iota
	attrInt
	attrBool
)

// String is a string attribute.
func String(k, v string) Attr { return Attr{Key: k, str: v} }

// Int is an integer attribute.
func Int(k string, v int64) Attr { return Attr{Key: k, num: v, kind: attrInt} }

// Bool is a boolean attribute.
func Bool(k string, v bool) Attr {
	a := Attr{Key: k, kind: attrBool}
	if v {
		a.num = 1
	}
	return a
}

// Bounds on what one span holds, whatever a caller gives it: attribute
// values come partly from sandboxes (a destination's name, an error).
const (
	maxAttrs    = 32
	maxValueLen = 512
)

// Span is one timed operation. Its methods are safe on a nil *Span (not
// traced) and, once End is called, do nothing more.
type Span struct {
	t      *Tracer
	ctx    Context
	parent SpanID
	name   string
	kind   Kind

	mu     sync.Mutex // guards what follows
	start  time.Time
	end    time.Time
	attrs  []Attr
	failed string
	ended  bool
}

// Start begins a span named name under parent; an invalid parent (none)
// begins a new trace. On a nil Tracer it returns nil.
func (t *Tracer) Start(parent Context, name string, kind Kind, attrs ...Attr) *Span {
	if t == nil {
		return nil
	}
	s := &Span{t: t, name: name, kind: kind, start: time.Now()}
	if parent.IsValid() {
		s.ctx.Trace, s.parent = parent.Trace, parent.Span
	} else {
		s.ctx.Trace = newTraceID()
	}
	s.ctx.Span = newSpanID()
	s.Set(attrs...)
	return s
}

// Record sends a span that is already over, from start to end, under
// parent (an egress or broker decision, known once it is recorded). On a
// nil Tracer it does nothing.
func (t *Tracer) Record(parent Context, name string, start, end time.Time, failed string, attrs ...Attr) {
	if t == nil {
		return
	}
	s := t.Start(parent, name, Internal, attrs...)
	s.start = start
	if failed != "" {
		s.Fail(failed)
	}
	s.EndAt(end)
}

// Context is the span's place, for its children; the zero Context on a
// nil Span.
func (s *Span) Context() Context {
	if s == nil {
		return Context{}
	}
	return s.ctx
}

// Set adds attributes (past a bound, they are dropped).
func (s *Span) Set(attrs ...Attr) {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended {
		return
	}
	for _, a := range attrs {
		if len(s.attrs) == maxAttrs {
			return
		}
		if len(a.str) > maxValueLen {
			a.str = a.str[:maxValueLen]
		}
		s.attrs = append(s.attrs, a)
	}
}

// Fail marks the span's operation as failed, with why.
func (s *Span) Fail(msg string) {
	if s == nil {
		return
	}
	if msg == "" {
		msg = "failed"
	}
	if len(msg) > maxValueLen {
		msg = msg[:maxValueLen]
	}
	s.mu.Lock()
	if !s.ended {
		s.failed = msg
	}
	s.mu.Unlock()
}

// End ends the span now and queues it to be sent.
func (s *Span) End() { s.EndAt(time.Now()) }

// EndAt ends the span at end (no earlier than its start) and queues it.
// Only the first End counts.
func (s *Span) EndAt(end time.Time) {
	if s == nil {
		return
	}
	s.mu.Lock()
	if s.ended {
		s.mu.Unlock()
		return
	}
	s.ended = true
	if end.Before(s.start) {
		end = s.start
	}
	s.end = end
	s.mu.Unlock()
	s.t.queue(s)
}

func newTraceID() (id TraceID) {
	for !id.IsValid() {
		rand.Read(id[:])
	}
	return id
}

func newSpanID() (id SpanID) {
	for !id.IsValid() {
		rand.Read(id[:])
	}
	return id
}

// ParseTraceparent reads a W3C traceparent header ("00-TRACE-SPAN-FLAGS"),
// so that a caller's trace holds what airlock does for it. Anything else
// (absent, malformed, an all-zero id) is the zero Context: a trace of
// airlock's own.
func ParseTraceparent(h string) Context {
	// version 00 is exactly 55 bytes; a later version may append fields.
	if len(h) < 55 || h[2] != '-' || h[35] != '-' || h[52] != '-' || (len(h) > 55 && h[55] != '-') {
		return Context{}
	}
	ver, err := hex.DecodeString(h[0:2])
	if err != nil || ver[0] == 0xff || (ver[0] == 0 && len(h) != 55) {
		return Context{}
	}
	var c Context
	if _, err := hex.Decode(c.Trace[:], []byte(h[3:35])); err != nil {
		return Context{}
	}
	if _, err := hex.Decode(c.Span[:], []byte(h[36:52])); err != nil {
		return Context{}
	}
	if _, err := hex.DecodeString(h[53:55]); err != nil {
		return Context{}
	}
	for _, b := range h[:55] {
		if b >= 'A' && b <= 'F' {
			return Context{} // the header's hex is lower case
		}
	}
	if !c.IsValid() {
		return Context{}
	}
	return c
}

type parentKey struct{}

// WithParent is ctx carrying a caller's span (its traceparent), under
// which what airlock does for the call is traced.
func WithParent(ctx context.Context, c Context) context.Context {
	if !c.IsValid() {
		return ctx
	}
	return context.WithValue(ctx, parentKey{}, c)
}

// ParentOf is the caller's span ctx carries; the zero Context if none.
func ParentOf(ctx context.Context) Context {
	c, _ := ctx.Value(parentKey{}).(Context)
	return c
}
