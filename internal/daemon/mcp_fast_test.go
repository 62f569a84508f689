package daemon

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlockhq/airlock/internal/mcpedge"
)

// TestMCPFastPath: with the Go SDK's client, a plain tools/call is
// answered by the fast path and gives what the SDK's path gives (a call
// with a progress token goes there); tool errors and unknown tools come
// out as before.
func TestMCPFastPath(t *testing.T) {
	d, sock := serveConfig(t, mcpConfig, nil)
	cs := mcpConnect(t, sock, nil)
	ctx := t.Context()
	fast := func() int64 { return d.mcp.FastCalls() }

	before := fast()
	r, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"word": "hi"}})
	if err != nil || r.IsError || resultText(r) != "hi\n" {
		t.Fatalf("echo: %+v %v", r, err)
	}
	if fast() != before+1 {
		t.Fatalf("a plain tools/call did not take the fast path (%d calls, was %d)", fast(), before)
	}
	viaSDK, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"word": "hi"}, Meta: mcp.Meta{"progressToken": "p"}})
	if err != nil || viaSDK.IsError || resultText(viaSDK) != "hi\n" {
		t.Fatalf("echo with progress: %+v %v", viaSDK, err)
	}
	if fast() != before+1 {
		t.Fatal("a tools/call with a progress token took the fast path")
	}
	outcome := func(r *mcp.CallToolResult) string {
		b, _ := json.Marshal(r.StructuredContent)
		var v struct {
			Outcome  string `json:"outcome"`
			ExitCode int    `json:"exit_code"`
			Stdout   string `json:"stdout"`
		}
		_ = json.Unmarshal(b, &v)
		return v.Outcome + " " + v.Stdout
	}
	if outcome(r) != outcome(viaSDK) || outcome(r) != "exited hi\n" {
		t.Errorf("fast path %q, SDK %q", outcome(r), outcome(viaSDK))
	}
	// A refused argument is the same tool error on the fast path.
	r, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"word": "--x"}})
	if err != nil || !r.IsError || !strings.Contains(resultText(r), "must not start with '-'") {
		t.Fatalf("echo --x: %+v %v", r, err)
	}
	// Unknown tools and tools without a command are the SDK's to refuse.
	before = fast()
	for _, name := range []string{"nope", "plain"} {
		if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name}); err == nil || !strings.Contains(err.Error(), "unknown tool") {
			t.Errorf("calling %s: %v", name, err)
		}
	}
	if fast() != before {
		t.Error("an unknown tool took the fast path")
	}
}

// TestMCPFastPathRefuses sends raw requests: the fast path answers only a
// single, plain tools/call of a configured tool on a session whose client
// has said it finished initializing, with the protocol version it said
// that with; everything else goes to the SDK, which answers (or refuses)
// as it always did (it runs a call made before the client said it was
// initialized; the fast path is stricter).
func TestMCPFastPathRefuses(t *testing.T) {
	d, sock := serveConfig(t, mcpConfig, nil)
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
	const version = "2025-06-18"
	type answer struct {
		status int
		ctype  string
		body   string
		sess   string
	}
	post := func(session, body string, hdr map[string]string) answer {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, "http://airlock/mcp", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if session != "" {
			req.Header.Set("Mcp-Session-Id", session)
		}
		for k, v := range hdr {
			if v == "" {
				req.Header.Del(k)
			} else {
				req.Header.Set(k, v)
			}
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return answer{resp.StatusCode, resp.Header.Get("Content-Type"), string(b), resp.Header.Get("Mcp-Session-Id")}
	}
	withVersion := map[string]string{"Mcp-Protocol-Version": version}
	init := post("", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"`+version+`","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`, nil)
	if init.status != http.StatusOK || init.sess == "" {
		t.Fatalf("initialize: %+v", init)
	}
	sess := init.sess
	call := `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"echo","arguments":{"word":"fast"}}}`

	// Before the client says it is initialized: the SDK's (which runs it).
	before := d.mcp.FastCalls()
	for _, hdr := range []map[string]string{withVersion, nil} {
		a := post(sess, call, hdr)
		if d.mcp.FastCalls() != before || a.ctype != "text/event-stream" {
			t.Fatalf("a call before initialized (headers %v) took the fast path: %+v", hdr, a)
		}
	}
	if a := post(sess, `{"jsonrpc":"2.0","method":"notifications/initialized"}`, withVersion); a.status != http.StatusAccepted {
		t.Fatalf("initialized: %+v", a)
	}

	// The plain call now takes the fast path, answered as one JSON object.
	a := post(sess, call, withVersion)
	if d.mcp.FastCalls() != before+1 || a.status != http.StatusOK || a.ctype != "application/json" {
		t.Fatalf("plain call: %+v (fast calls %d, was %d)", a, d.mcp.FastCalls(), before)
	}
	var resp struct {
		JSONRPC string          `json:"jsonrpc"`
		ID      json.RawMessage `json:"id"`
		Result  struct {
			Content []struct{ Text string } `json:"content"`
			IsError bool                    `json:"isError"`
		} `json:"result"`
	}
	if err := json.Unmarshal([]byte(a.body), &resp); err != nil || resp.JSONRPC != "2.0" || string(resp.ID) != "7" ||
		len(resp.Result.Content) != 1 || resp.Result.Content[0].Text != "fast\n" || resp.Result.IsError {
		t.Fatalf("plain call answered %s (%v)", a.body, err)
	}

	// Each of these goes to the SDK.
	for _, tc := range []struct {
		name, body string
		hdr        map[string]string
	}{
		{"another protocol version", call, map[string]string{"Mcp-Protocol-Version": "2025-03-26"}},
		{"no protocol version", call, map[string]string{"Mcp-Protocol-Version": ""}},
		{"a progress token", `{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"echo","arguments":{"word":"x"},"_meta":{"progressToken":"p"}}}`, withVersion},
		{"another parameter", `{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"echo","arguments":{"word":"x"},"task":{}}}`, withVersion},
		{"a batch", "[" + call + "]", withVersion},
		{"a null id", `{"jsonrpc":"2.0","id":null,"method":"tools/call","params":{"name":"echo","arguments":{"word":"x"}}}`, withVersion},
		{"arguments not an object", `{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"echo","arguments":["x"]}}`, withVersion},
		{"another member", `{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"echo"},"x":1}`, withVersion},
		{"a built-in tool", `{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"airlock_run","arguments":{}}}`, withVersion},
		{"a tool without a command", `{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"plain"}}`, withVersion},
		{"not JSON", `{"jsonrpc":"2.0","id":8,`, withVersion},
		{"plain text", call, map[string]string{"Mcp-Protocol-Version": version, "Content-Type": "text/plain"}},
		{"no event streams accepted", call, map[string]string{"Mcp-Protocol-Version": version, "Accept": "application/json"}},
		{"a body over the fast path's size", `{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"echo","arguments":{"word":"` + strings.Repeat("y", mcpedge.MaxFastBody) + `"}}}`, withVersion},
	} {
		before := d.mcp.FastCalls()
		a := post(sess, tc.body, tc.hdr)
		if d.mcp.FastCalls() != before {
			t.Errorf("%s: took the fast path: %+v", tc.name, a)
		}
		if a.status == http.StatusOK && a.ctype == "application/json" && strings.Contains(a.body, `"result"`) && !strings.Contains(tc.name, "version") {
			// The SDK answers tools/call as an event stream.
			t.Errorf("%s: answered like the fast path: %+v", tc.name, a)
		}
	}

	// Another session's id, or none known: not the fast path either.
	before = d.mcp.FastCalls()
	if a := post("no-such-session", call, withVersion); a.status != http.StatusNotFound || d.mcp.FastCalls() != before {
		t.Errorf("unknown session: %+v", a)
	}
	// A request naming an unknown session is answered without its body
	// being read: one whose body never comes still gets its 404 at once.
	// (Its length is over what net/http itself reads ahead of an answer.)
	conn, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST /mcp HTTP/1.1\r\nHost: airlock\r\nContent-Type: application/json\r\n"+
		"Accept: application/json, text/event-stream\r\nMcp-Session-Id: no-such-session-either\r\n"+
		"Content-Length: 10000000\r\n\r\n{\"jsonrpc\":\"2.0\",")
	_ = conn.SetReadDeadline(time.Now().Add(3 * time.Second))
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "HTTP/1.1 404") {
		t.Errorf("a body that never comes, on an unknown session: %q, %v; want a 404 at once", line, err)
	}
	// Once the session is deleted, its id gets nothing.
	req, _ := http.NewRequest(http.MethodDelete, "http://airlock/mcp", nil)
	req.Header.Set("Mcp-Session-Id", sess)
	req.Header.Set("Mcp-Protocol-Version", version)
	if resp, err := hc.Do(req); err != nil {
		t.Fatal(err)
	} else {
		resp.Body.Close()
	}
	if a := post(sess, call, withVersion); a.status != http.StatusNotFound || d.mcp.FastCalls() != before {
		t.Errorf("deleted session: %+v", a)
	}
}
