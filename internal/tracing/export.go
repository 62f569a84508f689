package tracing

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Options configure a Tracer.
type Options struct {
	// Endpoint is the URL spans are POSTed to (a collector's
	// http://HOST:4318/v1/traces).
	Endpoint string
	// Headers are added to each request (a collector's credential).
	Headers map[string]string
	// Service is the resource's service.name; Version its
	// service.version; Host its host.name.
	Service, Version, Host string
	// Logger receives export failures; nil discards them.
	Logger *slog.Logger
	// Every is how often queued spans are sent; 0 is one second.
	Every time.Duration
	// Client sends the requests; nil is one with a ten second timeout.
	Client *http.Client
}

// Bounds on what waits to be sent.
const (
	// queueCap bounds the spans waiting: past it, new ones are dropped.
	queueCap = 8192
	// batchMax bounds the spans in one request; a queue this long is
	// sent without waiting for the tick.
	batchMax = 512
	// maxAnswer bounds the collector's answer read.
	maxAnswer = 64 << 10
	// failureLogEvery spaces out the log of repeated export failures.
	failureLogEvery = time.Minute
)

// Tracer queues ended spans and sends them in batches.
type Tracer struct {
	opts     Options
	resource []kv

	mu sync.Mutex // guards q
	q  []*Span

	kick    chan struct{}
	stop    chan struct{}
	done    chan struct{}
	closing sync.Once

	sent, dropped, failures atomic.Int64

	sendMu  sync.Mutex // one request at a time, in order; guards lastLog
	lastLog time.Time  // of a failure
}

// New starts a Tracer sending to opts.Endpoint. Close stops it.
func New(opts Options) *Tracer {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Every <= 0 {
		opts.Every = time.Second
	}
	if opts.Client == nil {
		opts.Client = &http.Client{Timeout: 10 * time.Second}
	}
	if opts.Service == "" {
		opts.Service = "airlockd"
	}
	t := &Tracer{
		opts: opts,
		kick: make(chan struct{}, 1),
		stop: make(chan struct{}),
		done: make(chan struct{}),
	}
	t.resource = append(t.resource, attrKV(String("service.name", opts.Service)))
	if opts.Version != "" {
		t.resource = append(t.resource, attrKV(String("service.version", opts.Version)))
	}
	if opts.Host != "" {
		t.resource = append(t.resource, attrKV(String("host.name", opts.Host)))
	}
	go t.run()
	return t
}

// Stats are what a Tracer has done: spans sent (the collector took
// them), dropped (a full queue, a failed request, or the collector
// refused them) and requests that failed.
type Stats struct {
	Sent, Dropped, Failures int64
}

// Stats reports what t has done; zero on a nil Tracer.
func (t *Tracer) Stats() Stats {
	if t == nil {
		return Stats{}
	}
	return Stats{Sent: t.sent.Load(), Dropped: t.dropped.Load(), Failures: t.failures.Load()}
}

// Flush sends what is queued now and returns once it is sent (or has
// failed), or ctx is done.
func (t *Tracer) Flush(ctx context.Context) error {
	if t == nil {
		return nil
	}
	t.sendMu.Lock()
	defer t.sendMu.Unlock()
	for {
		t.mu.Lock()
		batch := t.take()
		t.mu.Unlock()
		if len(batch) == 0 {
			return nil
		}
		if err := t.send(ctx, batch); err != nil {
			return err
		}
	}
}

// Close sends what is queued (until ctx is done) and stops t. Spans that
// end later are dropped.
func (t *Tracer) Close(ctx context.Context) error {
	if t == nil {
		return nil
	}
	t.closing.Do(func() { close(t.stop) })
	<-t.done
	return t.Flush(ctx)
}

func (t *Tracer) queue(s *Span) {
	t.mu.Lock()
	select {
	case <-t.stop:
		t.mu.Unlock()
		t.dropped.Add(1)
		return
	default:
	}
	if len(t.q) >= queueCap {
		t.mu.Unlock()
		t.dropped.Add(1)
		return
	}
	t.q = append(t.q, s)
	full := len(t.q) >= batchMax
	t.mu.Unlock()
	if full {
		select {
		case t.kick <- struct{}{}:
		default:
		}
	}
}

// take removes up to batchMax queued spans. The caller holds mu.
func (t *Tracer) take() []*Span {
	n := min(len(t.q), batchMax)
	if n == 0 {
		return nil
	}
	batch := append([]*Span(nil), t.q[:n]...)
	clear(t.q[:n])
	t.q = t.q[n:]
	if len(t.q) == 0 {
		t.q = nil // let the backing array go
	}
	return batch
}

// run is the sender: each tick, or once a batch is queued, it sends what
// is queued. A request that fails drops its spans: a collector that is
// down is not waited for.
func (t *Tracer) run() {
	defer close(t.done)
	tick := time.NewTicker(t.opts.Every)
	defer tick.Stop()
	for {
		select {
		case <-t.stop:
			return
		case <-tick.C:
		case <-t.kick:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		_ = t.Flush(ctx)
		cancel()
	}
}

// send posts batch; its spans are sent or dropped once it returns. The
// caller holds sendMu.
func (t *Tracer) send(ctx context.Context, batch []*Span) error {
	taken, err := t.post(ctx, batch)
	t.sent.Add(taken)
	t.dropped.Add(int64(len(batch)) - taken)
	if err != nil {
		t.failures.Add(1)
		if now := time.Now(); now.Sub(t.lastLog) >= failureLogEvery {
			t.lastLog = now
			t.opts.Logger.Warn("tracing: spans not sent", "endpoint", t.opts.Endpoint, "spans", len(batch), "err", err)
		}
	}
	return err
}

// post sends batch and returns how many of its spans the collector took.
func (t *Tracer) post(ctx context.Context, batch []*Span) (taken int64, err error) {
	body, err := json.Marshal(t.request(batch))
	if err != nil {
		return 0, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, t.opts.Endpoint, bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range t.opts.Headers {
		req.Header.Set(k, v)
	}
	resp, err := t.opts.Client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	answer, _ := io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
	if resp.StatusCode/100 != 2 {
		return 0, fmt.Errorf("the collector answered %s: %s", resp.Status, clipText(answer))
	}
	// A partial success names the spans it refused.
	var ps struct {
		PartialSuccess struct {
			RejectedSpans json.Number `json:"rejectedSpans"`
			ErrorMessage  string      `json:"errorMessage"`
		} `json:"partialSuccess"`
	}
	if json.Unmarshal(answer, &ps) == nil {
		if n, _ := ps.PartialSuccess.RejectedSpans.Int64(); n > 0 {
			n = min(n, int64(len(batch)))
			return int64(len(batch)) - n, errors.New("the collector refused " + strconv.FormatInt(n, 10) + " spans: " + clipText([]byte(ps.PartialSuccess.ErrorMessage)))
		}
	}
	return int64(len(batch)), nil
}

func clipText(b []byte) string {
	const max = 200
	if len(b) > max {
		return string(b[:max]) + "..."
	}
	return string(b)
}
