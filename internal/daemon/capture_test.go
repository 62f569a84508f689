package daemon

import (
	"bytes"
	"encoding/json"
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

	grew := heapGrowth(t)

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
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	checkGrowth(t, grew(), budget, int(done.Load()), int(refused.Load()))
	if err := c.Health(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// checkGrowth fails the test when the heap grew past four times the
// budget, plus 64 MiB: the budget's bytes as captured (append's spare
// capacity included), the garbage the collector lets pile up before it
// runs, and the requests' own allocations. Without the budget and the
// encoding from the buffers each of these tests grew it by 600 MiB to
// 1 GiB.
func checkGrowth(t *testing.T, grew, budget int64, done, refused int) {
	t.Helper()
	limit := 4*budget + 64<<20
	t.Logf("%d runs completed, %d refused; heap in use grew by %d MiB at most (limit %d MiB)", done, refused, grew>>20, limit>>20)
	if grew > limit {
		t.Errorf("the daemon's heap grew by %d MiB with a captured-output budget of %d MiB; want at most %d MiB", grew>>20, budget>>20, limit>>20)
	}
	if done == 0 {
		t.Errorf("no run completed")
	}
}

// heapGrowth samples the heap in use (this process's: the daemon runs in
// it) until the returned function is called, which gives its peak growth
// over what it was at the start.
func heapGrowth(t *testing.T) func() int64 {
	t.Helper()
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

	return func() int64 {
		close(stop)
		<-sampled
		return int64(peak.Load()) - int64(base)
	}
}

// TestCapturedOutputBoundedExec is TestCapturedOutputBounded for the
// execs of sessions answered whole.
func TestCapturedOutputBoundedExec(t *testing.T) {
	const (
		sessions = 12
		outCap   = 16 << 20
		budget   = 32 << 20
	)
	_, sock := serveConfig(t, fmt.Sprintf(`
server:
  capacity: {output: %d}
tools:
  big:
    limits: {memory: 64MiB, time: 120s, output: %d}
`, budget, outCap), nil)
	c := client.New(sock)
	hc, _ := c.Endpoint("/")
	ids := make([]string, sessions)
	for i := range ids {
		s, err := c.CreateSession(t.Context(), api.SessionRequest{Tool: "big"})
		if err != nil {
			t.Fatal(err)
		}
		ids[i] = s.ID
	}
	body, _ := json.Marshal(api.ExecRequest{Argv: []string{"sh", "-c", fmt.Sprintf("head -c %d /dev/zero | tr '\\0' a", outCap)}})
	grew := heapGrowth(t)
	var wg sync.WaitGroup
	var done, refused atomic.Int32
	for _, id := range ids {
		wg.Go(func() {
			_, url := c.Endpoint("/v1/sessions/" + id + "/exec")
			req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, url, bytes.NewReader(body))
			resp, err := hc.Do(req)
			if err != nil {
				t.Error(err)
				return
			}
			defer resp.Body.Close()
			head := make([]byte, 512)
			n, _ := io.ReadFull(resp.Body, head)
			rest, _ := io.Copy(io.Discard, resp.Body)
			switch {
			case resp.StatusCode == http.StatusOK && bytes.Contains(head[:n], []byte(`"outcome":"exited"`)) && int64(n)+rest > outCap:
				done.Add(1)
			case resp.StatusCode == http.StatusServiceUnavailable && bytes.Contains(head[:n], []byte("server.capacity.output")):
				refused.Add(1)
			default:
				t.Errorf("exec: status %d: %.300s", resp.StatusCode, head[:n])
			}
		})
	}
	wg.Wait()
	checkGrowth(t, grew(), budget, int(done.Load()), int(refused.Load()))
}

// TestCapturedOutputBoundedMCP is TestCapturedOutputBounded for MCP
// tools/call: many calls at once of a tool that prints its whole output
// ceiling, answered whole.
func TestCapturedOutputBoundedMCP(t *testing.T) {
	const (
		calls  = 24
		outCap = 16 << 20
		budget = 64 << 20
	)
	d, sock := serveConfig(t, fmt.Sprintf(`
server:
  capacity: {output: %d}
tools:
  big:
    command: [sh, -c, "head -c %d /dev/zero | tr '\\0' a"]
    limits: {memory: 64MiB, time: 120s, output: %d}
`, budget, outCap, outCap), nil)
	c := client.New(sock)
	hc, url := c.Endpoint("/mcp")
	post := func(session, body string) *http.Response {
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, url, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if session != "" {
			req.Header.Set("Mcp-Session-Id", session)
			req.Header.Set("Mcp-Protocol-Version", "2025-06-18")
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Error(err)
			return nil
		}
		return resp
	}
	init := post("", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"mem","version":"1"}}}`)
	session := init.Header.Get("Mcp-Session-Id")
	io.Copy(io.Discard, init.Body)
	init.Body.Close()
	if session == "" {
		t.Fatalf("initialize: %s", init.Status)
	}
	if r := post(session, `{"jsonrpc":"2.0","method":"notifications/initialized"}`); r != nil {
		r.Body.Close()
	}

	grew := heapGrowth(t)
	var wg sync.WaitGroup
	var done, refused atomic.Int32
	for i := range calls {
		wg.Go(func() {
			resp := post(session, fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"big","arguments":{}}}`, i+2))
			if resp == nil {
				return
			}
			defer resp.Body.Close()
			// Read as it comes, not kept: see TestCapturedOutputBounded.
			var n int64
			var tail []byte
			buf := make([]byte, 32<<10)
			for {
				k, err := resp.Body.Read(buf)
				n += int64(k)
				tail = append(tail, buf[:k]...)
				if len(tail) > 4096 {
					tail = append(tail[:0:0], tail[len(tail)-4096:]...)
				}
				if err != nil {
					break
				}
			}
			switch {
			case resp.StatusCode == http.StatusOK && n > outCap && !bytes.Contains(tail, []byte(`"isError":true`)):
				done.Add(1)
			case bytes.Contains(tail, []byte("server.capacity.output")):
				refused.Add(1)
			default:
				t.Errorf("call: status %d, %d bytes ending %.300q", resp.StatusCode, n, tail)
			}
		})
	}
	wg.Wait()
	checkGrowth(t, grew(), budget, int(done.Load()), int(refused.Load()))
	t.Logf("the fast path answered %d calls", d.mcp.FastCalls())
}
