package mcpedge

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/airlockhq/airlock/internal/mcpserver"
	"github.com/airlockhq/airlock/result"
)

// TestLazyMCPAnswer checks that a tools/call answer written from the
// run's buffers is the bytes of the whole answer encoded at once, and
// that output that is not valid UTF-8 falls back to that.
func TestLazyMCPAnswer(t *testing.T) {
	for name, r := range map[string]*result.Result{
		"plain":    {Outcome: result.Exited, Stdout: result.Output("hello <world> & \u2028\n")},
		"stderr":   {Outcome: result.Exited, ExitCode: 3, Stdout: result.Output("out"), Stderr: result.Output("\"err\"\t\x01")},
		"empty":    {Outcome: result.Exited},
		"breach":   {Outcome: result.LimitExceeded, Limit: &result.Limit{Name: result.LimitOutput, Ceiling: 10, Observed: 11, Unit: result.UnitBytes}, Stdout: result.Output(strings.Repeat("x\n", 50000)), Truncated: true},
		"invalid":  {Outcome: result.Exited, Stdout: result.Output("\xff\xfe")},
		"id marks": {Outcome: result.Exited, Stdout: result.Output(`"airlock-`)},
	} {
		t.Run(name, func(t *testing.T) {
			id := json.RawMessage(`"id-1"`)
			want, err := json.Marshal(fastAnswer{JSONRPC: "2.0", ID: id, Result: mcpserver.ToolResult(r)})
			if err != nil {
				t.Fatal(err)
			}
			lazy, isLazy := mcpserver.LazyToolResult(r)
			w := httptest.NewRecorder()
			if !writeLazyResult(w, id, lazy) {
				if isLazy {
					t.Fatal("a lazy result was not written")
				}
				got, _ := json.Marshal(fastAnswer{JSONRPC: "2.0", ID: id, Result: lazy})
				if !bytes.Equal(got, want) {
					t.Fatalf("fallback:\ngot  %.300s\nwant %.300s", got, want)
				}
				return
			}
			if got := w.Body.Bytes(); !bytes.Equal(got, want) {
				t.Fatalf("got  %.300s\nwant %.300s", got, want)
			}
			if cl := w.Header().Get("Content-Length"); cl != fmt.Sprint(len(want)) {
				t.Fatalf("Content-Length %s, want %d", cl, len(want))
			}
		})
	}
}
