package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/client"
	"github.com/airlockhq/airlock/internal/mcpserver"
	"github.com/airlockhq/airlock/result"
)

// mcpProtocol is the protocol version the instant server of clientsAlone
// answers initialize with.
const mcpProtocol = "2025-06-18"

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
	clientAPI, clientMCP, err := clientsAlone(n)
	if err != nil {
		return err
	}
	measured.mcpClient = clientMCP - clientAPI
	fmt.Printf("\nThe same two clients against a server that answers at once with the same bytes (no daemon, no sandbox), interleaved: "+
		"API %s, MCP %s p50, so **%s** of the overhead is the clients' own (the SDK's goroutine hand-offs and JSON).\n",
		ms(clientAPI), ms(clientMCP), ms(measured.mcpClient))
	return nil
}

// clientsAlone measures the two clients of mcpBench on their own: each
// call answered at once, by a plain HTTP server on a unix socket, with
// the answer the daemon gives (a tools/call's result, or the API's
// result object). A pause between calls lets the clients' threads go
// idle, as they do while a sandbox runs.
func clientsAlone(n int) (viaAPI, viaMCP time.Duration, err error) {
	dir, err := os.MkdirTemp("", "airlock-bench-clients")
	if err != nil {
		return 0, 0, err
	}
	defer os.RemoveAll(dir)
	sock := filepath.Join(dir, "s.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		return 0, 0, err
	}
	res := &result.Result{SandboxID: "0123456789abcdef0123", Outcome: result.Exited, Usage: result.Usage{WallMillis: 4}}
	runAnswer, err := json.Marshal(res)
	if err != nil {
		return 0, 0, err
	}
	callAnswer, err := json.Marshal(mcpserver.ToolResult(res))
	if err != nil {
		return 0, 0, err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/v1/runs", func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(runAnswer)
	})
	mux.HandleFunc("/mcp", func(w http.ResponseWriter, r *http.Request) {
		var msg struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
		}
		if r.Method != http.MethodPost || json.NewDecoder(r.Body).Decode(&msg) != nil {
			w.WriteHeader(http.StatusMethodNotAllowed)
			return
		}
		w.Header().Set("Mcp-Session-Id", "bench")
		if msg.ID == nil {
			w.WriteHeader(http.StatusAccepted) // a notification
			return
		}
		w.Header().Set("Content-Type", "application/json")
		switch msg.Method {
		case "initialize":
			fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":{"protocolVersion":%q,"capabilities":{"tools":{}},"serverInfo":{"name":"bench","version":"1"}}}`, msg.ID, mcpProtocol)
		case "tools/call":
			fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":%s}`, msg.ID, callAnswer)
		default:
			fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"error":{"code":-32601,"message":"method not found"}}`, msg.ID)
		}
	})
	srv := &http.Server{Handler: mux}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "bench", Version: "1"}, nil).
		Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: "http://airlock/mcp", HTTPClient: hc, DisableStandaloneSSE: true}, nil)
	if err != nil {
		return 0, 0, fmt.Errorf("the MCP client against the instant server: %w", err)
	}
	defer cs.Close()
	c := client.New(sock)
	a, m := series{}, series{}
	for i := 0; i < n+n/10; i++ {
		for k := range 2 {
			time.Sleep(2 * time.Millisecond)
			t0 := time.Now()
			var s *series
			if (i+k)%2 == 0 {
				s = &a
				_, err = c.Run(context.Background(), api.RunRequest{Tool: "warm", Argv: []string{"/bin/true"}})
			} else {
				s = &m
				_, err = cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "warm", Arguments: map[string]any{}})
			}
			if err != nil {
				return 0, 0, err
			}
			if i >= n/10 {
				s.d = append(s.d, time.Since(t0))
			}
		}
	}
	return a.pct(0.5), m.pct(0.5), nil
}
