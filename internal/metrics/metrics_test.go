package metrics

import (
	"fmt"
	"strings"
	"testing"
)

func TestWrite(t *testing.T) {
	var r Registry
	runs := r.NewCounter("airlock_runs_total", "Runs answered,\nby tool.", "tool", "outcome")
	dur := r.NewHistogram("airlock_claim_seconds", "Claims.", []float64{0.01, 0.1}, "tool")
	plain := r.NewCounter("airlock_plain_total", "No labels.")
	runs.Inc("sh", "exited")
	runs.Inc("sh", "exited")
	runs.Add(3, `a"b\c`+"\nd", "limit")
	dur.Observe(0.005, "sh")
	dur.Observe(0.05, "sh")
	dur.Observe(7, "sh")
	plain.Inc()
	var b strings.Builder
	if err := r.Write(&b); err != nil {
		t.Fatal(err)
	}
	want := `# HELP airlock_runs_total Runs answered,\nby tool.
# TYPE airlock_runs_total counter
airlock_runs_total{tool="a\"b\\c\nd",outcome="limit"} 3
airlock_runs_total{tool="sh",outcome="exited"} 2
# HELP airlock_claim_seconds Claims.
# TYPE airlock_claim_seconds histogram
airlock_claim_seconds_bucket{tool="sh",le="0.01"} 1
airlock_claim_seconds_bucket{tool="sh",le="0.1"} 2
airlock_claim_seconds_bucket{tool="sh",le="+Inf"} 3
airlock_claim_seconds_sum{tool="sh"} 7.055
airlock_claim_seconds_count{tool="sh"} 3
# HELP airlock_plain_total No labels.
# TYPE airlock_plain_total counter
airlock_plain_total 1
`
	if got := b.String(); got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
	if v := runs.Value("sh", "exited"); v != 2 {
		t.Errorf("Value = %v, want 2", v)
	}
	if n := dur.Count("sh"); n != 3 {
		t.Errorf("Count = %d, want 3", n)
	}
}

// TestBounded: a caller that names a new label value each time grows a
// family to MaxSeries and no further; the rest count as "other"; long
// and invalid values are cut and mended.
func TestBounded(t *testing.T) {
	var r Registry
	c := r.NewCounter("x_total", "x", "service")
	for i := range MaxSeries + 100 {
		c.Inc(fmt.Sprint("s", i))
	}
	if n := len(c.f.series); n != MaxSeries+1 {
		t.Errorf("%d series, want %d (and one other)", n, MaxSeries+1)
	}
	if v := c.Value(Other); v != 100 {
		t.Errorf("other = %v, want 100", v)
	}
	var r2 Registry
	d := r2.NewCounter("y_total", "y", "a", "b")
	d.Inc(strings.Repeat("é", 100)+"\xff", "only one given")
	d.Inc("x", "y", "an extra one")
	var b strings.Builder
	r2.Write(&b)
	for _, line := range strings.Split(b.String(), "\n") {
		if strings.HasPrefix(line, "y_total{") && len(line) > 2*MaxValue+40 {
			t.Errorf("a long value was not cut: %q", line)
		}
	}
	if !strings.Contains(b.String(), `y_total{a="x",b="y"} 1`) {
		t.Errorf("an extra value was not dropped:\n%s", b.String())
	}
}

func TestRegisteredTwice(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("a name registered twice did not panic")
		}
	}()
	var r Registry
	r.NewCounter("z_total", "z")
	r.NewCounter("z_total", "z")
}
