// Package metrics keeps labelled counters and histograms and writes them
// in the Prometheus text format (version 0.0.4). Label values come from
// what airlock records, some of it named by callers or sandboxes, so
// every family holds a bounded number of series: past MaxSeries, new
// label sets are counted in one series whose labels all read "other",
// and a value longer than MaxValue is cut. No sandbox, session or run id
// is ever a label.
package metrics

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// Bounds on a family's series.
const (
	// MaxSeries bounds the label sets one family keeps.
	MaxSeries = 500
	// MaxValue bounds a label value's bytes.
	MaxValue = 96
	// Other is the value of every label of the overflow series.
	Other = "other"
)

// Registry holds families, written in the order they were made.
type Registry struct {
	mu       sync.Mutex // guards families
	families []*family
}

// family is one metric name's series.
type family struct {
	name, help, typ string
	labels          []string
	// buckets are a histogram's upper bounds, ascending.
	buckets []float64

	mu     sync.Mutex // guards series
	series map[string]*series
}

// series is one label set's values.
type series struct {
	values []string
	count  float64 // a counter's value; a histogram's observations
	sum    float64
	// bucketCounts[i] counts observations ≤ buckets[i] (not cumulative
	// until written).
	bucketCounts []uint64
}

func (r *Registry) add(f *family) *family {
	f.series = map[string]*series{}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, g := range r.families {
		if g.name == f.name {
			panic("metrics: " + f.name + " registered twice")
		}
	}
	r.families = append(r.families, f)
	return f
}

// Counter is a labelled counter.
type Counter struct{ f *family }

// NewCounter registers a counter named name (ending in _total) with
// those labels.
func (r *Registry) NewCounter(name, help string, labels ...string) *Counter {
	return &Counter{r.add(&family{name: name, help: help, typ: "counter", labels: labels})}
}

// Add adds v to the series of values (one per label, in order).
func (c *Counter) Add(v float64, values ...string) {
	c.f.mu.Lock()
	defer c.f.mu.Unlock()
	c.f.get(values).count += v
}

// Inc adds one.
func (c *Counter) Inc(values ...string) { c.Add(1, values...) }

// Value is the series' value (0 if it has none): for tests.
func (c *Counter) Value(values ...string) float64 {
	c.f.mu.Lock()
	defer c.f.mu.Unlock()
	if s := c.f.series[key(clean(values, len(c.f.labels)))]; s != nil {
		return s.count
	}
	return 0
}

// Histogram is a labelled histogram.
type Histogram struct{ f *family }

// DurationBuckets are upper bounds, in seconds, from a millisecond to
// five minutes: a claim's, a run's.
var DurationBuckets = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300}

// NewHistogram registers a histogram named name with those buckets
// (ascending upper bounds) and labels.
func (r *Registry) NewHistogram(name, help string, buckets []float64, labels ...string) *Histogram {
	if !slices.IsSorted(buckets) {
		panic("metrics: " + name + ": buckets not ascending")
	}
	return &Histogram{r.add(&family{name: name, help: help, typ: "histogram", labels: labels, buckets: slices.Clone(buckets)})}
}

// Observe records v in the series of values.
func (h *Histogram) Observe(v float64, values ...string) {
	if math.IsNaN(v) {
		return
	}
	h.f.mu.Lock()
	defer h.f.mu.Unlock()
	s := h.f.get(values)
	s.count++
	s.sum += v
	if i, _ := slices.BinarySearch(h.f.buckets, v); i < len(h.f.buckets) {
		s.bucketCounts[i]++
	}
}

// Count is the series' observations: for tests.
func (h *Histogram) Count(values ...string) uint64 {
	h.f.mu.Lock()
	defer h.f.mu.Unlock()
	if s := h.f.series[key(clean(values, len(h.f.labels)))]; s != nil {
		return uint64(s.count)
	}
	return 0
}

// get returns the series of values, made if need be; f.mu is held.
func (f *family) get(values []string) *series {
	values = clean(values, len(f.labels))
	k := key(values)
	if s := f.series[k]; s != nil {
		return s
	}
	if len(f.series) >= MaxSeries {
		values = make([]string, len(f.labels))
		for i := range values {
			values[i] = Other
		}
		k = key(values)
		if s := f.series[k]; s != nil {
			return s
		}
	}
	s := &series{values: values}
	if f.typ == "histogram" {
		s.bucketCounts = make([]uint64, len(f.buckets))
	}
	f.series[k] = s
	return s
}

// clean gives exactly n values, each at most MaxValue bytes and valid
// UTF-8.
func clean(values []string, n int) []string {
	out := make([]string, n)
	for i := range out {
		if i < len(values) {
			out[i] = strings.ToValidUTF8(values[i], "?")
		}
		if len(out[i]) > MaxValue {
			out[i] = strings.ToValidUTF8(out[i][:MaxValue], "")
		}
	}
	return out
}

func key(values []string) string { return strings.Join(values, "\x00") }

// Write writes every family in the text format.
func (r *Registry) Write(w io.Writer) error {
	r.mu.Lock()
	fams := slices.Clone(r.families)
	r.mu.Unlock()
	var b strings.Builder
	for _, f := range fams {
		f.write(&b)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func (f *family) write(b *strings.Builder) {
	fmt.Fprintf(b, "# HELP %s %s\n# TYPE %s %s\n", f.name, escapeHelp(f.help), f.name, f.typ)
	f.mu.Lock()
	defer f.mu.Unlock()
	keys := make([]string, 0, len(f.series))
	for k := range f.series {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		s := f.series[k]
		if f.typ == "counter" {
			fmt.Fprintf(b, "%s%s %s\n", f.name, labelSet(f.labels, s.values, "", ""), num(s.count))
			continue
		}
		var cum uint64
		for i, ub := range f.buckets {
			cum += s.bucketCounts[i]
			fmt.Fprintf(b, "%s_bucket%s %d\n", f.name, labelSet(f.labels, s.values, "le", num(ub)), cum)
		}
		fmt.Fprintf(b, "%s_bucket%s %s\n", f.name, labelSet(f.labels, s.values, "le", "+Inf"), num(s.count))
		fmt.Fprintf(b, "%s_sum%s %s\n", f.name, labelSet(f.labels, s.values, "", ""), num(s.sum))
		fmt.Fprintf(b, "%s_count%s %s\n", f.name, labelSet(f.labels, s.values, "", ""), num(s.count))
	}
}

// labelSet is {a="x",b="y"} (with extra=extraValue last, when set), or
// nothing without labels.
func labelSet(names, values []string, extra, extraValue string) string {
	if len(names) == 0 && extra == "" {
		return ""
	}
	var b strings.Builder
	b.WriteByte('{')
	for i, n := range names {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(n)
		b.WriteString(`="`)
		b.WriteString(escapeValue(values[i]))
		b.WriteByte('"')
	}
	if extra != "" {
		if len(names) > 0 {
			b.WriteByte(',')
		}
		b.WriteString(extra)
		b.WriteString(`="`)
		b.WriteString(extraValue)
		b.WriteByte('"')
	}
	b.WriteByte('}')
	return b.String()
}

// escapeValue escapes a label value: backslash, double quote and line
// feed, as the format asks.
func escapeValue(s string) string {
	return strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`).Replace(s)
}

// escapeHelp escapes a help text: backslash and line feed.
func escapeHelp(s string) string {
	return strings.NewReplacer(`\`, `\\`, "\n", `\n`).Replace(s)
}

func num(v float64) string {
	switch {
	case math.IsInf(v, 1):
		return "+Inf"
	case v == math.Trunc(v) && math.Abs(v) < 1e15:
		return strconv.FormatInt(int64(v), 10)
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}
