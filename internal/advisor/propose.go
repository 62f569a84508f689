package advisor

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/internal/egress/policy"
)

// egressSuggestions turns the counts into the proposed list: the tool's
// entries in their order (kept, widened, dropped), then the additions by
// name.
func (a *analysis) egressSuggestions() []api.EgressSuggestion {
	widen := map[int]*need{}
	var adds []*need
	for _, host := range slices.Sorted(maps.Keys(a.needs)) {
		n := a.needs[host]
		// A name listed on other ports gets the port on its own entry,
		// which keeps that entry's pinned addresses and options: the
		// narrowest change, and one that works where the name is only
		// reachable at its pinned addresses.
		if i := a.sameName(host); i >= 0 && len(n.ports) > 0 {
			widen[i] = n
			continue
		}
		adds = append(adds, n)
	}
	var out []api.EgressSuggestion
	for i, d := range a.tool.Egress {
		u := a.used[i]
		s := fromDestination(d)
		s.Allowed, s.First, s.Last = u.allowed, u.first, u.last
		switch n := widen[i]; {
		case n != nil:
			ports := slices.Clone(d.Ports)
			for p := range n.ports {
				ports = append(ports, p)
			}
			d.Ports = sortedPorts(ports)
			s = fromDestination(d)
			s.Action, s.Allowed, s.Refused = api.SuggestWiden, u.allowed, n.refused
			s.First, s.Last = earliest(u.first, n.first), latest(u.last, n.last)
			s.Why = fmt.Sprintf("refused %s on port %s, which it lacks", times(n.refused), portWords(n.ports))
			if u.allowed > 0 {
				s.Why = usedWhy(u.allowed) + "; " + s.Why
			}
		case u.allowed > 0:
			s.Action, s.Why = api.SuggestKeep, usedWhy(u.allowed)
		default:
			s.Action, s.Why = api.SuggestDrop, "given, never used in the period read"
		}
		out = append(out, s)
	}
	if a.in.Wildcards {
		var wild []api.EgressSuggestion
		wild, adds = a.collapse(adds)
		out = append(out, wild...)
	}
	for _, n := range adds {
		out = append(out, a.added(n))
	}
	return out
}

// added is the entry proposed for one need.
func (a *analysis) added(n *need) api.EgressSuggestion {
	ports := sortedPorts(slices.Collect(maps.Keys(n.ports)))
	host := n.host
	if ip, _ := parseIP(host); n.ip && ip.Is6() {
		host = "[" + ip.String() + "]"
	}
	s := api.EgressSuggestion{
		Entry:  withPorts(host, ports),
		Action: api.SuggestAdd, Refused: n.refused, First: n.first, Last: n.last,
		Why: "refused " + times(n.refused) + " for want of it",
	}
	if len(ports) == 0 {
		s.Why += "; only DNS lookups were seen, so the port is the default, 443"
	}
	return s
}

// sameName returns the index of the tool's first entry for exactly name
// (not a wildcard), or -1.
func (a *analysis) sameName(name string) int {
	return slices.IndexFunc(a.tool.Egress, func(d policy.Destination) bool { return !d.Wildcard && d.Name == name })
}

// collapse replaces the added names that share a parent domain (two or
// more of them) by one wildcard over it, and returns the wildcards and
// the names left. A parent must have two labels or more: "*.com" would
// admit half the Internet, and without a public suffix list "*.co.uk"
// is the cost stated, not refused.
func (a *analysis) collapse(adds []*need) ([]api.EgressSuggestion, []*need) {
	byParent := map[string][]*need{}
	for _, n := range adds {
		if n.ip {
			continue
		}
		if _, parent, ok := strings.Cut(n.host, "."); ok && strings.Contains(parent, ".") {
			byParent[parent] = append(byParent[parent], n)
		}
	}
	var out []api.EgressSuggestion
	gone := map[*need]bool{}
	for _, parent := range slices.Sorted(maps.Keys(byParent)) {
		group := byParent[parent]
		if len(group) < 2 {
			continue
		}
		if _, err := policy.Compile(policy.Spec{Host: "*." + parent}); err != nil {
			continue // the names stay names
		}
		ports := map[uint16]bool{}
		var t tally
		for _, n := range group {
			gone[n] = true
			for p := range n.ports {
				ports[p] = true
			}
			if len(n.ports) == 0 {
				ports[policy.DefaultPort] = true
			}
			t.refused += n.refused
			t.first, t.last = earliest(t.first, n.first), latest(t.last, n.last)
		}
		var covers []string
		for name := range a.names {
			if strings.HasSuffix(name, "."+parent) {
				covers = append(covers, name)
			}
		}
		slices.Sort(covers)
		why := fmt.Sprintf("covers %d distinct names seen (%d refused), and would admit any other name under %s too", len(covers), len(group), parent)
		if len(covers) > a.tool.Network.WildcardNames {
			why += fmt.Sprintf("; more than network.wildcard_names (%d) a sandbox may use", a.tool.Network.WildcardNames)
		}
		out = append(out, api.EgressSuggestion{
			Entry:  withPorts("*."+parent, sortedPorts(slices.Collect(maps.Keys(ports)))),
			Action: api.SuggestAdd, Refused: t.refused, Covers: covers, First: t.first, Last: t.last, Why: why,
		})
	}
	left := slices.DeleteFunc(slices.Clone(adds), func(n *need) bool { return gone[n] })
	return out, left
}

// fromDestination is a config entry as a suggestion (action not set).
func fromDestination(d policy.Destination) api.EgressSuggestion {
	host := d
	host.Ports = nil
	s := api.EgressSuggestion{Entry: withPorts(host.String(), d.Ports), Private: d.Private, Opaque: d.Opaque}
	for _, a := range d.Addresses {
		s.Addresses = append(s.Addresses, a.String())
	}
	return s
}

// withPorts is host with its ports as config writes them: nothing for the
// default port alone.
func withPorts(host string, ports []uint16) string {
	if len(ports) == 0 || len(ports) == 1 && ports[0] == policy.DefaultPort {
		return host
	}
	ps := make([]string, len(ports))
	for i, p := range ports {
		ps[i] = strconv.Itoa(int(p))
	}
	return host + ":" + strings.Join(ps, ",")
}

func sortedPorts(ps []uint16) []uint16 {
	slices.Sort(ps)
	return slices.Compact(ps)
}

func portWords(ports map[uint16]bool) string {
	var ps []string
	for _, p := range sortedPorts(slices.Collect(maps.Keys(ports))) {
		ps = append(ps, strconv.Itoa(int(p)))
	}
	return strings.Join(ps, ", ")
}

func usedWhy(allowed int) string {
	return "allowed " + times(allowed)
}

func times(n int) string {
	if n == 1 {
		return "once"
	}
	return strconv.Itoa(n) + " times"
}

// serviceSuggestions are the tool's services (kept or dropped) and the
// services it called without being given them (added), each with its
// operations.
func (a *analysis) serviceSuggestions() []api.ServiceSuggestion {
	var out []api.ServiceSuggestion
	given := map[string]bool{}
	for _, name := range a.tool.Services {
		given[name] = true
		out = append(out, a.service(name, true))
	}
	for _, name := range slices.Sorted(maps.Keys(a.ops)) {
		if !given[name] {
			out = append(out, a.service(name, false))
		}
	}
	return out
}

func (a *analysis) service(name string, given bool) api.ServiceSuggestion {
	s := api.ServiceSuggestion{Service: name, Action: api.SuggestAdd, Operations: []api.OperationSuggestion{}}
	u := a.ops[name]
	switch {
	case given && u != nil:
		s.Action = api.SuggestKeep
	case given:
		s.Action = api.SuggestDrop
	}
	configured := map[string]bool{}
	if svc := a.in.Config.Services[name]; svc != nil {
		for _, op := range svc.Operations {
			key := op.Template.String()
			configured[key] = true
			o := api.OperationSuggestion{Operation: key, Action: api.SuggestDrop}
			if u != nil && u.ops[key] != nil {
				t := u.ops[key]
				o.Action, o.Allowed, o.First, o.Last = api.SuggestKeep, t.allowed, t.first, t.last
			}
			s.Operations = append(s.Operations, o)
		}
	}
	if u == nil {
		return s
	}
	var added []api.OperationSuggestion
	for _, key := range u.order {
		if configured[key] {
			continue
		}
		t := u.ops[key]
		added = append(added, api.OperationSuggestion{Operation: key, Action: api.SuggestAdd, Refused: t.refused, First: t.first, Last: t.last})
	}
	slices.SortFunc(added, func(x, y api.OperationSuggestion) int { return cmp.Compare(x.Operation, y.Operation) })
	s.Operations = append(s.Operations, added...)
	return s
}

// noteLines are the notes as sentences, in a stable order.
func (a *analysis) noteLines() []string {
	out := []string{}
	for _, key := range slices.Sorted(maps.Keys(a.notes)) {
		n := a.notes[key]
		line := fmt.Sprintf("%d %s", n.refused, n.text)
		if len(n.hosts) > 0 {
			line += " (" + strings.Join(n.hosts, ", ") + ")"
		}
		out = append(out, line)
	}
	return out
}

func earliest(a, b time.Time) time.Time {
	if a.IsZero() || !b.IsZero() && b.Before(a) {
		return b
	}
	return a
}

func latest(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
