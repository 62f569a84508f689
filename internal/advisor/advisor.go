// Package advisor proposes, from a tool's recorded egress, DNS and broker
// decisions, the narrowest config that would have allowed what its runs
// needed and were refused, and says what the tool was given and never
// used (`airlock policy suggest`, GET /v1/tools/{name}/policy-suggestion).
//
// It is pure: it reads a tool's config and audit events and returns an
// api.PolicySuggestion, with the YAML fragment that puts it into a config.
// Decisions are judged again against the config as it is now, with the
// same matchers the gateway and the broker use (policy.Match,
// route.Template.Match), so a suggestion never adds what the config
// already allows, and "used" means "what the config now answers".
//
// What it will not do matters as much: it adds names, not wildcards,
// unless asked, and then states each wildcard's cost; it never proposes a
// destination that weakens the address checks (a metadata or link-local
// address, a private one, private: true), only notes the refusals; and it
// keeps a service's operations literal, as they were called.
package advisor

import (
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/internal/broker/brokerspec"
	"github.com/airlockhq/airlock/internal/broker/route"
	"github.com/airlockhq/airlock/internal/config"
	"github.com/airlockhq/airlock/internal/egress/policy"
	"github.com/airlockhq/airlock/result"
)

// Kinds of audit events the advisor reads.
const (
	kindEgress = "egress"
	kindDNS    = "dns"
	kindBroker = "broker"
)

// Input is what a suggestion is made from.
type Input struct {
	// Config is the config now; Tool names the tool in it.
	Config *config.Config
	Tool   string
	// Events are the tool's egress, DNS and broker events, oldest first;
	// other kinds and other tools' events are skipped.
	Events []api.AuditEvent
	// Since and Until are the period the events were read from.
	Since, Until time.Time
	// Truncated says Events stopped at a cap before Until.
	Truncated bool
	// Wildcards lets added names under one parent domain collapse into
	// *.parent.
	Wildcards bool
}

// tally counts decisions for one entry.
type tally struct {
	allowed, refused int
	first, last      time.Time
}

func (t *tally) add(at time.Time, allowed bool) {
	if allowed {
		t.allowed++
	} else {
		t.refused++
	}
	if t.first.IsZero() || at.Before(t.first) {
		t.first = at
	}
	if at.After(t.last) {
		t.last = at
	}
}

// need is a name or address runs were refused for want of an entry.
type need struct {
	tally
	host  string
	ip    bool
	ports map[uint16]bool // empty: only DNS lookups were seen
}

// Suggest makes the suggestion. The only error is a tool the config does
// not have.
func Suggest(in Input) (*api.PolicySuggestion, error) {
	t, err := in.Config.Tool(in.Tool)
	if err != nil {
		return nil, err
	}
	a := &analysis{
		in:    in,
		tool:  t,
		pol:   policy.New(t.Egress),
		used:  make([]tally, len(t.Egress)),
		needs: map[string]*need{},
		names: map[string]bool{},
		notes: map[string]*note{},
		ops:   map[string]*svcUse{},
	}
	out := &api.PolicySuggestion{Tool: in.Tool, Since: in.Since, Until: in.Until, Truncated: in.Truncated, Wildcards: in.Wildcards}
	for _, ev := range in.Events {
		if ev.Tool != in.Tool {
			continue
		}
		var ok bool
		switch ev.Kind {
		case kindEgress, kindDNS:
			ok = a.egress(ev)
		case kindBroker:
			ok = a.broker(ev)
		}
		if ok {
			out.Decisions++
			if out.First.IsZero() || ev.Time.Before(out.First) {
				out.First = ev.Time
			}
			if ev.Time.After(out.Last) {
				out.Last = ev.Time
			}
		}
	}
	out.Egress = a.egressSuggestions()
	out.Services = a.serviceSuggestions()
	out.Notes = a.noteLines()
	if in.Truncated {
		out.Notes = append(out.Notes, fmt.Sprintf("more decisions were recorded than one suggestion reads (%d): this one covers those up to %s; ask again with a later --since for the rest", out.Decisions, stamp(out.Last)))
	}
	out.YAML = Render(out)
	return out, nil
}

// analysis is one suggestion's working state.
type analysis struct {
	in   Input
	tool *config.Tool
	pol  *policy.Policy
	// used counts, per entry of tool.Egress, the decisions it allows now.
	used []tally
	// needs are the hosts refused for want of an entry, by host.
	needs map[string]*need
	// names are every distinct name seen, allowed or not: the cost of a
	// wildcard is counted in them.
	names map[string]bool
	notes map[string]*note
	ops   map[string]*svcUse
}

// note is a kind of refusal that no allowlist change answers, counted.
type note struct {
	tally
	text  string
	hosts []string // a few examples
}

const maxExamples = 5

func (a *analysis) noteOf(key, text, example string, at time.Time) {
	n := a.notes[key]
	if n == nil {
		n = &note{text: text}
		a.notes[key] = n
	}
	n.add(at, false)
	if example != "" && len(n.hosts) < maxExamples && !slices.Contains(n.hosts, example) {
		n.hosts = append(n.hosts, example)
	}
}

// egress takes one egress or DNS event; false when it is not one.
func (a *analysis) egress(ev api.AuditEvent) bool {
	var e result.EgressEvent
	if json.Unmarshal(ev.Detail, &e) != nil {
		return false
	}
	at := ev.Time
	host, port, dnsOnly := e.Destination, uint16(0), e.Kind == result.EgressDNS
	if !dnsOnly {
		h, p, err := net.SplitHostPort(e.Destination)
		n, perr := strconv.ParseUint(p, 10, 16)
		if err != nil || perr != nil || n == 0 {
			a.noteOf("malformed", "requests whose destination was not host:port", "", at)
			return true
		}
		host, port = h, uint16(n)
	}
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	_, isIP := parseIP(host)
	if !isIP && host != "" {
		a.names[host] = true
	}
	if e.Allow || e.Code == result.EgressNotAllowed {
		if i := a.entryFor(host, port, dnsOnly); i >= 0 {
			// Allowed now, whatever the decision then: the entry is used.
			// A refusal the config now answers needs nothing more.
			a.used[i].add(at, true)
			return true
		}
		if e.Allow {
			a.noteOf("changed", "decisions allowed when recorded that the config now refuses (it changed since); they are proposed back", "", at)
		}
		a.refused(host, port, isIP, at)
		return true
	}
	switch e.Code {
	case result.EgressMetadata, result.EgressLinkLocal, result.EgressNotUnicast:
		a.noteOf(e.Code, "refusals of cloud metadata, link-local, multicast or broadcast destinations: airlock never allows them, whatever the config says", e.Destination, at)
	case result.EgressPrivate:
		a.noteOf(e.Code, "refusals of loopback, private or reserved addresses: only an entry with private: true reaches those, and that is for you to decide, not proposed", e.Destination, at)
	case result.EgressInvalidHost:
		a.noteOf(e.Code, "requests for hosts that are neither valid names nor addresses", e.Destination, at)
	case result.EgressQueryType, result.EgressNoIPv6:
		// DNS queries of types the resolver does not serve: no entry
		// would change their answer, and they are not failures.
	default:
		a.noteOf("code:"+e.Code, fmt.Sprintf("refusals coded %q: about how a connection went, not which destinations are listed", e.Code), e.Destination, at)
	}
	return true
}

// entryFor returns the index of the tool's entry that allows host (on port,
// or on any port for a DNS query), or -1.
func (a *analysis) entryFor(host string, port uint16, dnsOnly bool) int {
	var d *policy.Destination
	if dnsOnly {
		d = a.pol.Lookup(host)
	} else {
		var dec policy.Decision
		if d, dec = a.pol.Match(host, port); !dec.Allow {
			d = nil
		}
	}
	if d == nil {
		return -1
	}
	// Match returns the policy's own copy: find its position.
	for i, dd := range a.pol.Destinations() {
		if dd.String() == d.String() && dd.Private == d.Private && dd.Opaque == d.Opaque && slices.Equal(dd.Addresses, d.Addresses) {
			return i
		}
	}
	return -1
}

// refused records host:port (port 0: a DNS lookup) as needed, unless no
// plain entry could ever allow it.
func (a *analysis) refused(host string, port uint16, isIP bool, at time.Time) {
	spec := host
	if isIP {
		if ip, _ := parseIP(host); ip.Is6() {
			spec = "[" + ip.String() + "]"
		}
	}
	if _, err := policy.Compile(policy.Spec{Host: spec}); err != nil {
		// An address in a private range, a metadata name: only an entry
		// that weakens the address checks would do, if any.
		a.noteOf("unfit:"+host, "refusals of "+host+", which a plain entry cannot allow ("+problemOf(err)+"); not proposed", "", at)
		return
	}
	n := a.needs[host]
	if n == nil {
		n = &need{host: host, ip: isIP, ports: map[uint16]bool{}}
		a.needs[host] = n
	}
	n.add(at, false)
	if port != 0 {
		n.ports[port] = true
	}
}

// problemOf is the problem a SpecError names.
func problemOf(err error) string {
	if se, ok := err.(*policy.SpecError); ok {
		return se.Problem
	}
	return err.Error()
}

// parseIP reads host as an IP address, in the plain spellings an event
// carries (the gateway writes what the client asked for, and odd
// spellings of addresses are refused before they are logged as needs).
func parseIP(host string) (netip.Addr, bool) {
	a, err := netip.ParseAddr(strings.Trim(host, "[]"))
	return a, err == nil
}

// svcUse is what calls to one service were seen.
type svcUse struct {
	called bool
	// ops counts, per operation ("METHOD /path" as config writes it), the
	// calls allowed now and the calls refused for want of it.
	ops   map[string]*tally
	order []string
}

func (s *svcUse) op(key string) *tally {
	t := s.ops[key]
	if t == nil {
		t = &tally{}
		s.ops[key] = t
		s.order = append(s.order, key)
	}
	return t
}

// broker takes one broker event; false when it is not one.
func (a *analysis) broker(ev api.AuditEvent) bool {
	var e result.BrokerEvent
	if json.Unmarshal(ev.Detail, &e) != nil {
		return false
	}
	at := ev.Time
	if e.Service == "" {
		a.noteOf("broker:noservice", "broker calls that named no service", "", at)
		return true
	}
	svc := a.in.Config.Services[e.Service]
	if svc == nil {
		a.noteOf("broker:unknown:"+e.Service, "broker calls to service "+strconv.Quote(e.Service)+", which the config does not define", "", at)
		return true
	}
	if !e.Allow && e.Code != result.BrokerNoService && e.Code != result.BrokerNoOperation {
		// Rate, size, content type, query, the upstream: the operation
		// was found, or the call never got as far as choosing one.
		a.noteOf("broker:code:"+e.Code, fmt.Sprintf("broker calls refused or cut short with code %q: about the call, not which operations are listed", e.Code), e.Service+" "+e.Method+" "+e.Path, at)
		return true
	}
	u := a.ops[e.Service]
	if u == nil {
		u = &svcUse{ops: map[string]*tally{}}
		a.ops[e.Service] = u
	}
	u.called = true
	if op := matchOperation(svc, e.Method, e.Path); op != "" {
		u.op(op).add(at, true)
		return true
	}
	if e.Allow {
		a.noteOf("broker:changed", "broker calls allowed when recorded that the config now refuses (it changed since); they are proposed back", "", at)
	}
	literal := e.Method + " " + e.Path
	if _, err := route.ParseOperation(literal); err != nil {
		a.noteOf("broker:unfit", "broker calls whose method and path cannot be written as an operation", e.Service+" "+literal, at)
		return true
	}
	u.op(literal).add(at, false)
	return true
}

// matchOperation returns the operation of svc that a call of method on
// path (as the broker logs it, normalised) matches now, or "".
func matchOperation(svc *brokerspec.Service, method, path string) string {
	segs, err := route.Normalize(path)
	if err != nil {
		return ""
	}
	for _, op := range svc.Operations {
		if _, ok := op.Template.Match(method, segs); ok {
			return op.Template.String()
		}
	}
	return ""
}

func stamp(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}
