package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"

	"time"

	"github.com/airlockhq/airlock/internal/broker"
	"github.com/airlockhq/airlock/internal/broker/brokerspec"
	"github.com/airlockhq/airlock/internal/config"
	"github.com/airlockhq/airlock/internal/linux/netns"
)

// brokerBench measures a brokered call against a direct call to the same
// loopback upstream, which demands the credential both ways.
func brokerBench(n int) error {
	const token = "bench-token-0123456789abcdef"
	os.Setenv("AIRLOCK_BENCH_TOKEN", token)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+token {
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		io.WriteString(w, `{"number":1,"title":"hello"}`)
	})}
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		return err
	}
	defer srv.Close()
	go srv.Serve(ln)
	port := ln.Addr().(*net.TCPAddr).Port
	cfg, err := config.Parse("bench.yaml", []byte(fmt.Sprintf(`
secrets:
  tok: {env: AIRLOCK_BENCH_TOKEN}
services:
  gh:
    upstream: http://api.bench:%d
    addresses: [127.0.0.1]
    private: true
    rate: 100000
    credential: {secret: tok, template: "Bearer {secret}"}
    operations:
      - GET /repos/{owner}/{repo}/issues/{number}
`, port)))
	if err != nil {
		return err
	}
	svc, _ := cfg.Service("gh")
	ns, err := netns.New()
	if err != nil {
		return err
	}
	defer ns.Close()
	ctx := context.Background()
	b, err := broker.Attach(ctx, ns, broker.Config{SandboxID: "bench", Services: []*brokerspec.Service{svc}, Secrets: map[string]broker.Secret{"tok": cfg.Secrets["tok"]}})
	if err != nil {
		return err
	}
	defer b.Close(ctx)
	inside, err := newInsideWorker(ns)
	if err != nil {
		return err
	}
	defer inside.stop()
	direct := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	brokered := &http.Client{Transport: &http.Transport{DisableKeepAlives: true, DialContext: inside.dial}}
	auth := http.Header{"Authorization": {"Bearer " + token}}
	d := series{name: "direct (credential in the caller)"}
	p := series{name: "through the broker (credential added on the host)"}
	directURL := "http://127.0.0.1:" + strconv.Itoa(port) + "/repos/octo/hello/issues/1"
	brokerURL := broker.URL + "/gh/repos/octo/hello/issues/1"
	for i := 0; i < n+n/10; i++ {
		t0 := time.Now()
		if err := fetch(direct, directURL, auth); err != nil {
			return err
		}
		t1 := time.Now()
		if err := fetch(brokered, brokerURL, nil); err != nil {
			return err
		}
		t2 := time.Now()
		if i >= n/10 {
			d.d = append(d.d, t1.Sub(t0))
			p.d = append(p.d, t2.Sub(t1))
		}
	}
	fmt.Printf("## Broker\n\nA GET answered with a small JSON body by a loopback upstream that demands a bearer token, a fresh client connection each time, %d runs each, interleaved: direct from the host with the token vs from a sandbox's namespace through the broker, which matches the operation, adds the token, and redacts the answer.\n\n", n)
	fmt.Println("| Path | p50 | p99 |\n| --- | --- | --- |")
	for _, s := range []*series{&d, &p} {
		fmt.Printf("| %s | %s | %s |\n", s.name, ms(s.pct(0.5)), ms(s.pct(0.99)))
	}
	fmt.Printf("\nAdded latency (p50): **%s** (target ≤ 1.00 ms)\n\n", ms(p.pct(0.5)-d.pct(0.5)))
	return nil
}
