package main

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/airlockhq/airlock/pool"
	"github.com/airlockhq/airlock/result"
	"github.com/airlockhq/airlock/sandbox"
)

// loadPhase is one stretch of the adaptive pool's load: claims offered at
// rate per second (0 for silence), batch at a time, for how long.
type loadPhase struct {
	name  string
	rate  int
	batch int
	for_  time.Duration
}

// loadSecond is what one second of a load pattern saw.
type loadSecond struct {
	phase        string
	offered      int
	hits, misses int64
	target       int
	held         int // ready sandboxes at the second's end
	rate         float64
	build        time.Duration
	released     int64
	reason       string
}

// adaptiveBench offers the same changing claim rate (steady, a burst,
// steady, silence) to an adaptive pool (pool: {min: 0, max: 16}) and to a
// fixed one (warm: 2), each claim a run of /bin/true in its own goroutine
// (an open loop: claims come at the rate whether or not the last ones
// are done), and prints, second by second, the target, what was ready,
// hits and misses, and the sandboxes the adaptive pool released in the
// silence; then each pattern's totals: miss rate, claim latency, and the
// sandbox-seconds held idle.
func adaptiveBench(ctx context.Context, rt *sandbox.Runtime, lim sandbox.Limits, idle time.Duration) error {
	phases := []loadPhase{
		{"steady", 20, 1, 10 * time.Second},
		{"burst", 80, 8, 5 * time.Second},
		{"steady", 20, 1, 5 * time.Second},
		{"silence", 0, 0, idle + 5*time.Second},
	}
	spec := sandbox.Spec{Limits: lim}
	type outcome struct {
		name    string
		seconds []loadSecond
		claims  series
		heldSec float64
	}
	var outs []outcome
	for _, cfg := range []pool.Config{
		{Name: "adaptive", Spec: spec, Max: 16, Idle: idle},
		{Name: "fixed", Spec: spec, Warm: 2},
	} {
		p := pool.New(rt, cfg)
		// The fixed pool starts full, as a daemon's does; the adaptive
		// one starts empty (min 0) and learns.
		for cfg.Warm > 0 && p.Stats().Idle < cfg.Warm {
			time.Sleep(time.Millisecond)
		}
		secs, claims, err := offer(ctx, p, phases)
		p.Close(ctx)
		if err != nil {
			return err
		}
		held := 0.0
		for _, s := range secs {
			held += float64(s.held)
		}
		outs = append(outs, outcome{cfg.Name, secs, claims, held})
	}
	fmt.Printf("## Adaptive warm pool under a changing load\n\n")
	fmt.Printf("Claims offered open-loop, each claim → run `/bin/true` → destroy in its own goroutine: %s. ", describePhases(phases))
	fmt.Printf("The adaptive pool is `pool: {min: 0, max: 16, idle: %s}`, the fixed one `pool: {warm: 2}`; the same load in turn, in the benchmark's process.\n\n", idle)
	a := outs[0]
	fmt.Println("| second | phase | offered/s | hits | misses | target | ready | claim rate seen | build | released | why |")
	fmt.Println("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
	for i, s := range a.seconds {
		fmt.Printf("| %d | %s | %d | %d | %d | %d | %d | %.1f/s | %s | %d | %s |\n", i+1, s.phase, s.offered, s.hits, s.misses, s.target, s.held, s.rate, ms(s.build), s.released, strings.ReplaceAll(s.reason, "|", "/"))
	}
	fmt.Println()
	fmt.Println("| pool | claims | miss rate | miss rate, steady | miss rate, burst | claim p50 | claim p99 | ready sandbox-seconds held | in the silence |")
	fmt.Println("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
	for _, o := range outs {
		var h, m, sh, sm, bh, bm int64
		silent := 0.0
		for _, s := range o.seconds {
			h, m = h+s.hits, m+s.misses
			switch s.phase {
			case "steady":
				sh, sm = sh+s.hits, sm+s.misses
			case "burst":
				bh, bm = bh+s.hits, bm+s.misses
			case "silence":
				silent += float64(s.held)
			}
		}
		fmt.Printf("| %s | %d | %s | %s | %s | %s | %s | %.0f | %.0f |\n", o.name, h+m, pct(m, h+m), pct(sm, sh+sm), pct(bm, bh+bm), ms(o.claims.pct(0.5)), ms(o.claims.pct(0.99)), o.heldSec, silent)
	}
	fmt.Println()
	return nil
}

func pct(a, b int64) string {
	if b == 0 {
		return "–"
	}
	return fmt.Sprintf("%.0f %%", 100*float64(a)/float64(b))
}

func describePhases(ps []loadPhase) string {
	var parts []string
	for _, p := range ps {
		if p.rate == 0 {
			parts = append(parts, fmt.Sprintf("silence %s", p.for_))
			continue
		}
		b := ""
		if p.batch > 1 {
			b = fmt.Sprintf(" in batches of %d", p.batch)
		}
		parts = append(parts, fmt.Sprintf("%s %d/s%s for %s", p.name, p.rate, b, p.for_))
	}
	return strings.Join(parts, ", ")
}

// offer runs the load phases against p and samples its stats every
// second.
func offer(ctx context.Context, p *pool.Pool, phases []loadPhase) ([]loadSecond, series, error) {
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex // guards claims and firstErr
		claims   series
		firstErr error
		inFlight atomic.Int64
	)
	use := func() {
		defer wg.Done()
		defer inFlight.Add(-1)
		t0 := time.Now()
		sb, _, err := p.Claim(ctx)
		took := time.Since(t0)
		if err == nil {
			r := sb.Exec(ctx, sandbox.ExecRequest{Argv: []string{"/bin/true"}})
			if r.Outcome != result.Exited || r.ExitCode != 0 {
				err = fmt.Errorf("run: %s %d %s", r.Outcome, r.ExitCode, r.Error)
			}
			if derr := sb.Destroy(ctx); err == nil {
				err = derr
			}
		}
		mu.Lock()
		claims.d = append(claims.d, took)
		if err != nil && firstErr == nil {
			firstErr = err
		}
		mu.Unlock()
	}
	var secs []loadSecond
	prev := p.Stats()
	for _, ph := range phases {
		end := time.Now().Add(ph.for_)
		for time.Now().Before(end) {
			second := time.Now().Add(time.Second)
			if ph.rate > 0 {
				every := time.Second * time.Duration(ph.batch) / time.Duration(ph.rate)
				next := time.Now()
				for i := 0; i < ph.rate; i++ {
					if i%ph.batch != 0 {
						inFlight.Add(1)
						wg.Add(1)
						go use()
						continue
					}
					if d := time.Until(next); d > 0 {
						time.Sleep(d)
					}
					// An overloaded host must not pile up goroutines
					// without bound: past 64 in flight the offer waits.
					for inFlight.Load() >= 64 {
						time.Sleep(time.Millisecond)
					}
					inFlight.Add(1)
					wg.Add(1)
					go use()
					next = next.Add(every)
				}
			}
			if d := time.Until(second); d > 0 {
				time.Sleep(d)
			}
			st := p.Stats()
			secs = append(secs, loadSecond{
				phase: ph.name, offered: ph.rate,
				hits: st.Hits - prev.Hits, misses: st.Misses - prev.Misses,
				target: st.Warm, held: st.Idle, rate: st.ClaimRate,
				build: time.Duration(st.BuildNanos), released: st.Released - prev.Released,
				reason: st.Reason,
			})
			prev = st
		}
	}
	wg.Wait()
	return secs, claims, firstErr
}
