package audit

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"time"
)

// exportQueue bounds the committed batches waiting for Options.Export.
const exportQueue = 1024

// exportDrain bounds how long Close waits for the export to take what is
// queued.
const exportDrain = 5 * time.Second

// exporter writes committed events to Options.Export from a goroutine of
// its own, through a bounded queue, so that an export nobody takes (a pipe
// whose reader stalls) never holds a commit, and with it every run that
// must be recorded before it starts. What finds the queue full is dropped
// from the export, counted and logged; the log itself keeps it, and the
// ids in the exported lines show the gap.
type exporter struct {
	w      io.Writer
	logger *slog.Logger
	q      chan exportBatch
	done   chan struct{}

	mu      sync.Mutex // guards closed and dropped
	closed  bool
	dropped int64
}

type exportBatch struct {
	b []byte
	n int // events
}

func newExporter(w io.Writer, logger *slog.Logger) *exporter {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	e := &exporter{w: w, logger: logger, q: make(chan exportBatch, exportQueue), done: make(chan struct{})}
	go e.run()
	return e
}

// send queues n events' lines b, or drops them when the queue is full.
func (e *exporter) send(b []byte, n int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return
	}
	select {
	case e.q <- exportBatch{b, n}:
	default:
		e.dropped += int64(n)
	}
}

func (e *exporter) run() {
	defer close(e.done)
	for batch := range e.q {
		e.mu.Lock()
		dropped := e.dropped
		e.dropped = 0
		e.mu.Unlock()
		if dropped > 0 {
			e.logger.Warn("audit: the export fell behind and left out events (the log keeps them)", "dropped", dropped)
		}
		if _, err := e.w.Write(batch.b); err != nil {
			e.logger.Warn("audit: export failed", "err", err, "events", batch.n)
		}
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.dropped > 0 {
		e.logger.Warn("audit: the export fell behind and left out events (the log keeps them)", "dropped", e.dropped)
	}
}

// close stops the export once what is queued is written, waiting at most
// exportDrain (or until ctx ends) for an export that does not take it.
func (e *exporter) close(ctx context.Context) {
	e.mu.Lock()
	if !e.closed {
		e.closed = true
		close(e.q)
	}
	e.mu.Unlock()
	select {
	case <-e.done:
	case <-ctx.Done():
	case <-time.After(exportDrain):
		e.logger.Warn("audit: the export did not take the last events in time")
	}
}
