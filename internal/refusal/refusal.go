// Package refusal words airlock's refusals for whoever reads a tool's
// output, an agent's model first: one plain sentence that says what was
// refused, under which rule, and that the operator's config decides
// (issue 40). An agent that cannot tell a refusal from a network fault
// retries, or looks for a way around; one that reads this does neither.
package refusal

import (
	"fmt"
	"strings"

	"github.com/airlockhq/airlock/internal/termtext"
	"github.com/airlockhq/airlock/result"
)

// decides ends a sentence about a policy refusal.
const decides = "this is airlock's policy, not a network fault: retrying or another route is refused the same way, and only the operator's airlock config can allow it"

// ConnectPhrase is the reason phrase of a refused CONNECT's status line
// ("HTTP/1.1 403 " and this), which clients that never read the body of
// a refused tunnel show (curl -v, pip): ASCII, no CR or LF, and nothing
// the sandbox sent.
const ConnectPhrase = "Refused by airlock policy, not a network fault (only the operator's airlock config can allow it)"

// Policy reports whether an egress code is a refusal by the operator's
// policy (rather than a failure on the way: a name that does not
// resolve, an upstream that does not answer).
func Policy(code string) bool {
	switch code {
	case result.EgressLookupFailed, result.EgressUpstreamFailed, result.EgressNotPinned, result.EgressInternal:
		return false
	}
	return true
}

// Egress is the sentence of a refused egress decision (ev.Allow false):
// what was refused, the rule's own reason, and that the operator's
// config decides; a failure that is no refusal (a name that does not
// resolve, an upstream that does not answer) says so instead.
func Egress(ev result.EgressEvent) string {
	what := "a connection to " + ev.Destination
	if ev.Kind == result.EgressDNS {
		what = "the lookup of " + ev.Destination
	}
	if !Policy(ev.Code) {
		return fmt.Sprintf("airlock could not complete %s (%s); %s", what, ev.Reason, EgressRule(ev.Code))
	}
	return fmt.Sprintf("airlock refused %s (%s); %s.", what, ev.Reason, EgressRule(ev.Code))
}

// EgressRule is what an egress refusal of code adds to its reason: who
// decides, or that it was no refusal.
func EgressRule(code string) string {
	if !Policy(code) {
		return "this is not a refusal by policy"
	}
	return decides
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

// MaxListed bounds the refusals Text lists.
const MaxListed = 5

// Text is what an agent reads of a run's refusals after its output, in
// an MCP tool result's text and after an E2B command's stderr: the
// sentence of each distinct refusal, egress then broker, at most
// MaxListed and then a count, each escaped as terminal text (what the
// sandbox asked for, a name or a path, is quoted in it); "" when
// nothing was refused. A client's early close and an IPv6 lookup
// answered empty are not refusals.
func Text(r *result.Result) string {
	var lines []string
	seen := map[string]bool{}
	more := 0
	note := func(s string) {
		if seen[s] {
			return
		}
		seen[s] = true
		if len(lines) == MaxListed {
			more++
			return
		}
		lines = append(lines, s)
	}
	for _, ev := range r.Egress {
		if !ev.Allow && ev.Code != "" && ev.Code != result.EgressClosed && ev.Code != result.EgressNoIPv6 {
			note(Egress(ev))
		}
	}
	for _, ev := range r.Broker {
		if !ev.Allow && ev.Code != "" {
			note(Broker(ev))
		}
	}
	if len(lines) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("airlock refused:\n")
	for _, l := range lines {
		fmt.Fprintf(&b, "- %s\n", termtext.String(l))
	}
	if more > 0 {
		fmt.Fprintf(&b, "- and %d more (the run's egress and broker events list them)\n", more)
	}
	return b.String()
}
