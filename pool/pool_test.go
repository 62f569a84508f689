package pool

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/testutil"
	"github.com/airlockhq/airlock/result"
	"github.com/airlockhq/airlock/sandbox"
)

func TestMain(m *testing.M) {
	// Sandboxes re-execute the test binary as their init.
	if code, ok := sandbox.Child(); ok {
		os.Exit(code)
	}
	code := m.Run()
	// The shared runtime's groups made ahead go with it.
	if rtVal != nil {
		rtVal.Close()
	}
	os.Exit(code)
}

const testStateDir = "/run/airlock-test-pool"

var testCgroup = testutil.CgroupParent("/airlock-test-pool")

var (
	rtOnce sync.Once
	rtVal  *sandbox.Runtime
	rtErr  error
)

func runtimeFor(t *testing.T) *sandbox.Runtime {
	t.Helper()
	testutil.RequireRoot(t)
	rtOnce.Do(func() {
		rtVal, rtErr = sandbox.New(context.Background(), sandbox.Options{StateDir: testStateDir, CgroupParent: testCgroup, InitPath: testutil.InitPath(t)})
	})
	if rtErr != nil {
		t.Fatal(rtErr)
	}
	return rtVal
}

func spec() sandbox.Spec {
	l := sandbox.DefaultLimits()
	l.Memory, l.Pids = 64<<20, 32
	return sandbox.Spec{Limits: l}
}

// waitIdle waits until the pool holds n ready sandboxes.
func waitIdle(t *testing.T, p *Pool, n int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for p.Stats().Idle != n {
		if time.Now().After(deadline) {
			t.Fatalf("pool never reached %d idle: %+v", n, p.Stats())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// cgroups lists the sandboxes' cgroups under the test parent (in the v1
// pids hierarchy, or the v2 tree), to check from the host that nothing is
// left.
func cgroups(t *testing.T) []string {
	t.Helper()
	dir := "/sys/fs/cgroup" + testCgroup
	if _, err := os.Stat("/sys/fs/cgroup/pids"); err == nil {
		dir = "/sys/fs/cgroup/pids" + testCgroup
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		if os.IsNotExist(err) {
			return nil
		}
		t.Skipf("cannot list cgroups: %v", err)
	}
	var dirs []string
	for _, e := range ents {
		if e.IsDir() {
			dirs = append(dirs, e.Name())
		}
	}
	return dirs
}

func closePool(t *testing.T, p *Pool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestClaimWarmReplacedNeverReused(t *testing.T) {
	rt := runtimeFor(t)
	p := New(rt, Config{Name: "t", Spec: spec(), Warm: 2})
	defer closePool(t, p)
	waitIdle(t, p, 2)
	seen := map[string]bool{}
	for i := range 5 {
		sb, warm, err := p.Claim(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if seen[sb.ID()] {
			t.Fatalf("sandbox %s handed out twice", sb.ID())
		}
		seen[sb.ID()] = true
		r := sb.Exec(t.Context(), sandbox.ExecRequest{Argv: []string{"/bin/true"}})
		if r.Outcome != result.Exited || r.ExitCode != 0 {
			t.Fatalf("claim %d (warm %v): %+v", i, warm, r)
		}
		if err := sb.Destroy(t.Context()); err != nil {
			t.Fatal(err)
		}
		// The replacement comes in the background.
		waitIdle(t, p, 2)
	}
	st := p.Stats()
	if st.Hits != 5 || st.Misses != 0 || st.Created != 7 {
		t.Fatalf("stats %+v; want 5 hits, 0 misses, 7 created", st)
	}
}

func TestColdWhenEmpty(t *testing.T) {
	rt := runtimeFor(t)
	p := New(rt, Config{Name: "cold", Spec: spec(), Warm: 0})
	defer closePool(t, p)
	sb, warm, err := p.Claim(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Destroy(t.Context())
	if warm {
		t.Fatal("an empty pool claimed warm")
	}
	if st := p.Stats(); st.Misses != 1 || st.Hits != 0 || st.Idle != 0 {
		t.Fatalf("stats %+v", st)
	}
}

func TestDeadIdleDiscarded(t *testing.T) {
	rt := runtimeFor(t)
	p := New(rt, Config{Name: "dead", Spec: spec(), Warm: 1})
	defer closePool(t, p)
	waitIdle(t, p, 1)
	p.mu.Lock()
	victim := p.idle[0]
	p.mu.Unlock()
	// Something outside kills the waiting init.
	if err := syscall.Kill(victim.InitPid(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-victim.Done()
	sb, _, err := p.Claim(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Destroy(t.Context())
	if sb.ID() == victim.ID() {
		t.Fatal("a dead sandbox was handed out")
	}
	if r := sb.Exec(t.Context(), sandbox.ExecRequest{Argv: []string{"/bin/true"}}); r.Outcome != result.Exited {
		t.Fatalf("claimed sandbox: %+v", r)
	}
	if st := p.Stats(); st.Discarded != 1 {
		t.Fatalf("stats %+v; want 1 discarded", st)
	}
}

func TestCloseLeavesNothing(t *testing.T) {
	rt := runtimeFor(t)
	before := len(cgroups(t))
	p := New(rt, Config{Name: "close", Spec: spec(), Warm: 3})
	waitIdle(t, p, 3)
	if got := len(cgroups(t)); got != before+3 {
		t.Fatalf("%d cgroups with 3 idle, want %d", got, before+3)
	}
	closePool(t, p)
	if got := len(cgroups(t)); got != before {
		t.Fatalf("%d cgroups after Close, want %d", got, before)
	}
	if _, _, err := p.Claim(t.Context()); err != ErrClosed {
		t.Fatalf("claim after close: %v", err)
	}
}

// failing is a Creator that always fails, standing in for a broken host.
type failing struct{}

func (f *failing) Create(context.Context, sandbox.Spec) (*sandbox.Sandbox, error) {
	return nil, context.DeadlineExceeded
}

func (f *failing) Start(context.Context, sandbox.Spec) (*sandbox.Sandbox, error) {
	return nil, context.DeadlineExceeded
}

var _ Creator = (*failing)(nil)

func TestCreateFailuresBackOff(t *testing.T) {
	p := New(&failing{}, Config{Name: "broken", Warm: 2, RetryMin: 20 * time.Millisecond, RetryMax: 80 * time.Millisecond})
	time.Sleep(500 * time.Millisecond)
	st := p.Stats()
	// 20+40+80+80+80... ms: about 7 attempts in 500 ms, not thousands.
	if st.CreateFailures < 2 || st.CreateFailures > 12 {
		t.Fatalf("stats %+v; want a handful of failures with back-off", st)
	}
	if _, _, err := p.Claim(t.Context()); err == nil {
		t.Fatal("claim succeeded on a broken host")
	}
	if _, _, err := p.ClaimStarted(t.Context()); err == nil {
		t.Fatal("started claim succeeded on a broken host")
	}
	closePool(t, p)
}

func TestConcurrentClaims(t *testing.T) {
	rt := runtimeFor(t)
	p := New(rt, Config{Name: "many", Spec: spec(), Warm: 2})
	defer closePool(t, p)
	waitIdle(t, p, 2)
	var mu sync.Mutex
	ids := map[string]bool{}
	var wg sync.WaitGroup
	for range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sb, _, err := p.Claim(context.Background())
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			dup := ids[sb.ID()]
			ids[sb.ID()] = true
			mu.Unlock()
			if dup {
				t.Errorf("sandbox %s claimed twice", sb.ID())
			}
			sb.Destroy(context.Background())
		}()
	}
	wg.Wait()
	if st := p.Stats(); st.Hits+st.Misses != 6 {
		t.Fatalf("stats %+v", st)
	}
}

// TestRefillYieldsToTheRun claims one of two warm sandboxes: the
// replacement is not built while the claimed sandbox runs (the pool still
// has one ready), nor once its command has ended (its caller answers
// then), and is as soon as it is destroyed. With the pool below half its
// target, the refill does not wait.
func TestRefillYieldsToTheRun(t *testing.T) {
	rt := runtimeFor(t)
	p := New(rt, Config{Name: "yield", Spec: spec(), Warm: 2, YieldMax: time.Minute})
	defer closePool(t, p)
	waitIdle(t, p, 2)
	sb, warm, err := p.Claim(t.Context())
	if err != nil || !warm {
		t.Fatalf("claim: warm %v, %v", warm, err)
	}
	time.Sleep(300 * time.Millisecond)
	if st := p.Stats(); st.Created != 2 || st.Idle != 1 {
		t.Fatalf("while the claimed sandbox lives: %+v; want no refill yet (created 2, idle 1)", st)
	}
	// Its command ends, and init with it (the sandbox is not kept).
	if r := sb.Exec(t.Context(), sandbox.ExecRequest{Argv: []string{"true"}}); r.Outcome != result.Exited {
		t.Fatalf("true: %s %s", r.Outcome, r.Error)
	}
	select {
	case <-sb.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("init did not exit after the command")
	}
	time.Sleep(300 * time.Millisecond)
	if st := p.Stats(); st.Created != 2 || st.Idle != 1 {
		t.Fatalf("after the command, before the destroy: %+v; want no refill yet (created 2, idle 1)", st)
	}
	if err := sb.Destroy(t.Context()); err != nil {
		t.Fatal(err)
	}
	waitIdle(t, p, 2)
	// Both claimed: the pool is empty, so the refill starts at once and
	// brings it back to half its target while both claimed sandboxes
	// still live; the rest waits for their runs.
	a, _, err := p.Claim(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	// Let the refill start waiting on a before b is claimed.
	time.Sleep(100 * time.Millisecond)
	b, _, err := p.Claim(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	waitIdle(t, p, 1)
	for _, s := range []*sandbox.Sandbox{a, b} {
		if err := s.Destroy(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	waitIdle(t, p, 2)
}

// TestClaimStartedMiss claims from an empty pool for a run: the sandbox
// comes back started, not yet ready, and its first command still runs.
func TestClaimStartedMiss(t *testing.T) {
	rt := runtimeFor(t)
	p := New(rt, Config{Name: "cold", Spec: spec(), Warm: 0})
	defer closePool(t, p)
	sb, warm, err := p.ClaimStarted(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Destroy(context.Background())
	if warm {
		t.Fatal("an empty pool's claim was warm")
	}
	r := sb.Exec(t.Context(), sandbox.ExecRequest{Argv: []string{"echo", "started"}, Capture: true})
	if r.Outcome != result.Exited || string(r.Stdout) != "started\n" {
		t.Fatalf("got %s %q %s", r.Outcome, r.Stdout, r.Error)
	}
	if st := p.Stats(); st.Misses != 1 || st.Hits != 0 {
		t.Fatalf("stats %+v, want one miss", st)
	}
}

// TestAtCapacity: a pool whose runtime's budget is spent holds what fits,
// says so, and counts no failure; Evict gives a sandbox's room back, and
// the pool refills it once it is free.
func TestAtCapacity(t *testing.T) {
	runtimeFor(t)
	rt, err := sandbox.New(context.Background(), sandbox.Options{StateDir: testStateDir, CgroupParent: testCgroup, InitPath: testutil.InitPath(t),
		Budget: sandbox.Budget{Sandboxes: 2}})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	p := New(rt, Config{Name: "capped", Spec: spec(), Warm: 3})
	defer closePool(t, p)
	waitIdle(t, p, 2)
	deadline := time.Now().Add(5 * time.Second)
	for !p.Stats().AtCapacity {
		if time.Now().After(deadline) {
			t.Fatalf("the pool never said it is at capacity: %+v", p.Stats())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if st := p.Stats(); st.Idle != 2 || st.CreateFailures != 0 {
		t.Fatalf("stats %+v, want 2 ready and no failures", st)
	}
	if !p.Evict() {
		t.Fatal("nothing to evict")
	}
	if st := p.Stats(); st.Evicted != 1 {
		t.Fatalf("stats %+v after an eviction", st)
	}
	waitIdle(t, p, 2)
}

// TestPrepare: the refill readies each sandbox before a claim can find
// it (what Prepare did is there when it is claimed warm); a sandbox whose
// preparation fails is destroyed, never handed out, and counted as a
// failed create; a claim that misses is not prepared.
func TestPrepare(t *testing.T) {
	rt := runtimeFor(t)
	var fail atomic.Bool
	var prepared, seen sync.Map
	p := New(rt, Config{Name: "t", Spec: spec(), Warm: 1, RetryMin: 10 * time.Millisecond, RetryMax: 20 * time.Millisecond,
		Prepare: func(ctx context.Context, sb *sandbox.Sandbox) error {
			// A command that keeps its sandbox, as a kernel's does.
			seen.Store(sb.ID(), true)
			if fail.Load() {
				return errors.New("no")
			}
			r := sb.Exec(ctx, sandbox.ExecRequest{Argv: []string{"/bin/sh", "-c", "echo ready > /tmp/prepared"}, KeepAlive: true})
			if r.Outcome != result.Exited || r.ExitCode != 0 {
				return fmt.Errorf("prepare: %+v", r)
			}
			prepared.Store(sb.ID(), true)
			return nil
		}})
	defer closePool(t, p)
	waitIdle(t, p, 1)
	// From here every preparation fails: the refill after this claim's.
	fail.Store(true)
	sb, warm, err := p.Claim(t.Context())
	if err != nil || !warm {
		t.Fatalf("claim: warm %v, %v", warm, err)
	}
	if _, ok := prepared.Load(sb.ID()); !ok {
		t.Error("a warm sandbox that was not prepared")
	}
	var out bytes.Buffer
	if r := sb.Exec(t.Context(), sandbox.ExecRequest{Argv: []string{"/bin/cat", "/tmp/prepared"}, Stdout: &out}); r.ExitCode != 0 || out.String() != "ready\n" {
		t.Errorf("what Prepare did: %q %+v", out.String(), r)
	}
	_ = sb.Destroy(t.Context())
	deadline := time.Now().Add(10 * time.Second)
	for p.Stats().CreateFailures < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("failed preparations were not counted: %+v", p.Stats())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if st := p.Stats(); st.Idle != 0 {
		t.Errorf("a sandbox whose preparation failed is in the pool: %+v", st)
	}
	miss, warm, err := p.Claim(t.Context())
	if err != nil || warm {
		t.Fatalf("a claim with the pool empty: warm %v, %v", warm, err)
	}
	if _, ok := prepared.Load(miss.ID()); ok {
		t.Error("a miss was prepared")
	}
	_ = miss.Destroy(t.Context())
	closePool(t, p)
	for _, id := range cgroups(t) {
		if _, ok := seen.Load(id); ok {
			t.Errorf("sandbox %s, prepared, is left after the pool's close", id)
		}
	}
}

// TestAdaptiveFollowsDemand drives an adaptive pool with real sandboxes
// through silence, a steady rate, a burst and silence again, and checks
// from its stats and the host that the target follows: nothing held
// before the first claim, a target that grows with the burst, and every
// ready sandbox released (destroyed, its cgroup gone) in the silence.
func TestAdaptiveFollowsDemand(t *testing.T) {
	rec := &recording{Creator: runtimeFor(t)}
	// A short idle time scales the whole pattern down: the fast rate
	// forgets in 50 ms, the slow in 0.75 s, silence is 1.5 s.
	p := New(rec, Config{Name: "adaptive", Spec: spec(), Max: 6, Idle: 1500 * time.Millisecond})
	defer closePool(t, p)
	time.Sleep(200 * time.Millisecond)
	if st := p.Stats(); st.Warm != 0 || st.Idle != 0 || st.Created != 0 {
		t.Fatalf("before any claim: %+v; want nothing held", st)
	}
	use := func() {
		sb, _, err := p.Claim(t.Context())
		if err != nil {
			t.Error(err)
			return
		}
		if r := sb.Exec(t.Context(), sandbox.ExecRequest{Argv: []string{"/bin/true"}}); r.Outcome != result.Exited {
			t.Errorf("run: %+v", r)
		}
		if err := sb.Destroy(t.Context()); err != nil {
			t.Error(err)
		}
	}
	// Steady: a claim every 100 ms for a second.
	for range 10 {
		use()
		time.Sleep(100 * time.Millisecond)
	}
	steady := p.Stats()
	if steady.Warm < 1 || steady.ClaimRate <= 0 || steady.BuildNanos <= 0 {
		t.Fatalf("after a steady second: %+v; want a target of 1 or more from a measured rate and build time", steady)
	}
	if steady.Hits == 0 {
		t.Errorf("after a steady second no claim was warm: %+v", steady)
	}
	// The check at the end looks for sandboxes' cgroups by id: a ready
	// one's is there now.
	for deadline := time.Now().Add(10 * time.Second); p.Stats().Idle == 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("nothing ready after a steady second: %+v", p.Stats())
		}
	}
	live := map[string]bool{}
	for _, name := range cgroups(t) {
		live[name] = true
	}
	found := false
	for _, sb := range rec.made() {
		if alive(sb) && live[sb.ID()] {
			found = true
		}
	}
	if !found {
		t.Fatalf("no ready sandbox's cgroup is named by its id among %v", live)
	}
	// A burst: 4 at once, 5 times over. The target is read throughout:
	// on a slow host (the emulated guest) a burst's claims take long
	// enough that what they raised has decayed when the burst ends.
	peak := steady.Warm
	var peakSeen atomic.Int64
	stopWatch := make(chan struct{})
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		for {
			if w := int64(p.Stats().Warm); w > peakSeen.Load() {
				peakSeen.Store(w)
			}
			select {
			case <-stopWatch:
				return
			case <-time.After(2 * time.Millisecond):
			}
		}
	}()
	for range 5 {
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(use)
		}
		wg.Wait()
	}
	close(stopWatch)
	<-watched
	peak = max(peak, int(peakSeen.Load()))
	switch {
	case steady.Warm >= 6:
		t.Logf("the steady target was the pool's max already (%+v): a burst cannot raise it", steady)
	case peak <= steady.Warm:
		t.Errorf("the burst left the target at %d (steady %d); want it raised", peak, steady.Warm)
	}
	// Silence: within idle plus a few ticks everything ready is released.
	deadline := time.Now().Add(10 * time.Second)
	for {
		st := p.Stats()
		if st.Warm == 0 && st.Idle == 0 {
			if st.Released == 0 {
				t.Errorf("empty after the silence but nothing counted released: %+v", st)
			}
			if !strings.Contains(st.Reason, "no claim for") {
				t.Errorf("reason %q does not say the silence", st.Reason)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the silence released nothing: %+v", st)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// From the host: every sandbox the refill built is destroyed (the
	// released ones by the pool, the claimed ones by their callers) and
	// its cgroup gone. (The runtime's groups made ahead for the next
	// sandbox come and go, so the count of groups is no measure.) The
	// pool counts a released sandbox gone when it takes it out, before
	// its destroy has finished, and a build begun before the silence
	// ends in one more release: both are waited for, a few seconds.
	gone := time.Now().Add(5 * time.Second)
	for _, sb := range rec.made() {
		select {
		case <-sb.Destroyed():
		case <-time.After(time.Until(gone)):
			t.Errorf("sandbox %s, built by the refill, is not destroyed after the silence: %+v", sb.ID(), p.Stats())
		}
	}
	left := map[string]bool{}
	for _, name := range cgroups(t) {
		left[name] = true
	}
	for _, sb := range rec.made() {
		if left[sb.ID()] {
			t.Errorf("sandbox %s's cgroup is left after the silence", sb.ID())
		}
	}
}

// recording is a Creator that keeps what the pool's refill built.
type recording struct {
	Creator
	mu    sync.Mutex // guards built
	built []*sandbox.Sandbox
}

func (r *recording) Create(ctx context.Context, spec sandbox.Spec) (*sandbox.Sandbox, error) {
	sb, err := r.Creator.Create(ctx, spec)
	if err == nil {
		r.mu.Lock()
		r.built = append(r.built, sb)
		r.mu.Unlock()
	}
	return sb, err
}

func (r *recording) made() []*sandbox.Sandbox {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.built)
}

// TestBuilding: while the refill makes a sandbox the pool says so, and
// the count of ended builds moves only once that sandbox is ready (a
// claim elsewhere that waits for it, to evict it, then finds it).
func TestBuilding(t *testing.T) {
	rt := runtimeFor(t)
	g := &gated{Creator: rt, open: make(chan struct{}), entered: make(chan struct{}, 1)}
	p := New(g, Config{Name: "gated", Spec: spec(), Warm: 1})
	defer closePool(t, p)
	select {
	case <-g.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the refill never started a build")
	}
	if on, ended := p.Building(); !on || ended != 0 {
		t.Fatalf("during the first build: building %v, ended %d", on, ended)
	}
	close(g.open)
	deadline := time.Now().Add(10 * time.Second)
	for {
		on, ended := p.Building()
		if ended == 1 {
			if on || p.Stats().Idle != 1 {
				t.Fatalf("the build ended but building %v, stats %+v", on, p.Stats())
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the build never ended: %+v", p.Stats())
		}
		time.Sleep(time.Millisecond)
	}
}

// gated is a Creator whose builds wait until open is closed.
type gated struct {
	Creator
	open    chan struct{}
	entered chan struct{}
}

func (g *gated) Create(ctx context.Context, spec sandbox.Spec) (*sandbox.Sandbox, error) {
	select {
	case g.entered <- struct{}{}:
	default:
	}
	select {
	case <-g.open:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return g.Creator.Create(ctx, spec)
}
