package mcpserver

import (
	"fmt"
	"strings"
	"testing"

	"github.com/airlockhq/airlock/result"
)

// TestDenials: a tool result's text lists each distinct refusal once,
// at most five, after the output; allowed decisions and a client's
// early close are not refusals.
func TestDenials(t *testing.T) {
	r := &result.Result{Outcome: result.Exited, Stdout: result.Output("out\n")}
	if d := Denials(r); d != "" {
		t.Fatalf("no refusals: %q", d)
	}
	deny := func(dest string) result.EgressEvent {
		return result.EgressEvent{Kind: result.EgressProxy, Destination: dest, Code: result.EgressNotAllowed, Reason: "not allowed"}
	}
	r.Egress = []result.EgressEvent{deny("a.test:443"), deny("a.test:443"), {Allow: true, Destination: "ok.test:443"},
		{Kind: result.EgressTransparent, Destination: "b.test:443", Code: result.EgressClosed, Reason: "client closed before sending"}}
	r.Broker = []result.BrokerEvent{{Service: "gh", Method: "DELETE", Path: "/x", Code: result.BrokerNoOperation, Reason: "no operation matches DELETE /x"}}
	pieces, ok := ToolText(r)
	if !ok {
		t.Fatal("not text")
	}
	text := string(joined(pieces))
	if !strings.HasPrefix(text, "out\nairlock refused:\n- airlock refused a connection to a.test:443 (not allowed)") ||
		strings.Count(text, "a.test:443") != 1 || strings.Contains(text, "b.test") || strings.Contains(text, "ok.test") ||
		!strings.Contains(text, "- airlock's broker refused DELETE /x on service gh") {
		t.Errorf("text:\n%s", text)
	}
	for i := range 8 {
		r.Egress = append(r.Egress, deny(fmt.Sprintf("n%d.test:443", i)))
	}
	if d := Denials(r); strings.Count(d, "\n- airlock") != 5 || !strings.Contains(d, "- and 5 more") {
		t.Errorf("many refusals:\n%s", d)
	}
}

func joined(pieces [][]byte) []byte {
	var b []byte
	for _, p := range pieces {
		b = append(b, p...)
	}
	return b
}
