// Package pool keeps fresh sandboxes of one profile warm, so that a run
// claims one instead of waiting for it to be built. A sandbox is handed out
// once and never comes back: the caller destroys it after use, and the
// pool builds a replacement in the background (reset by replacement, never
// by cleanup). The pool knows nothing of policy: the daemon binds a
// tool's egress gateway while the pool builds each sandbox (through the
// Spec's OnStart) and sets what differs per caller, the recording of its
// decisions, at the claim; a tool's broker is attached at the claim.
package pool

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/sandbox"
)

// ErrClosed is returned by Claim once the pool is closing. It belongs to
// errdefs.ErrUnavailable.
var ErrClosed = errdefs.New(errdefs.ErrUnavailable, "pool: closed")

// Creator builds sandboxes; *sandbox.Runtime is one. Start is Create
// without the wait for init to be ready (see sandbox.Runtime.Start).
type Creator interface {
	Create(ctx context.Context, spec sandbox.Spec) (*sandbox.Sandbox, error)
	Start(ctx context.Context, spec sandbox.Spec) (*sandbox.Sandbox, error)
}

// Config describes one pool.
type Config struct {
	// Name is the profile's name, for stats and logs.
	Name string
	// Spec is what every sandbox of the pool is built from.
	Spec sandbox.Spec
	// Warm is how many sandboxes are kept ready. 0 keeps none: every
	// claim creates one. It is ignored when Max is set.
	Warm int
	// Min and Max, when Max is set, make the pool size itself: it keeps
	// ready what the observed claim rate needs over the measured time to
	// build a sandbox (see demand.target), never fewer than Min nor more
	// than Max.
	Min, Max int
	// Idle is how long an adaptive pool goes without a claim before it
	// releases what it holds above Min; it also sets how fast the pool
	// forgets a rate (see demand). 0 means DefaultIdle.
	Idle time.Duration
	// RetryMin and RetryMax bound the pause after a failed create
	// (doubling from min to max); 0 means 100ms and 30s.
	RetryMin, RetryMax time.Duration
	// Logger receives the pool's diagnostics; nil discards them.
	Logger *slog.Logger
	// YieldMax bounds how long a refill waits for the run it would
	// otherwise slow down (see replenish); 0 means 50ms.
	YieldMax time.Duration
	// Prepare, when set, readies each sandbox the refill builds before
	// it is put in the pool (a code interpreter's kernel started ahead
	// of demand): what a claim then finds warm. A sandbox it fails for
	// is destroyed, counted as a failed create. Claims that miss never
	// wait for it.
	Prepare func(ctx context.Context, sb *sandbox.Sandbox) error
}

// Stats are a pool's counters since it was made. The daemon serves them
// as api.PoolStats.
type Stats struct {
	Name string
	// Warm is the target; Idle how many are ready now.
	Warm int
	Idle int
	// Min and Max bound an adaptive pool's target; both 0 for a fixed
	// one (pool.warm).
	Min, Max int
	// ClaimRate is the claims per second an adaptive pool sizes itself
	// for, and BuildNanos the time it measured to build a sandbox.
	ClaimRate  float64
	BuildNanos int64
	// Reason says why the target is what it is.
	Reason string
	// Hits were claims served warm, Misses claims that created a sandbox
	// on the spot.
	Hits   int64
	Misses int64
	// Created counts sandboxes the replenisher built; CreateFailures its
	// failed attempts.
	Created        int64
	CreateFailures int64
	// Discarded counts ready sandboxes found dead and destroyed unused.
	Discarded int64
	// Evicted counts ready sandboxes destroyed unused to make room for a
	// claim of another pool when the node was at capacity.
	Evicted int64
	// Released counts ready sandboxes an adaptive pool destroyed unused
	// because demand fell below what it held.
	Released int64
	// AtCapacity says the last refill was refused because the node's
	// budget was spent: the pool is below its target until room frees.
	AtCapacity bool
	// ClaimNanos is the total time claims took (hits and misses).
	ClaimNanos int64
}

// Pool keeps sandboxes of one profile warm. Its methods are safe for
// concurrent use.
type Pool struct {
	cfg    Config
	rt     Creator
	ctx    context.Context // ends at Close
	cancel context.CancelFunc
	done   chan struct{} // closed when the replenisher has stopped
	wake   chan struct{}

	hits, misses, created, failures, discarded, claimNanos atomic.Int64
	evicted, released                                      atomic.Int64
	// short says the last refill was refused for the node's capacity.
	short atomic.Bool
	// building says the refill is making a sandbox now, and builds
	// counts the builds it has ended (Building).
	building atomic.Bool
	builds   atomic.Uint64

	// mu guards idle, closed, last and demand.
	mu     sync.Mutex
	idle   []*sandbox.Sandbox // oldest first
	closed bool
	demand demand
	// last is the sandbox most recently handed out warm, while it may
	// still be running.
	last *sandbox.Sandbox
}

// New starts a pool that fills itself to cfg.Warm in the background.
func New(rt Creator, cfg Config) *Pool {
	if cfg.RetryMin <= 0 {
		cfg.RetryMin = 100 * time.Millisecond
	}
	if cfg.RetryMax < cfg.RetryMin {
		cfg.RetryMax = max(30*time.Second, cfg.RetryMin)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.YieldMax <= 0 {
		cfg.YieldMax = 50 * time.Millisecond
	}
	if cfg.Idle <= 0 {
		cfg.Idle = DefaultIdle
	}
	cfg.Min = min(max(cfg.Min, 0), cfg.Max)
	p := &Pool{cfg: cfg, rt: rt, done: make(chan struct{}), wake: make(chan struct{}, 1)}
	p.demand.idle = cfg.Idle
	p.ctx, p.cancel = context.WithCancel(context.Background())
	go p.replenish()
	return p
}

// Claim hands out a sandbox for one use. It is warm (hit) when the pool
// had one ready, else created now (a miss). The caller owns it and must
// Destroy it; it never returns to the pool.
func (p *Pool) Claim(ctx context.Context) (sb *sandbox.Sandbox, warm bool, err error) {
	return p.claim(ctx, false)
}

// ClaimStarted is Claim for a caller that runs one command at once and
// then destroys the sandbox: a miss is started (sandbox.Runtime.Start),
// not created, and made for one command (sandbox.Spec.OneCommand), so
// the command goes to init while it sets the sandbox up (under gVisor it
// is the container's process), and a setup that fails is the command's
// error. A warm sandbox is ready, as from Claim.
func (p *Pool) ClaimStarted(ctx context.Context) (sb *sandbox.Sandbox, warm bool, err error) {
	return p.claim(ctx, true)
}

func (p *Pool) claim(ctx context.Context, started bool) (sb *sandbox.Sandbox, warm bool, err error) {
	start := time.Now()
	defer func() { p.claimNanos.Add(int64(time.Since(start))) }()
	p.mu.Lock()
	p.demand.claim(start)
	p.mu.Unlock()
	for {
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			return nil, false, ErrClosed
		}
		if len(p.idle) == 0 {
			p.mu.Unlock()
			break
		}
		sb = p.idle[0]
		p.idle = p.idle[1:]
		p.last = sb
		p.mu.Unlock()
		p.kick()
		if alive(sb) {
			p.hits.Add(1)
			return sb, true, nil
		}
		p.discard(sb)
	}
	p.misses.Add(1)
	p.kick()
	if started {
		spec := p.cfg.Spec
		spec.OneCommand = true
		sb, err = p.rt.Start(ctx, spec)
	} else {
		sb, err = p.rt.Create(ctx, p.cfg.Spec)
	}
	if err != nil {
		return nil, false, fmt.Errorf("pool %s: create: %w", p.cfg.Name, err)
	}
	return sb, false, nil
}

// alive reports whether sb's init is still there to run commands.
func alive(sb *sandbox.Sandbox) bool {
	select {
	case <-sb.Done():
		return false
	default:
		return true
	}
}

// discard destroys a ready sandbox that died unused.
func (p *Pool) discard(sb *sandbox.Sandbox) {
	p.discarded.Add(1)
	if err := sb.Destroy(context.Background()); err != nil {
		p.cfg.Logger.Warn("pool: destroy dead sandbox", "pool", p.cfg.Name, "sandbox", sb.ID(), "err", err)
	}
}

// kick wakes the replenisher.
func (p *Pool) kick() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// replenish keeps the pool at its target until Close. Sandboxes are built
// one at a time, which bounds the CPU a refill takes from running work;
// failures back off so a broken host is not hammered. An adaptive pool
// releases one ready sandbox above its target each tick.
func (p *Pool) replenish() {
	defer close(p.done)
	retry := p.cfg.RetryMin
	tick := time.Second
	if p.adaptive() {
		// Often enough that a target that decays is followed within
		// a twentieth of the idle time.
		tick = min(tick, max(p.cfg.Idle/20, 10*time.Millisecond))
	}
	check := time.NewTicker(tick)
	defer check.Stop()
	var released time.Time
	for {
		p.dropDead()
		// At most one a tick, however often claims wake the loop.
		if time.Since(released) >= tick && p.release() {
			released = time.Now()
		}
		if p.need() {
			p.yield()
			began := time.Now()
			p.building.Store(true)
			sb, err := p.rt.Create(p.ctx, p.cfg.Spec)
			if err == nil {
				// A pool's sandboxes wait idle for their first
				// command: Prewarm readies a gVisor one for it.
				if err = sb.Prewarm(p.ctx); err != nil {
					p.destroy(sb)
				}
			}
			if err == nil && p.cfg.Prepare != nil {
				if err = p.cfg.Prepare(p.ctx, sb); err != nil {
					p.destroy(sb)
					err = fmt.Errorf("prepare: %w", err)
				}
			}
			if err != nil {
				p.builds.Add(1)
				p.building.Store(false)
				if p.ctx.Err() != nil {
					return
				}
				if errors.Is(err, sandbox.ErrCapacity) {
					// The node's budget is spent, by work or by other
					// pools: no failure, and no retry until something
					// may have been freed (a claim, or the next tick).
					p.short.Store(true)
					select {
					case <-p.wake:
					case <-check.C:
					case <-p.ctx.Done():
						return
					}
					continue
				}
				p.short.Store(false)
				p.failures.Add(1)
				p.cfg.Logger.Warn("pool: create failed", "pool", p.cfg.Name, "err", err, "retry_in", retry)
				select {
				case <-time.After(retry):
				case <-p.ctx.Done():
					return
				}
				retry = min(2*retry, p.cfg.RetryMax)
				continue
			}
			retry = p.cfg.RetryMin
			p.short.Store(false)
			p.created.Add(1)
			p.mu.Lock()
			p.demand.built(time.Since(began))
			p.mu.Unlock()
			ok := p.put(sb)
			// Ready (or gone) before it says so: a claim elsewhere that
			// waited for the build finds it to evict.
			p.builds.Add(1)
			p.building.Store(false)
			if !ok {
				p.destroy(sb)
				return
			}
			continue
		}
		select {
		case <-p.wake:
		case <-check.C:
		case <-p.ctx.Done():
			return
		}
	}
}

// yield waits, at most YieldMax, for the sandbox last handed out to be
// destroyed, when the pool still holds at least half its target. Building
// a sandbox is several milliseconds of CPU across a few processes; on a
// small machine it would slow the very run the pool just served warm,
// which is the latency the pool exists to hide. That run ends with its
// answer, which its caller sends before the destroy, not with its
// command (init is gone then already). Below half the target the
// refill starts at once, so a burst of claims still finds sandboxes ready.
func (p *Pool) yield() {
	var t *time.Timer
	for {
		p.mu.Lock()
		last := p.last
		target, _ := p.target(time.Now())
		half := len(p.idle) >= (target+1)/2 && len(p.idle) > 0
		p.mu.Unlock()
		if last == nil || !half || !alive(last) {
			return
		}
		if t == nil {
			t = time.NewTimer(p.cfg.YieldMax)
			defer t.Stop()
		}
		select {
		case <-last.Destroyed():
			return
		case <-t.C:
			return
		case <-p.ctx.Done():
			return
		case <-p.wake:
			// Another claim: look again (the pool may now be below
			// half, or the last claimed another sandbox).
		}
	}
}

func (p *Pool) need() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	target, _ := p.target(time.Now())
	return !p.closed && len(p.idle) < target
}

// adaptive reports whether the pool sizes itself.
func (p *Pool) adaptive() bool { return p.cfg.Max > 0 }

// target is the number of sandboxes to keep ready at now, and why. p.mu
// must be held.
func (p *Pool) target(now time.Time) (int, string) {
	if !p.adaptive() {
		return p.cfg.Warm, fmt.Sprintf("fixed: pool.warm is %d", p.cfg.Warm)
	}
	return p.demand.target(now, p.cfg.Min, p.cfg.Max)
}

// release destroys the oldest ready sandbox when the pool holds more than
// its target (demand fell), and reports whether it did. The replenisher
// calls it at most once a tick, so that a target that dips for a moment
// costs one rebuild, not a pool.
func (p *Pool) release() bool {
	return p.destroyOldest(&p.released, func() int {
		target, _ := p.target(time.Now())
		return target
	})
}

// destroyOldest destroys the oldest ready sandbox, counted in count, when
// the pool holds more than keep() (called under p.mu), and reports
// whether it did.
func (p *Pool) destroyOldest(count *atomic.Int64, keep func() int) bool {
	p.mu.Lock()
	if p.closed || len(p.idle) == 0 || len(p.idle) <= keep() {
		p.mu.Unlock()
		return false
	}
	sb := p.idle[0]
	p.idle = p.idle[1:]
	p.mu.Unlock()
	count.Add(1)
	p.destroy(sb)
	return true
}

// put adds a fresh sandbox; false when the pool closed meanwhile.
func (p *Pool) put(sb *sandbox.Sandbox) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.idle = append(p.idle, sb)
	return true
}

// dropDead destroys ready sandboxes whose init died while waiting.
func (p *Pool) dropDead() {
	p.mu.Lock()
	var dead []*sandbox.Sandbox
	live := p.idle[:0]
	for _, sb := range p.idle {
		if alive(sb) {
			live = append(live, sb)
		} else {
			dead = append(dead, sb)
		}
	}
	p.idle = live
	p.mu.Unlock()
	for _, sb := range dead {
		p.discard(sb)
	}
}

func (p *Pool) destroy(sb *sandbox.Sandbox) {
	if err := sb.Destroy(context.Background()); err != nil {
		p.cfg.Logger.Warn("pool: destroy", "pool", p.cfg.Name, "sandbox", sb.ID(), "err", err)
	}
}

// Building reports whether the refill is making a sandbox now, and how
// many builds it has ended: the count moves when this one ends, ready to
// be evicted, or refused (for the node's capacity, say).
func (p *Pool) Building() (bool, uint64) {
	ended := p.builds.Load()
	return p.building.Load(), ended
}

// Evict destroys the pool's oldest ready sandbox, to give its share of
// the node's capacity to a claim elsewhere, and reports whether there was
// one. The pool refills once the capacity is free again.
func (p *Pool) Evict() bool {
	return p.destroyOldest(&p.evicted, func() int { return 0 })
}

// Stats returns the pool's counters.
func (p *Pool) Stats() Stats {
	now := time.Now()
	p.mu.Lock()
	idle := len(p.idle)
	target, why := p.target(now)
	var rate float64
	var build time.Duration
	if p.adaptive() {
		rate, build = p.demand.rate(now), p.demand.build
	}
	p.mu.Unlock()
	if p.short.Load() && idle < target {
		why += "; held below by the node's capacity"
	}
	return Stats{
		Name:           p.cfg.Name,
		Warm:           target,
		Idle:           idle,
		Min:            p.cfg.Min,
		Max:            p.cfg.Max,
		ClaimRate:      rate,
		BuildNanos:     int64(build),
		Reason:         why,
		Hits:           p.hits.Load(),
		Misses:         p.misses.Load(),
		Created:        p.created.Load(),
		CreateFailures: p.failures.Load(),
		Discarded:      p.discarded.Load(),
		Evicted:        p.evicted.Load(),
		Released:       p.released.Load(),
		AtCapacity:     p.short.Load(),
		ClaimNanos:     p.claimNanos.Load(),
	}
}

// Close stops replenishing and destroys every ready sandbox. Sandboxes
// already claimed are their callers' to destroy.
func (p *Pool) Close(ctx context.Context) error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	idle := p.idle
	p.idle = nil
	p.mu.Unlock()
	p.cancel()
	var errs []error
	select {
	case <-p.done:
	case <-ctx.Done():
		errs = append(errs, fmt.Errorf("pool %s: replenisher did not stop: %w", p.cfg.Name, ctx.Err()))
	}
	var mu sync.Mutex // guards errs while the destroys run
	var wg sync.WaitGroup
	for _, sb := range idle {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := sb.Destroy(context.WithoutCancel(ctx)); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}
