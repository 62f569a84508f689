package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/client"
	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/sandbox"
)

// TestCapturedOutputBounded runs many commands at once whose output is
// taken whole, each printing its whole output ceiling, and checks from
// the daemon's own heap (it runs in this process) that the output it
// holds stays under a bound derived from its captured-output budget:
// without the budget and with json.Marshal's copies, 24 runs of 16 MiB
// took it past a gigabyte. Each run completes with its whole output, or
// is refused naming the budget; the daemon goes on serving.
func TestCapturedOutputBounded(t *testing.T) {
	const (
		runs   = 24
		outCap = 16 << 20
		budget = 64 << 20
	)
	_, sock := serveConfig(t, fmt.Sprintf(`
server:
  capacity: {output: %d}
tools:
  big:
    limits: {memory: 64MiB, time: 120s, output: %d}
`, budget, outCap), nil)
	c := client.New(sock)
	hc, url := c.Endpoint("/v1/runs")

	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	base := ms.HeapInuse
	var peak atomic.Uint64
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			if ms.HeapInuse > peak.Load() {
				peak.Store(ms.HeapInuse)
			}
			select {
			case <-stop:
				return
			case <-time.After(10 * time.Millisecond):
			}
		}
	}()

	body, _ := json.Marshal(api.RunRequest{Tool: "big", Argv: []string{"sh", "-c", fmt.Sprintf("head -c %d /dev/zero | tr '\\0' a", outCap)}})
	var wg sync.WaitGroup
	var done, refused atomic.Int32
	errs := make(chan error, runs)
	for range runs {
		wg.Go(func() {
			req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, url, bytes.NewReader(body))
			resp, err := hc.Do(req)
			if err != nil {
				errs <- err
				return
			}
			defer resp.Body.Close()
			// The answer is read as it comes and not kept: this process
			// is also the daemon, whose heap is measured.
			head := make([]byte, 512)
			n, _ := io.ReadFull(resp.Body, head)
			rest, err := io.Copy(io.Discard, resp.Body)
			head = head[:n]
			switch {
			case err != nil:
				errs <- err
			case resp.StatusCode == http.StatusOK:
				if !bytes.Contains(head, []byte(`"outcome":"exited"`)) || int64(n)+rest < outCap || int64(n)+rest != resp.ContentLength {
					errs <- fmt.Errorf("answer %.200s... of %d bytes, Content-Length %d", head, int64(n)+rest, resp.ContentLength)
					return
				}
				done.Add(1)
			case resp.StatusCode == http.StatusServiceUnavailable && bytes.Contains(head, []byte("server.capacity.output")):
				refused.Add(1)
			default:
				errs <- fmt.Errorf("status %d: %s", resp.StatusCode, head)
			}
		})
	}
	wg.Wait()
	close(stop)
	<-sampled
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	grew := int64(peak.Load()) - int64(base)
	// The budget's bytes as captured (append's spare capacity included)
	// plus the garbage the collector lets pile up before it runs.
	limit := int64(4 * budget)
	t.Logf("%d runs completed, %d refused; heap in use grew by %d MiB at most (limit %d MiB)", done.Load(), refused.Load(), grew>>20, limit>>20)
	if grew > limit {
		t.Errorf("the daemon's heap grew by %d MiB with a captured-output budget of %d MiB; want at most %d MiB", grew>>20, budget>>20, limit>>20)
	}
	if done.Load() == 0 {
		t.Errorf("no run completed")
	}
	if err := c.Health(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// TestCaptureBudgetRefuses checks the budget's refusals: a run that finds
// no room within the wait, and one whose ceiling alone is over it.
func TestCaptureBudgetRefuses(t *testing.T) {
	b := newCaptureBudget(100, 20*time.Millisecond)
	free, err := b.reserve(t.Context(), 60)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		n    int64
		want string
	}{
		{50, "was held by other runs' output"},
		{101, "over the daemon's budget for captured output"},
	} {
		_, err := b.reserve(t.Context(), tc.n)
		var r *refusal
		if !errors.As(err, &r) || !errors.Is(err, sandbox.ErrCapacity) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "server.capacity.output") {
			t.Errorf("reserve(%d): got %v, want a capacity refusal saying %q", tc.n, err, tc.want)
		}
	}
	free()
	free() // twice gives back once
	f1, err := b.reserve(t.Context(), 100)
	if err != nil {
		t.Fatalf("after release: %v", err)
	}
	f1()
	// A caller gone while it waits is not told about the budget.
	ctx, cancel := context.WithCancel(t.Context())
	f2, _ := b.reserve(t.Context(), 100)
	cancel()
	if _, err := b.reserve(ctx, 1); err == nil || errors.Is(err, errdefs.ErrUnavailable) || strings.Contains(err.Error(), "budget") {
		t.Errorf("gone caller: %v", err)
	}
	f2()
}
