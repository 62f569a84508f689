package pool

import (
	"fmt"
	"math"
	"time"
)

// DefaultIdle is how long an adaptive pool waits without a claim before it
// lets go of the sandboxes it holds above its minimum.
const DefaultIdle = time.Minute

// DefaultBuild is the time to make a sandbox an adaptive pool assumes
// before it has measured one.
const DefaultBuild = 50 * time.Millisecond

// demand estimates a pool's claim rate and the time its sandboxes take to
// build, and turns both into the number of sandboxes to keep ready. It is
// not safe for concurrent use; the pool guards it.
//
// The rate is kept twice, as counts that decay exponentially: a fast one
// (time constant idle/30, 2 s by default) that sees a burst within a few
// claims, and a slow one (idle/2) that holds the target through the gaps
// of bursty traffic, so that the pool grows at once and shrinks slowly.
// The larger of the two is the rate.
//
// Claims also come in batches (an agent that fans out, a client that
// opens several sandboxes at once), which a rate does not see: a batch
// of 8 needs 8 ready whatever the average. So the most claims seen
// within one build time is kept too, decaying as the slow rate does.
type demand struct {
	// idle is how long without a claim counts as silence.
	idle time.Duration
	// fast and slow are the decayed claim counts per second as of last.
	fast, slow float64
	// last is the time of the last claim; zero before the first.
	last time.Time
	// build is the measured time to build a sandbox (an exponential
	// average); 0 until the first is measured.
	build time.Duration
	// recent are the times of the last claims, a ring; next is where
	// the next goes.
	recent [maxBatch]time.Time
	next   int
	// batch is the most claims seen within one build time, as of
	// batchAt.
	batch   float64
	batchAt time.Time
}

// maxBatch bounds the batch a pool sees: past it, claims within one
// build time count as maxBatch (the pool's max is at most that anyway).
const maxBatch = 256

func (d *demand) taus() (fast, slow float64) {
	s := d.idle.Seconds()
	return s / 30, s / 2
}

// claim notes a claim at now.
func (d *demand) claim(now time.Time) {
	tf, ts := d.taus()
	if !d.last.IsZero() {
		dt := now.Sub(d.last).Seconds()
		if dt < 0 {
			dt = 0
		}
		d.fast *= math.Exp(-dt / tf)
		d.slow *= math.Exp(-dt / ts)
	}
	d.fast += 1 / tf
	d.slow += 1 / ts
	d.last = now
	d.recent[d.next] = now
	d.next = (d.next + 1) % maxBatch
	// The claims within one build time of this one, itself included.
	window := d.buildTime()
	n := 0
	for i := range maxBatch {
		t := d.recent[(d.next-1-i+maxBatch)%maxBatch]
		if t.IsZero() || now.Sub(t) > window {
			break
		}
		n++
	}
	if b := d.batchNow(now); float64(n) >= b {
		d.batch, d.batchAt = float64(n), now
	}
}

// batchNow is the largest batch, decayed to now.
func (d *demand) batchNow(now time.Time) float64 {
	if d.batchAt.IsZero() {
		return 0
	}
	_, ts := d.taus()
	return d.batch * math.Exp(-max(now.Sub(d.batchAt).Seconds(), 0)/ts)
}

// built notes that a sandbox took took to build.
func (d *demand) built(took time.Duration) {
	if d.build == 0 {
		d.build = took
		return
	}
	// An average over about the last five builds: a slow one (the host
	// busy) moves the target within a few, one outlier does not double it.
	d.build = (4*d.build + took) / 5
}

// rate is the claim rate at now, per second.
func (d *demand) rate(now time.Time) float64 {
	if d.last.IsZero() {
		return 0
	}
	tf, ts := d.taus()
	dt := max(now.Sub(d.last).Seconds(), 0)
	return max(d.fast*math.Exp(-dt/tf), d.slow*math.Exp(-dt/ts))
}

// buildTime is the measured build time, or DefaultBuild before any.
func (d *demand) buildTime() time.Duration {
	if d.build == 0 {
		return DefaultBuild
	}
	return d.build
}

// target is how many sandboxes to keep ready at now, between lo and hi,
// and why, in a sentence for /v1/pools and the console.
//
// It is the reorder point of inventory theory: the claims expected while
// one sandbox is built (rate × build time) plus a safety stock of two
// standard deviations of that count (claims arriving at random are
// Poisson, whose deviation is the square root of its mean), rounded up;
// at least 1 while claims come at all, for a sandbox kept ready costs
// about 1 MiB and spares a caller the cold start. After idle without a
// claim it is lo: the silence releases the rest.
func (d *demand) target(now time.Time, lo, hi int) (int, string) {
	var want int
	var why string
	switch {
	case d.last.IsZero():
		want, why = lo, "no claim yet"
	case now.Sub(d.last) >= d.idle:
		want, why = 0, fmt.Sprintf("no claim for %s", roundDur(now.Sub(d.last)))
	default:
		r, b := d.rate(now), d.buildTime()
		mean := r * b.Seconds()
		want = max(1, int(math.Ceil(mean+2*math.Sqrt(mean))))
		why = fmt.Sprintf("%.2f claims/s × %s to build = %.2f, with 2σ = %.2f", r, roundDur(b), mean, mean+2*math.Sqrt(mean))
		if batch := int(math.Round(d.batchNow(now))); batch > want {
			want = batch
			why += fmt.Sprintf("; batches of %d claims seen", batch)
		}
	}
	switch {
	case want < lo:
		return lo, why + fmt.Sprintf("; raised to min %d", lo)
	case want > hi:
		return hi, why + fmt.Sprintf("; held to max %d", hi)
	}
	return want, why
}

// roundDur rounds d for a person: milliseconds under a second, tenths of
// a second under a minute, seconds above.
func roundDur(d time.Duration) time.Duration {
	switch {
	case d < time.Second:
		return d.Round(time.Millisecond)
	case d < time.Minute:
		return d.Round(100 * time.Millisecond)
	}
	return d.Round(time.Second)
}
