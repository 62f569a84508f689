package node

import (
	"context"
	"fmt"
	"sync"
	"time"

	"golang.org/x/sync/semaphore"

	"github.com/airlockhq/airlock/internal/config"
	"github.com/airlockhq/airlock/internal/units"
	"github.com/airlockhq/airlock/sandbox"
)

// Captured output: a run or an exec whose caller does not stream its
// events (a plain JSON answer, an MCP tools/call) has its output kept in
// the daemon until it is answered, up to the run's output ceiling. Without
// a bound across the daemon, many such runs printing their ceiling at once
// would take the daemon's own memory, which no sandbox ceiling counts,
// until the host OOM-killed it. So each one reserves its output ceiling
// of a daemon-wide budget (server.capacity.output) before its command
// starts, and gives it back once its answer is out; a run that finds no
// room waits a while for it, then is refused naming the budget.

// minCaptureBudget is the least captured-output budget a config that
// sets none gets: 16 runs printing the default output ceiling at once.
const minCaptureBudget = 256 << 20

// CaptureBudget is the daemon's budget for captured output: the
// configured server.capacity.output, else a share of the node's memory
// budget (memory, the sum of the sandboxes' memory ceilings it admits) in
// the proportion of the default output ceiling to the default memory
// ceiling (16 MiB to 512 MiB), at least minCaptureBudget. With it every
// sandbox the node admits at the default ceilings can have its output
// taken whole at once, so a few callers holding long runs cannot keep
// everyone else's from starting (each reserves its whole ceiling for its
// life), while the daemon's own memory stays a known share of the node's.
func CaptureBudget(c config.Capacity, memory int64) int64 {
	if c.Output > 0 {
		return c.Output
	}
	d := sandbox.DefaultLimits()
	return max(minCaptureBudget, int64(float64(memory)*float64(d.Output)/float64(d.Memory)))
}

// CheckCapture says whether a tool's output ceiling fits the daemon's
// budget for captured output: a run of it taken whole could never be
// answered otherwise. serve and config check both ask it.
func CheckCapture(tool string, output, budget int64) error {
	if output > budget {
		return fmt.Errorf("tool %s: its output ceiling of %s is over the daemon's budget for captured output of %s (server.capacity.output)", tool, units.FormatSize(output), units.FormatSize(budget))
	}
	return nil
}

// DefaultCaptureWait is how long a run waits for room in the budget
// before it is refused.
const DefaultCaptureWait = 30 * time.Second

// captureBudget bounds the bytes of output the daemon holds for callers.
type captureBudget struct {
	sem  *semaphore.Weighted
	size int64
	wait time.Duration
}

func newCaptureBudget(size int64, wait time.Duration) *captureBudget {
	return &captureBudget{sem: semaphore.NewWeighted(size), size: size, wait: wait}
}

// reserve takes n bytes of the budget, waiting up to b.wait (and while
// ctx lives) for room. release gives them back, once.
func (b *captureBudget) reserve(ctx context.Context, n int64) (release func(), err error) {
	if n <= 0 {
		return func() {}, nil
	}
	if n > b.size {
		return nil, &Refusal{Kind: sandbox.ErrCapacity, Msg: fmt.Sprintf(
			"the run's output ceiling of %s is over the daemon's budget for captured output (server.capacity.output, %s); stream its events instead (Accept: application/x-ndjson), which holds no output",
			units.FormatSize(n), units.FormatSize(b.size))}
	}
	if !b.sem.TryAcquire(n) {
		wctx, cancel := context.WithTimeout(ctx, b.wait)
		err := b.sem.Acquire(wctx, n)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return nil, fmt.Errorf("the caller went away before the command started: %w", context.Cause(ctx))
			}
			return nil, &Refusal{Kind: sandbox.ErrCapacity, RetryAfter: 1, Msg: fmt.Sprintf(
				"the daemon's budget for captured output (server.capacity.output, %s) was held by other runs' output for %v; try again shortly, or stream the run's events (Accept: application/x-ndjson), which holds no output",
				units.FormatSize(b.size), b.wait)}
		}
	}
	var once sync.Once
	return func() { once.Do(func() { b.sem.Release(n) }) }, nil
}

// ReserveCapture reserves the output ceiling of a command of tool t: the
// run's own when it lowered it (l), else the tool's.
// A shutdown ends the wait: the run would not start.
func (n *Node) ReserveCapture(ctx context.Context, t *config.Tool, l *sandbox.Limits) (release func(), err error) {
	size := n.plan(t.Name).Spec.Limits.Output
	if l != nil {
		size = l.Output
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(n.quit, cancel)
	defer stop()
	release, err = n.capture.reserve(ctx, size)
	if err != nil && n.quit.Err() != nil {
		return nil, ErrShutdown
	}
	return release, err
}
