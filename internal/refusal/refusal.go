// Package refusal words airlock's refusals for whoever reads a tool's
// output, an agent's model first: one plain sentence that says what was
// refused, under which rule, and that the operator's config decides
// (issue 40). An agent that cannot tell a refusal from a network fault
// retries, or looks for a way around; one that reads this does neither.
package refusal

import (
	"fmt"

	"github.com/airlockhq/airlock/result"
)

// decides ends a sentence about a policy refusal.
const decides = "this is airlock's policy, not a network fault: retrying or another route is refused the same way, and only the operator's airlock config can allow it"

// Egress is the sentence of a refused egress decision (ev.Allow false):
// what was refused, the rule's own reason, and that the operator's
// config decides; a failure that is no refusal (a name that does not
// resolve, an upstream that does not answer) says so instead.
func Egress(ev result.EgressEvent) string {
	what := "a connection to " + ev.Destination
	if ev.Kind == result.EgressDNS {
		what = "the lookup of " + ev.Destination
	}
	switch ev.Code {
	case result.EgressLookupFailed, result.EgressUpstreamFailed, result.EgressNotPinned, result.EgressInternal:
		return fmt.Sprintf("airlock could not complete %s (%s); this is not a refusal by policy", what, ev.Reason)
	}
	return fmt.Sprintf("airlock refused %s (%s); %s.", what, ev.Reason, decides)
}

// Broker is the sentence of a refused broker call (ev.Allow false, or
// a call cut short).
func Broker(ev result.BrokerEvent) string {
	call := ev.Method + " " + ev.Path
	if ev.Service != "" {
		call += " on service " + ev.Service
	}
	verb := "refused"
	if !BrokerPolicy(ev.Code) {
		verb = "could not complete"
	}
	return fmt.Sprintf("airlock's broker %s %s (%s); %s.", verb, call, ev.Reason, BrokerRule(ev.Code))
}

// BrokerPolicy reports whether a broker code is a refusal by the
// operator's policy (rather than a fault on the host's side).
func BrokerPolicy(code string) bool {
	switch code {
	case result.BrokerNoSecret, result.BrokerShortSecret, result.BrokerUpstream, result.BrokerAddress, result.BrokerClosing, result.BrokerEncoding, result.BrokerPartial, result.BrokerResponseTooLarge:
		return false
	}
	return true
}

// BrokerRule is what a broker refusal of code adds to its reason: who
// decides.
func BrokerRule(code string) string {
	switch {
	case code == result.BrokerRate:
		return "the operator's airlock config sets the rate, and calls over it are refused until it allows more"
	case !BrokerPolicy(code):
		return "this is on the host's side or the upstream's, not the call's"
	}
	return "the service's operations in the operator's airlock config decide what may be called, and nothing else is"
}
