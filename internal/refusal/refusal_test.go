package refusal

import (
	"strings"
	"testing"

	"github.com/airlockhq/airlock/result"
)

func TestEgress(t *testing.T) {
	for _, tt := range []struct {
		ev   result.EgressEvent
		want string
	}{
		{result.EgressEvent{Kind: result.EgressProxy, Destination: "pypi.org:443", Code: result.EgressNotAllowed, Reason: `"pypi.org" is not an allowed destination`},
			`airlock refused a connection to pypi.org:443 ("pypi.org" is not an allowed destination); this is airlock's policy, not a network fault: retrying or another route is refused the same way, and only the operator's airlock config can allow it.`},
		{result.EgressEvent{Kind: result.EgressDNS, Destination: "evil.test", Code: result.EgressNotAllowed, Reason: "not on the list"},
			"airlock refused the lookup of evil.test (not on the list); this is airlock's policy"},
		{result.EgressEvent{Kind: result.EgressProxy, Destination: "api.test:443", Code: result.EgressUpstreamFailed, Reason: "connection refused"},
			"airlock could not complete a connection to api.test:443 (connection refused); this is not a refusal by policy"},
	} {
		if got := Egress(tt.ev); !strings.HasPrefix(got, tt.want) {
			t.Errorf("%+v:\n got %s\nwant %s", tt.ev, got, tt.want)
		}
	}
}

func TestBroker(t *testing.T) {
	for _, tt := range []struct {
		ev   result.BrokerEvent
		want string
	}{
		{result.BrokerEvent{Service: "gh", Method: "DELETE", Path: "/repos/o/r", Code: result.BrokerNoOperation, Reason: "no operation matches DELETE /repos/o/r"},
			"airlock's broker refused DELETE /repos/o/r on service gh (no operation matches DELETE /repos/o/r); the service's operations in the operator's airlock config decide what may be called, and nothing else is."},
		{result.BrokerEvent{Service: "gh", Method: "GET", Path: "/x", Code: result.BrokerRate, Reason: "over 3 calls a minute"},
			"airlock's broker refused GET /x on service gh (over 3 calls a minute); the operator's airlock config sets the rate"},
		{result.BrokerEvent{Service: "gh", Method: "GET", Path: "/x", Code: result.BrokerUpstream, Reason: "upstream unreachable"},
			"airlock's broker could not complete GET /x on service gh (upstream unreachable); this is on the host's side"},
	} {
		if got := Broker(tt.ev); !strings.HasPrefix(got, tt.want) {
			t.Errorf("%+v:\n got %s\nwant %s", tt.ev, got, tt.want)
		}
	}
}
