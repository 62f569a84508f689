package pool

import (
	"strings"
	"testing"
	"time"
)

// claims notes n claims spread evenly over span, ending at end.
func claims(d *demand, end time.Time, n int, span time.Duration) {
	for i := range n {
		d.claim(end.Add(-span + span*time.Duration(i+1)/time.Duration(n)))
	}
}

func TestDemandTarget(t *testing.T) {
	t0 := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name     string
		setup    func(d *demand)
		at       time.Duration // after t0
		lo, hi   int
		want     int
		whyParts []string
	}{
		{"no claim yet keeps min", func(*demand) {}, 0, 2, 8, 2, []string{"no claim yet"}},
		{"one claim a second, quick builds, keeps one", func(d *demand) {
			claims(d, t0, 60, time.Minute)
			d.built(40 * time.Millisecond)
		}, 0, 0, 8, 1, []string{"claims/s", "40ms to build"}},
		// 50/s × 0.1 s = 5 expected during a build, 2σ = 4.5: 10.
		{"a steady 50/s with 100 ms builds", func(d *demand) {
			claims(d, t0, 3000, time.Minute)
			d.built(100 * time.Millisecond)
		}, 0, 0, 32, 10, nil},
		{"held to max", func(d *demand) {
			claims(d, t0, 3000, time.Minute)
			d.built(100 * time.Millisecond)
		}, 0, 0, 4, 4, []string{"held to max 4"}},
		{"raised to min", func(d *demand) {
			claims(d, t0, 60, time.Minute)
			d.built(40 * time.Millisecond)
		}, 0, 3, 8, 3, []string{"raised to min 3"}},
		// A burst of 100 in a second after a quiet minute: the fast rate
		// sees it at once.
		{"a burst raises it at once", func(d *demand) {
			claims(d, t0.Add(-time.Second), 10, time.Minute)
			claims(d, t0, 100, time.Second)
			d.built(100 * time.Millisecond)
		}, 0, 0, 64, 8, nil},
		// The same burst 10 s later: the slow rate still holds some, and
		// so does the batch seen (5 claims in 50 ms, the build time
		// assumed then), 5/e^(1/3).
		{"and it falls slowly", func(d *demand) {
			claims(d, t0.Add(-time.Second), 10, time.Minute)
			claims(d, t0, 100, time.Second)
			d.built(100 * time.Millisecond)
		}, 10 * time.Second, 0, 64, 4, []string{"batches of 4"}},
		{"silence releases to min", func(d *demand) {
			claims(d, t0, 3000, time.Minute)
			d.built(100 * time.Millisecond)
		}, time.Minute, 1, 32, 1, []string{"no claim for 1m0s", "raised to min 1"}},
		{"silence with min 0 releases all", func(d *demand) {
			claims(d, t0, 3000, time.Minute)
		}, 2 * time.Minute, 0, 32, 0, []string{"no claim for 2m0s"}},
		{"unmeasured builds assume the default", func(d *demand) {
			claims(d, t0, 600, time.Minute)
		}, 0, 0, 32, 2, []string{"50ms to build"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := demand{idle: DefaultIdle}
			tt.setup(&d)
			got, why := d.target(t0.Add(tt.at), tt.lo, tt.hi)
			if got != tt.want {
				t.Errorf("target = %d (%s), want %d", got, why, tt.want)
			}
			for _, p := range tt.whyParts {
				if !strings.Contains(why, p) {
					t.Errorf("why = %q, want it to say %q", why, p)
				}
			}
		})
	}
}

func TestDemandRateFollowsTheClaims(t *testing.T) {
	t0 := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	d := demand{idle: DefaultIdle}
	claims(&d, t0, 1200, time.Minute) // 20/s for a minute
	if r := d.rate(t0); r < 18 || r > 22 {
		t.Errorf("rate after a minute at 20/s = %.2f, want about 20", r)
	}
	// Half a minute of silence: the slow count (30 s) has fallen to 1/e.
	if r := d.rate(t0.Add(30 * time.Second)); r < 6 || r > 8.5 {
		t.Errorf("rate 30 s later = %.2f, want about 20/e", r)
	}
	d.built(100 * time.Millisecond)
	d.built(200 * time.Millisecond)
	if b := d.buildTime(); b != 120*time.Millisecond {
		t.Errorf("build = %s, want the average moved a fifth of the way: 120ms", b)
	}
}

// TestDemandBatches: claims that come together raise the target to the
// batch, whatever the rate, and the batch is forgotten slowly.
func TestDemandBatches(t *testing.T) {
	t0 := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	d := demand{idle: DefaultIdle}
	d.built(5 * time.Millisecond)
	// 8 at once, every 2 s, for a minute: 4 claims/s.
	for i := range 30 {
		at := t0.Add(-time.Minute + time.Duration(i)*2*time.Second)
		for j := range 8 {
			d.claim(at.Add(time.Duration(j) * 100 * time.Microsecond))
		}
	}
	end := t0.Add(-2 * time.Second)
	if got, why := d.target(end, 0, 16); got != 8 || !strings.Contains(why, "batches of 8") {
		t.Errorf("target after batches of 8 = %d (%s), want 8", got, why)
	}
	if got, _ := d.target(end, 0, 4); got != 4 {
		t.Errorf("held to max 4: %d", got)
	}
	// The same 4/s one at a time needs 1.
	var e demand
	e.idle = DefaultIdle
	e.built(5 * time.Millisecond)
	claims(&e, end, 240, time.Minute)
	if got, why := e.target(end, 0, 16); got != 1 {
		t.Errorf("target of single claims at 4/s = %d (%s), want 1", got, why)
	}
	// 30 s later (the slow time constant) the batch has fallen to 8/e.
	if got, _ := d.target(end.Add(30*time.Second), 0, 16); got != 3 {
		t.Errorf("target 30 s after the batches = %d, want 3", got)
	}
}
