package main

import (
	"context"
	"fmt"
	"time"

	"github.com/airlockhq/airlock/pool"
	"github.com/airlockhq/airlock/result"
	"github.com/airlockhq/airlock/sandbox"
)

// poolBench times a warm claim → run /bin/true → result against a cold
// create → run → result, interleaved. Destroying the used sandbox is not
// timed in either (it happens after the result is in hand). Before each
// warm claim the pool is let refill, so every timed claim is a hit.
func poolBench(ctx context.Context, rt *sandbox.Runtime, lim sandbox.Limits, n int) error {
	spec := sandbox.Spec{Limits: lim}
	p := pool.New(rt, pool.Config{Name: "bench", Spec: spec, Warm: 2})
	defer p.Close(ctx)
	run := func(sb *sandbox.Sandbox) error {
		r := sb.Exec(ctx, sandbox.ExecRequest{Argv: []string{"/bin/true"}})
		if r.Outcome != result.Exited || r.ExitCode != 0 {
			return fmt.Errorf("run: %s %d %s", r.Outcome, r.ExitCode, r.Error)
		}
		return nil
	}
	warm := series{name: "warm claim → run /bin/true → result"}
	claim := series{name: "warm claim alone"}
	cold := series{name: "cold create → run /bin/true → result"}
	for i := 0; i < n+n/10; i++ {
		for p.Stats().Idle < 2 {
			time.Sleep(time.Millisecond)
		}
		t0 := time.Now()
		sb, hit, err := p.Claim(ctx)
		if err != nil {
			return err
		}
		t1 := time.Now()
		if err := run(sb); err != nil {
			return err
		}
		t2 := time.Now()
		if err := sb.Destroy(ctx); err != nil {
			return err
		}
		if !hit {
			return fmt.Errorf("claim %d missed the pool", i)
		}
		t3 := time.Now()
		sb, err = rt.Create(ctx, spec)
		if err != nil {
			return err
		}
		if err := run(sb); err != nil {
			return err
		}
		t4 := time.Now()
		if err := sb.Destroy(ctx); err != nil {
			return err
		}
		if i >= n/10 {
			warm.d = append(warm.d, t2.Sub(t0))
			claim.d = append(claim.d, t1.Sub(t0))
			cold.d = append(cold.d, t4.Sub(t3))
		}
	}
	fmt.Printf("## Warm pool (%d runs each, interleaved, in process)\n\n", n)
	fmt.Println("| step | p50 | p99 |\n| --- | --- | --- |")
	for _, s := range []*series{&claim, &warm, &cold} {
		fmt.Printf("| %s | %s | %s |\n", s.name, ms(s.pct(0.5)), ms(s.pct(0.99)))
	}
	fmt.Printf("\nWarm vs cold (p50): **%.1f×** faster (target: warm claim → result p50 ≤ 1.5 ms)\n\n", float64(cold.pct(0.5))/float64(warm.pct(0.5)))
	st := p.Stats()
	fmt.Printf("Pool after the run: %d hits, %d misses, %d created, %d create failures.\n\n", st.Hits, st.Misses, st.Created, st.CreateFailures)
	return nil
}
