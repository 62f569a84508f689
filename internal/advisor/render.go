package advisor

import (
	"fmt"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/airlockhq/airlock/api"
)

// Render writes s as a config fragment: the tool's egress and services,
// which replace the tool's own, and the operations to add to each
// service. Entries given and never used are comments. Merge applies it to
// a config file.
//
// Every value that came from a sandbox (a name, a path) is written as a
// YAML scalar by the YAML encoder, and every comment is cut to printable
// ASCII: a destination a sandbox chose could otherwise end a comment and
// write config lines of its own into what an operator pastes.
func Render(s *api.PolicySuggestion) string {
	var b strings.Builder
	w := func(indent int, format string, args ...any) {
		b.WriteString(strings.Repeat("  ", indent))
		fmt.Fprintf(&b, format, args...)
		b.WriteByte('\n')
	}
	noun := "decisions"
	if s.Decisions == 1 {
		noun = "decision"
	}
	w(0, "# airlock policy suggest %s: %d %s, %s to %s.", comment(s.Tool), s.Decisions, noun, stamp(s.First), stamp(s.Last))
	w(0, "# To apply: tools.%s.egress and .services replace the tool's own; each", comment(s.Tool))
	w(0, "# service's operations below are added to that service's list")
	w(0, "# (airlock policy suggest --merge FILE prints FILE with this applied).")
	w(0, "# Commented-out entries were given and never used in the period read.")
	w(0, "tools:")
	w(1, "%s:", scalar(s.Tool))
	// A list whose every entry is commented out is an empty list, not a
	// null that the config would read as "not set".
	list := func(key string, n int, kept func(i int) bool) {
		for i := range n {
			if kept(i) {
				w(2, "%s:", key)
				return
			}
		}
		w(2, "%s: []", key)
	}
	list("egress", len(s.Egress), func(i int) bool { return s.Egress[i].Action != api.SuggestDrop })
	for _, e := range s.Egress {
		note := e.Action + ": " + e.Why
		if len(e.Covers) > 0 {
			note += "; names covered: " + strings.Join(e.Covers, ", ")
		}
		if e.Action == api.SuggestDrop {
			w(3, "# - %s  # %s", comment(e.Entry), comment(note))
			continue
		}
		if len(e.Addresses) == 0 && !e.Private && !e.Opaque {
			w(3, "- %s  # %s", scalar(e.Entry), comment(note))
			continue
		}
		// An entry with options is a mapping; its ports go in host, as a
		// string entry writes them.
		w(3, "- host: %s  # %s", scalar(e.Entry), comment(note))
		if len(e.Addresses) > 0 {
			w(4, "addresses: [%s]", strings.Join(scalars(e.Addresses), ", "))
		}
		if e.Private {
			w(4, "private: true")
		}
		if e.Opaque {
			w(4, "opaque: true")
		}
	}
	if len(s.Services) > 0 {
		list("services", len(s.Services), func(i int) bool { return s.Services[i].Action != api.SuggestDrop })
		for _, sv := range s.Services {
			switch sv.Action {
			case api.SuggestDrop:
				w(3, "# - %s  # drop: given, never called", comment(sv.Service))
			case api.SuggestAdd:
				w(3, "- %s  # add: called, not given", scalar(sv.Service))
			default:
				w(3, "- %s", scalar(sv.Service))
			}
		}
	}
	wrote := false
	for _, sv := range s.Services {
		var adds, rest []api.OperationSuggestion
		for _, o := range sv.Operations {
			if o.Action == api.SuggestAdd {
				adds = append(adds, o)
			} else {
				rest = append(rest, o)
			}
		}
		if len(adds) == 0 {
			continue
		}
		if !wrote {
			w(0, "services:")
			wrote = true
		}
		w(1, "%s:", scalar(sv.Service))
		w(2, "operations:  # added to the service's own")
		for _, o := range adds {
			w(3, "- %s  # add: refused %s for want of it", scalar(o.Operation), times(o.Refused))
		}
		for _, o := range rest {
			w(3, "# %s: %s", o.Action, comment(opNote(o)))
		}
	}
	for _, sv := range s.Services {
		for _, o := range sv.Operations {
			if o.Action == api.SuggestDrop {
				w(0, "# Never called: %s %s (a service may serve other tools; remove it by hand if none needs it).", comment(sv.Service), comment(o.Operation))
			}
		}
	}
	if len(s.Notes) > 0 {
		w(0, "# Notes:")
		for _, n := range s.Notes {
			w(0, "# - %s", comment(n))
		}
	}
	return b.String()
}

func opNote(o api.OperationSuggestion) string {
	if o.Action == api.SuggestKeep {
		return o.Operation + " (allowed " + times(o.Allowed) + ")"
	}
	return o.Operation + " (never called)"
}

// scalar is s as one YAML scalar, quoted when YAML needs it ("*.a.b"
// would be an alias, "[::1]:22" a list).
func scalar(s string) string {
	n := yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: s}
	b, err := yaml.Marshal(&n)
	if err != nil {
		return `""`
	}
	return strings.TrimSuffix(string(b), "\n")
}

func scalars(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = scalar(s)
	}
	return out
}

// comment is s made safe to follow "#": printable ASCII only, so that it
// cannot end the comment's line.
func comment(s string) string {
	return strings.Map(func(r rune) rune {
		if r < ' ' || r > '~' {
			return '?'
		}
		return r
	}, s)
}
