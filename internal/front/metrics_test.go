package front

import (
	"strings"
	"testing"
)

func TestMergeMetrics(t *testing.T) {
	a := `# HELP airlock_runs_total Runs answered.
# TYPE airlock_runs_total counter
airlock_runs_total 3
# HELP airlock_run_duration_seconds Wall time.
# TYPE airlock_run_duration_seconds histogram
airlock_run_duration_seconds_bucket{tool="sh",outcome="exited",le="0.1"} 2
airlock_run_duration_seconds_sum{tool="sh",outcome="exited"} 0.05
airlock_run_duration_seconds_count{tool="sh",outcome="exited"} 2
# TYPE airlock_odd gauge
airlock_odd{} 1
`
	b := `# HELP airlock_runs_total Runs answered (b's words).
# TYPE airlock_runs_total counter
airlock_runs_total 5
# HELP airlock_only_b A family a has not.
# TYPE airlock_only_b gauge
airlock_only_b 7 1700000000000
`
	var m merged
	if err := m.add(strings.NewReader(a), "node-a"); err != nil {
		t.Fatal(err)
	}
	if err := m.add(strings.NewReader(b), `no"de-b`); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	m.write(&out)
	want := `# HELP airlock_runs_total Runs answered.
# TYPE airlock_runs_total counter
airlock_runs_total{node="node-a"} 3
airlock_runs_total{node="no\"de-b"} 5
# HELP airlock_run_duration_seconds Wall time.
# TYPE airlock_run_duration_seconds histogram
airlock_run_duration_seconds_bucket{node="node-a",tool="sh",outcome="exited",le="0.1"} 2
airlock_run_duration_seconds_sum{node="node-a",tool="sh",outcome="exited"} 0.05
airlock_run_duration_seconds_count{node="node-a",tool="sh",outcome="exited"} 2
# TYPE airlock_odd gauge
airlock_odd{node="node-a"} 1
# HELP airlock_only_b A family a has not.
# TYPE airlock_only_b gauge
airlock_only_b{node="no\"de-b"} 7 1700000000000
`
	if out.String() != want {
		t.Errorf("merged:\n%s\nwant:\n%s", out.String(), want)
	}
	for _, bad := range []string{"{x} 1\n", "novalue\n"} {
		var m merged
		if err := m.add(strings.NewReader(bad), "n"); err == nil {
			t.Errorf("%q was taken", bad)
		}
	}
}

func FuzzMergeMetrics(f *testing.F) {
	f.Add("# TYPE a counter\na{b=\"c\"} 1\na 2\n")
	f.Fuzz(func(t *testing.T, text string) {
		var m merged
		if m.add(strings.NewReader(text), "n") != nil {
			return
		}
		var out strings.Builder
		m.write(&out)
		for _, f := range m.fams {
			for _, s := range f.samples {
				if !strings.Contains(s, `{node="n"`) {
					t.Errorf("sample %q lacks its node", s)
				}
			}
		}
	})
}
