package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// mcpBench compares, on the same daemon and warm pool, a tools/call of a
// trivial tool over streamable HTTP (the Go SDK's client on the unix
// socket) with the same run through the plain API, interleaved.
func mcpBench(sock string, n int, idle func() int, run func(string) error) error {
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "bench", Version: "1"}, nil).
		Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: "http://airlock/mcp", HTTPClient: hc}, nil)
	if err != nil {
		return err
	}
	defer cs.Close()
	call := func() error {
		r, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "warm", Arguments: map[string]any{}})
		if err != nil {
			return err
		}
		if r.IsError {
			return fmt.Errorf("tools/call: %+v", r.Content)
		}
		return nil
	}
	api := series{name: "POST /v1/runs (the plain API)"}
	viaMCP := series{name: "tools/call over streamable HTTP"}
	timed := func(s *series, keep bool, fn func() error) error {
		for idle() < 2 {
			time.Sleep(time.Millisecond)
		}
		t0 := time.Now()
		if err := fn(); err != nil {
			return err
		}
		if keep {
			s.d = append(s.d, time.Since(t0))
		}
		return nil
	}
	viaAPI := func() error { return run("warm") }
	for i := 0; i < n+n/10; i++ {
		// Alternate which goes first, so neither always follows the other.
		first, second := &api, &viaMCP
		f1, f2 := viaAPI, call
		if i%2 == 1 {
			first, second, f1, f2 = second, first, f2, f1
		}
		if err := timed(first, i >= n/10, f1); err != nil {
			return err
		}
		if err := timed(second, i >= n/10, f2); err != nil {
			return err
		}
	}
	fmt.Printf("\n## MCP (%d calls each, interleaved, warm pool, Go SDK client on the unix socket)\n\n", n)
	fmt.Println("| call: /bin/true in a warm sandbox | p50 | p99 |\n| --- | --- | --- |")
	for _, s := range []*series{&api, &viaMCP} {
		fmt.Printf("| %s | %s | %s |\n", s.name, ms(s.pct(0.5)), ms(s.pct(0.99)))
	}
	measured.mcpOver = viaMCP.pct(0.5) - api.pct(0.5)
	fmt.Printf("\nMCP overhead per call (p50): **%s** (%.2f× the API).\n",
		ms(measured.mcpOver), float64(viaMCP.pct(0.5))/float64(api.pct(0.5)))
	return nil
}
