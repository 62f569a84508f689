package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"runtime"
	"strconv"
	"sync"
	"time"

	"github.com/airlockhq/airlock/internal/egress"
	"github.com/airlockhq/airlock/internal/egress/policy"
	"github.com/airlockhq/airlock/internal/linux/netns"
	"golang.org/x/sys/unix"
)

// egressBench measures the egress gateway against direct loopback access
// to the same upstream: added latency per request, bulk throughput, and
// many connections held at once. The "sandbox" is a fresh network
// namespace with only lo, made the way sandboxes get theirs.
func egressBench(n int, size int64, conns int) error {
	zeros := make([]byte, 1<<20)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/big" {
			io.WriteString(w, "ok\n")
			return
		}
		w.Header().Set("Content-Length", strconv.FormatInt(size, 10))
		for left := size; left > 0; left -= int64(len(zeros)) {
			if _, err := w.Write(zeros[:min(left, int64(len(zeros)))]); err != nil {
				return
			}
		}
	})}
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		return err
	}
	defer srv.Close()
	go srv.Serve(ln)
	port := ln.Addr().(*net.TCPAddr).Port
	dest, err := policy.Compile(policy.Spec{Host: "upstream.bench:" + strconv.Itoa(port), Addresses: []string{"127.0.0.1"}, Private: true})
	if err != nil {
		return err
	}
	ns, err := netns.New()
	if err != nil {
		return err
	}
	defer ns.Close()
	ctx := context.Background()
	gw, err := egress.Attach(ctx, ns, egress.Config{
		SandboxID: "bench",
		Policy:    policy.New([]policy.Destination{dest}),
		Limits:    egress.Limits{Connections: conns + 16, Bytes: 1 << 50},
	})
	if err != nil {
		return err
	}
	defer gw.Close(ctx)
	inside, err := newInsideWorker(ns)
	if err != nil {
		return err
	}
	defer inside.stop()

	direct := "http://127.0.0.1:" + strconv.Itoa(port)
	viaName := "http://upstream.bench:" + strconv.Itoa(port)
	proxyURL, _ := url.Parse("http://" + egress.ProxyAddr)
	directClient := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	// The HTTP client dials on goroutines of its own; its dials are
	// handed to the thread inside the namespace.
	proxyClient := &http.Client{Transport: &http.Transport{DisableKeepAlives: true, Proxy: http.ProxyURL(proxyURL), DialContext: inside.dial}}
	get := func(c *http.Client, u string) error { return fetch(c, u, nil) }

	// Latency: one fresh connection per request both ways, interleaved.
	d := series{name: "direct"}
	p := series{name: "proxy"}
	for i := 0; i < n+n/10; i++ {
		t0 := time.Now()
		if err := get(directClient, direct+"/"); err != nil {
			return err
		}
		t1 := time.Now()
		if err := get(proxyClient, viaName+"/"); err != nil {
			return err
		}
		t2 := time.Now()
		if i >= n/10 { // the first tenth warms up
			d.d = append(d.d, t1.Sub(t0))
			p.d = append(p.d, t2.Sub(t1))
		}
	}
	fmt.Printf("\n## Egress\n\nA GET of a small body from a loopback upstream, a fresh connection each time, %d runs each, interleaved: direct from the host vs from a sandbox's namespace through airlock's proxy (absolute-form).\n\n", n)
	fmt.Println("| Path | p50 | p99 |\n| --- | --- | --- |")
	for _, s := range []*series{&d, &p} {
		fmt.Printf("| %s | %s | %s |\n", s.name, ms(s.pct(0.5)), ms(s.pct(0.99)))
	}
	fmt.Printf("\nAdded latency (p50): **%s** (target ≤ 0.50 ms)\n\n", ms(p.pct(0.5)-d.pct(0.5)))

	// Throughput: the same download direct, through a CONNECT tunnel
	// (bytes spliced in the kernel) and absolute-form (relayed by the
	// proxy's HTTP stack).
	const rounds = 3
	var dT, cT, fT []float64
	for range rounds {
		s, err := timeDownload(func() error { return get(directClient, direct+"/big") }, size)
		if err != nil {
			return err
		}
		dT = append(dT, s)
		s, err = timeDownload(func() error { return tunnelGet(inside, port, "/big", size) }, size)
		if err != nil {
			return err
		}
		cT = append(cT, s)
		s, err = timeDownload(func() error { return get(proxyClient, viaName+"/big") }, size)
		if err != nil {
			return err
		}
		fT = append(fT, s)
	}
	md, mc, mf := median(dT), median(cT), median(fT)
	fmt.Printf("Download of %s, median of %d: direct **%.0f MiB/s**; CONNECT tunnel **%.0f MiB/s** (%.0f %% of direct, target ≥ 70 %%); absolute-form **%.0f MiB/s** (%.0f %%)\n\n",
		humanBytes(size), rounds, md, mc, 100*mc/md, mf, 100*mf/md)

	// Many connections held at once from one sandbox.
	held, errs, took := concurrentTunnels(inside, port, conns)
	fmt.Printf("%d concurrent CONNECT tunnels from one sandbox, all open at once: %d held, %d errors (%s)\n\n", conns, held, errs, took.Round(time.Millisecond))
	return nil
}

// insideWorker runs functions on one OS thread that stays in a network
// namespace, so sockets they open are the sandbox's, without a namespace
// switch per call.
type insideWorker struct {
	work chan func()
}

func newInsideWorker(ns *os.File) (*insideWorker, error) {
	w := &insideWorker{work: make(chan func())}
	ready := make(chan error)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread dies with the goroutine
		if err := unix.Setns(int(ns.Fd()), unix.CLONE_NEWNET); err != nil {
			ready <- err
			return
		}
		ready <- nil
		for f := range w.work {
			f()
		}
	}()
	return w, <-ready
}

func (w *insideWorker) do(f func() error) error {
	done := make(chan error)
	w.work <- func() { done <- f() }
	return <-done
}

func (w *insideWorker) stop() { close(w.work) }

// dial is a DialContext that opens the socket inside the namespace.
func (w *insideWorker) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	var c net.Conn
	err := w.do(func() error {
		var d net.Dialer
		var err error
		c, err = d.DialContext(ctx, network, addr)
		return err
	})
	return c, err
}

// tunnelGet opens a CONNECT tunnel through the proxy and downloads path
// over it.
func tunnelGet(inside *insideWorker, port int, path string, size int64) error {
	c, br, err := openTunnel(inside, port)
	if err != nil {
		return err
	}
	defer c.Close()
	fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: upstream.bench\r\nConnection: close\r\n\r\n", path)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return err
	}
	n, err := io.Copy(io.Discard, resp.Body)
	if err == nil && n != size {
		err = fmt.Errorf("got %d bytes, want %d", n, size)
	}
	return err
}

func openTunnel(inside *insideWorker, port int) (net.Conn, *bufio.Reader, error) {
	c, err := inside.dial(context.Background(), "tcp4", egress.ProxyAddr)
	if err != nil {
		return nil, nil, err
	}
	fmt.Fprintf(c, "CONNECT upstream.bench:%d HTTP/1.1\r\nHost: upstream.bench\r\n\r\n", port)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 200 {
		c.Close()
		if err == nil {
			err = fmt.Errorf("CONNECT: %s", resp.Status)
		}
		return nil, nil, err
	}
	return c, br, nil
}

// concurrentTunnels opens k tunnels, then sends one request over each
// while all are open, and counts the ones that answered.
func concurrentTunnels(inside *insideWorker, port, k int) (held, errs int, took time.Duration) {
	start := time.Now()
	type tun struct {
		c  net.Conn
		br *bufio.Reader
	}
	var tuns []tun
	for range k {
		var t tun
		var err error
		if t.c, t.br, err = openTunnel(inside, port); err != nil {
			errs++
			continue
		}
		tuns = append(tuns, t)
	}
	var mu sync.Mutex // guards held and errs
	var wg sync.WaitGroup
	for _, t := range tuns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			fmt.Fprintf(t.c, "GET / HTTP/1.1\r\nHost: upstream.bench\r\n\r\n")
			resp, err := http.ReadResponse(t.br, nil)
			if err == nil {
				_, err = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
			mu.Lock()
			if err == nil && resp.StatusCode == 200 {
				held++
			} else {
				errs++
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	for _, t := range tuns {
		t.c.Close()
	}
	return held, errs, time.Since(start)
}

// timeDownload runs f and returns MiB/s for size bytes.
func timeDownload(f func() error, size int64) (float64, error) {
	start := time.Now()
	if err := f(); err != nil {
		return 0, err
	}
	return float64(size) / (1 << 20) / time.Since(start).Seconds(), nil
}

func median(v []float64) float64 {
	s := append([]float64(nil), v...)
	for i := range s {
		for j := i + 1; j < len(s); j++ {
			if s[j] < s[i] {
				s[i], s[j] = s[j], s[i]
			}
		}
	}
	return s[len(s)/2]
}

func humanBytes(n int64) string {
	if n >= 1<<30 && n%(1<<30) == 0 {
		return fmt.Sprintf("%d GiB", n>>30)
	}
	return fmt.Sprintf("%d MiB", n>>20)
}

// fetch GETs u with the given headers and reads the whole answer, which
// must be 200.
func fetch(c *http.Client, u string, h http.Header) error {
	req, err := http.NewRequest("GET", u, nil)
	if err != nil {
		return err
	}
	for k, v := range h {
		req.Header[k] = v
	}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		return fmt.Errorf("GET %s: %s", u, resp.Status)
	}
	return err
}
