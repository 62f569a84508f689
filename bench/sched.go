package main

import (
	"runtime/metrics"
	"time"
)

// schedCount is what the Go scheduler of this process did: goroutines
// started, goroutines made to run (each a hand-off the process paid for),
// and those that waited over schedLate to run.
type schedCount struct{ created, scheduled, late uint64 }

// schedSampled: the runtime times one scheduling in eight
// (gTrackingPeriod), so its histogram's counts are an eighth of them.
const schedSampled = 8

// schedLate is the wait to run past which a scheduling counts as late.
const schedLate = 50 * time.Microsecond

// readSched reads the process's scheduler counters.
func readSched() schedCount {
	s := []metrics.Sample{{Name: "/sched/goroutines-created:goroutines"}, {Name: "/sched/latencies:seconds"}}
	metrics.Read(s)
	var c schedCount
	if s[0].Value.Kind() == metrics.KindUint64 {
		c.created = s[0].Value.Uint64()
	}
	if s[1].Value.Kind() == metrics.KindFloat64Histogram {
		h := s[1].Value.Float64Histogram()
		for i, n := range h.Counts {
			c.scheduled += n * schedSampled
			// Buckets[i] is bucket i's lower bound.
			if h.Buckets[i] >= schedLate.Seconds() {
				c.late += n * schedSampled
			}
		}
	}
	return c
}

func (c schedCount) sub(o schedCount) schedCount {
	return schedCount{c.created - o.created, c.scheduled - o.scheduled, c.late - o.late}
}

func (c schedCount) add(o schedCount) schedCount {
	return schedCount{c.created + o.created, c.scheduled + o.scheduled, c.late + o.late}
}
