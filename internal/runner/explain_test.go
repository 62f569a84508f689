package runner

import (
	"bytes"
	"strings"
	"testing"

	"github.com/airlockhq/airlock/internal/refusal"
	"github.com/airlockhq/airlock/result"
)

// TestExplainerEscapes: a denial line quotes what the sandbox asked for,
// a name or a path of its choosing; controls in it are printed escaped,
// one line per denial.
func TestExplainerEscapes(t *testing.T) {
	var b bytes.Buffer
	explain := Explainer(&b)
	explain(result.Event{Egress: &result.EgressEvent{Kind: result.EgressDNS, Destination: "evil\u009b2J\x1b]0;t\x07\u2028.example", Reason: "not on the list\nairlock: forged"}})
	explain(result.Event{Broker: &result.BrokerEvent{Method: "GET", Service: "gh", Path: "/x\u009dy", Reason: "no operation"}})
	got := b.String()
	want := "airlock: egress denied (dns): evil\\u009b2J\\x1b]0;t\\x07\\u2028.example: not on the list\\nairlock: forged; " + refusal.EgressRule("") + "\n" +
		"airlock: broker refused GET gh/x\\u009dy: no operation; " + refusal.BrokerRule("") + "\n"
	if got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	if strings.ContainsAny(got, "\u009b\u009d\x1b\x07\u2028") {
		t.Errorf("a control went out raw: %q", got)
	}
}
