package mcpedge

import (
	"encoding/json"
	"net/http"
	"testing"
)

// FuzzParseFastCall: what the fast path takes for a tools/call is one,
// well formed.
func FuzzParseFastCall(f *testing.F) {
	f.Add(`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"echo","arguments":{"word":"fast"}}}`)
	f.Add(`{"jsonrpc":"2.0","id":"a","method":"tools/call","params":{"name":"echo","arguments":null}}`)
	f.Add(`[{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"echo"}}]`)
	f.Add(`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"echo","_meta":{}}}`)
	h := http.Header{"Content-Type": {"application/json"}, "Accept": {"application/json, text/event-stream"}}
	f.Fuzz(func(t *testing.T, body string) {
		c, ok := parseFastCall(h, []byte(body))
		if !ok {
			return
		}
		if c.name == "" || !validID(c.id) || (c.arguments != nil && !json.Valid(c.arguments)) || !json.Valid([]byte(body)) {
			t.Fatalf("accepted %q as %+v", body, c)
		}
	})
}
