package daemon

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

// defaultCaptureBudget is the captured-output budget when the config
// sets none: 16 runs printing the default output ceiling at once.
const defaultCaptureBudget = 256 << 20

// defaultCaptureWait is how long a run waits for room in the budget
// before it is refused.
const defaultCaptureWait = 30 * time.Second

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
		return nil, &refusal{kind: sandbox.ErrCapacity, msg: fmt.Sprintf(
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
			return nil, &refusal{kind: sandbox.ErrCapacity, retryAfter: 1, msg: fmt.Sprintf(
				"the daemon's budget for captured output (server.capacity.output, %s) was held by other runs' output for %v; try again shortly, or stream the run's events (Accept: application/x-ndjson), which holds no output",
				units.FormatSize(b.size), b.wait)}
		}
	}
	var once sync.Once
	return func() { once.Do(func() { b.sem.Release(n) }) }, nil
}

// reserveCapture reserves the output ceiling of a command of tool t: the
// run's own when it lowered it (l), else the tool's.
// A shutdown ends the wait: the run would not start.
func (d *Daemon) reserveCapture(ctx context.Context, t *config.Tool, l *sandbox.Limits) (release func(), err error) {
	n := d.plans[t.Name].Spec.Limits.Output
	if l != nil {
		n = l.Output
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(d.quit, cancel)
	defer stop()
	release, err = d.capture.reserve(ctx, n)
	if err != nil && d.quit.Err() != nil {
		return nil, errShutdown
	}
	return release, err
}
