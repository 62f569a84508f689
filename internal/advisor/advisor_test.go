package advisor

import (
	"encoding/json"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/internal/broker/route"
	"github.com/airlockhq/airlock/internal/config"
	"github.com/airlockhq/airlock/internal/egress/policy"
	"github.com/airlockhq/airlock/result"
)

var t0 = time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)

// conn is an egress event: a connection through the proxy to dest.
func conn(tool, dest string, allow bool, code string) api.AuditEvent {
	return egressEvent(tool, result.EgressProxy, dest, allow, code)
}

// lookup is a DNS event for name.
func lookup(tool, name string, allow bool, code string) api.AuditEvent {
	return egressEvent(tool, result.EgressDNS, name, allow, code)
}

func egressEvent(tool, kind, dest string, allow bool, code string) api.AuditEvent {
	e := result.EgressEvent{Kind: kind, Tool: tool, Destination: dest, Allow: allow, Code: code}
	k := "egress"
	if kind == result.EgressDNS {
		k = "dns"
	}
	return event(k, tool, allow, e)
}

// call is a broker event.
func call(tool, service, method, path string, allow bool, code string) api.AuditEvent {
	return event("broker", tool, allow, result.BrokerEvent{Tool: tool, Service: service, Method: method, Path: path, Allow: allow, Code: code})
}

func event(kind, tool string, allow bool, detail any) api.AuditEvent {
	b, _ := json.Marshal(detail)
	d := "deny"
	if allow {
		d = "allow"
	}
	return api.AuditEvent{Kind: kind, Tool: tool, Decision: d, Detail: b}
}

// spread gives evs times an hour apart from t0.
func spread(evs []api.AuditEvent) []api.AuditEvent {
	for i := range evs {
		evs[i].ID = int64(i + 1)
		evs[i].Time = t0.Add(time.Duration(i) * time.Hour)
	}
	return evs
}

const baseConfig = `
secrets:
  tok: {env: TOKEN}
services:
  gh:
    upstream: https://api.github.com
    credential: {secret: tok}
    operations:
      - GET /repos/{owner}/{repo}/issues
      - DELETE /repos/{owner}/{repo}
  spare:
    upstream: https://spare.example.com
    credential: {secret: tok}
    operations: [GET /x]
tools:
  web:
    egress:
      - pypi.org
      - host: files.internal.test
        addresses: [10.1.2.3]
        private: true
      - unused.example.com
    services: [gh]
  other:
    egress: [pypi.org]
`

func parse(t *testing.T, text string) *config.Config {
	t.Helper()
	c, err := config.Parse("airlock.yaml", []byte(text))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func entries(s *api.PolicySuggestion) map[string]string {
	m := map[string]string{}
	for _, e := range s.Egress {
		m[e.Entry] = e.Action
	}
	return m
}

func TestSuggest(t *testing.T) {
	c := parse(t, baseConfig)
	tests := []struct {
		name      string
		events    []api.AuditEvent
		wildcards bool
		want      map[string]string // entry -> action
		wantOps   map[string]string // "service OP" -> action
		wantNote  string
	}{{
		name: "nothing seen drops everything",
		want: map[string]string{"pypi.org": "drop", "files.internal.test": "drop", "unused.example.com": "drop"},
	}, {
		name: "used kept, refused added, unused dropped",
		events: []api.AuditEvent{
			conn("web", "pypi.org:443", true, ""),
			conn("web", "files.pythonhosted.org:443", false, result.EgressNotAllowed),
			conn("web", "files.pythonhosted.org:443", false, result.EgressNotAllowed),
			conn("web", "github.com:22", false, result.EgressNotAllowed),
			conn("other", "elsewhere.test:443", false, result.EgressNotAllowed), // another tool's
		},
		want: map[string]string{"pypi.org": "keep", "files.internal.test": "drop", "unused.example.com": "drop",
			"files.pythonhosted.org": "add", "github.com:22": "add"},
	}, {
		name: "a port refused on a listed name widens its entry, options kept",
		events: []api.AuditEvent{
			conn("web", "files.internal.test:8443", false, result.EgressNotAllowed),
			lookup("web", "files.internal.test", true, ""),
		},
		want: map[string]string{"pypi.org": "drop", "files.internal.test:443,8443": "widen", "unused.example.com": "drop"},
	}, {
		name: "dns only: the default port",
		events: []api.AuditEvent{
			lookup("web", "cdn.example.net", false, result.EgressNotAllowed),
			lookup("web", "cdn.example.net", false, result.EgressNotAllowed),
		},
		want: map[string]string{"pypi.org": "drop", "files.internal.test": "drop", "unused.example.com": "drop", "cdn.example.net": "add"},
	}, {
		name: "never allowed: metadata, private addresses, link-local are notes, not entries",
		events: []api.AuditEvent{
			conn("web", "169.254.169.254:80", false, result.EgressMetadata),
			conn("web", "10.0.0.5:5432", false, result.EgressNotAllowed),
			conn("web", "localhost:8080", false, result.EgressPrivate),
			conn("web", "metadata.google.internal:80", false, result.EgressMetadata),
		},
		want:     map[string]string{"pypi.org": "drop", "files.internal.test": "drop", "unused.example.com": "drop"},
		wantNote: "airlock never allows them",
	}, {
		name: "names stay names without wildcards",
		events: []api.AuditEvent{
			conn("web", "a.cdn.example.org:443", false, result.EgressNotAllowed),
			conn("web", "b.cdn.example.org:443", false, result.EgressNotAllowed),
		},
		want: map[string]string{"pypi.org": "drop", "files.internal.test": "drop", "unused.example.com": "drop",
			"a.cdn.example.org": "add", "b.cdn.example.org": "add"},
	}, {
		name: "wildcards when asked",
		events: []api.AuditEvent{
			conn("web", "a.cdn.example.org:443", false, result.EgressNotAllowed),
			conn("web", "b.cdn.example.org:443", false, result.EgressNotAllowed),
			conn("web", "one.example.com:443", false, result.EgressNotAllowed), // alone under its parent
			conn("web", "x.com:443", false, result.EgressNotAllowed),
			conn("web", "y.com:443", false, result.EgressNotAllowed), // never *.com
		},
		wildcards: true,
		want: map[string]string{"pypi.org": "drop", "files.internal.test": "drop", "unused.example.com": "drop",
			"*.cdn.example.org": "add", "one.example.com": "add", "x.com": "add", "y.com": "add"},
	}, {
		name: "broker: used kept, refused added, uncalled reported, service not given added",
		events: []api.AuditEvent{
			call("web", "gh", "GET", "/repos/octo/hello/issues", true, ""),
			call("web", "gh", "GET", "/user", false, result.BrokerNoOperation),
			call("web", "gh", "GET", "/user", false, result.BrokerRate), // about the call
			call("web", "spare", "GET", "/x", false, result.BrokerNoService),
			call("web", "nosuch", "GET", "/", false, result.BrokerNoService),
		},
		want: map[string]string{"pypi.org": "drop", "files.internal.test": "drop", "unused.example.com": "drop"},
		wantOps: map[string]string{
			"gh GET /repos/{owner}/{repo}/issues": "keep", "gh DELETE /repos/{owner}/{repo}": "drop",
			"gh GET /user": "add", "spare GET /x": "keep", "service gh": "keep", "service spare": "add",
		},
		wantNote: `service "nosuch", which the config does not define`,
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			evs := spread(tt.events)
			s, err := Suggest(Input{Config: c, Tool: "web", Events: evs, Wildcards: tt.wildcards})
			if err != nil {
				t.Fatal(err)
			}
			got := entries(s)
			if len(got) != len(tt.want) {
				t.Errorf("entries: got %v, want %v", got, tt.want)
			}
			for k, v := range tt.want {
				if got[k] != v {
					t.Errorf("entry %s: got %q, want %q (all: %v)", k, got[k], v, got)
				}
			}
			gotOps := map[string]string{}
			for _, sv := range s.Services {
				gotOps["service "+sv.Service] = sv.Action
				for _, o := range sv.Operations {
					gotOps[sv.Service+" "+o.Operation] = o.Action
				}
			}
			for k, v := range tt.wantOps {
				if gotOps[k] != v {
					t.Errorf("%s: got %q, want %q (all: %v)", k, gotOps[k], v, gotOps)
				}
			}
			if tt.wantNote != "" && !strings.Contains(strings.Join(s.Notes, "\n"), tt.wantNote) {
				t.Errorf("notes lack %q: %q", tt.wantNote, s.Notes)
			}
			checkApplies(t, baseConfig, s, evs)
		})
	}
}

func TestSuggestWildcardCost(t *testing.T) {
	c := parse(t, baseConfig)
	evs := spread([]api.AuditEvent{
		conn("web", "a.cdn.example.org:443", false, result.EgressNotAllowed),
		conn("web", "b.cdn.example.org:8443", false, result.EgressNotAllowed),
		lookup("web", "c.cdn.example.org", false, result.EgressNotAllowed),
	})
	s, err := Suggest(Input{Config: c, Tool: "web", Events: evs, Wildcards: true})
	if err != nil {
		t.Fatal(err)
	}
	var w *api.EgressSuggestion
	for i := range s.Egress {
		if strings.HasPrefix(s.Egress[i].Entry, "*.") {
			w = &s.Egress[i]
		}
	}
	if w == nil || w.Entry != "*.cdn.example.org:443,8443" || len(w.Covers) != 3 || !strings.Contains(w.Why, "covers 3 distinct names") {
		t.Fatalf("wildcard: %+v", w)
	}
	if !strings.Contains(s.YAML, "would admit any other name under cdn.example.org") {
		t.Errorf("the YAML does not state the cost:\n%s", s.YAML)
	}
	checkApplies(t, baseConfig, s, evs)
}

func TestSuggestUnknownTool(t *testing.T) {
	_, err := Suggest(Input{Config: parse(t, baseConfig), Tool: "nope"})
	if err == nil || !strings.Contains(err.Error(), `"nope"`) {
		t.Fatalf("got %v, want an error naming the tool", err)
	}
}

// TestRenderHostileNames: what a sandbox chose cannot write config
// lines of its own into the fragment.
func TestRenderHostileNames(t *testing.T) {
	c := parse(t, baseConfig)
	evs := spread([]api.AuditEvent{
		conn("web", "evil.test\n    - \"*.com\":443", false, result.EgressNotAllowed),
		conn("web", "x:1\ny", false, result.EgressSNIMismatch),
		call("web", "gh", "GET", "/a\n- GET /admin", false, result.BrokerNoOperation),
	})
	s, err := Suggest(Input{Config: c, Tool: "web", Events: evs})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range s.Egress {
		if e.Action == api.SuggestAdd {
			t.Errorf("added %q", e.Entry)
		}
	}
	checkApplies(t, baseConfig, s, evs)
}

// checkApplies merges s into conf, checks that config accepts it, and
// replays evs against the merged config with the gateway's and broker's
// own matchers: every decision allowed or refused for want of an entry
// passes; every refusal no entry answers is still refused; and every
// entry and operation the merged config has beyond the original answers
// at least one decision (nothing else was added).
func checkApplies(t *testing.T, conf string, s *api.PolicySuggestion, evs []api.AuditEvent) {
	t.Helper()
	merged, err := Merge([]byte(conf), []byte(s.YAML))
	if err != nil {
		t.Fatalf("merge: %v\n%s", err, s.YAML)
	}
	before := parse(t, conf)
	after, err := config.Parse("merged.yaml", merged)
	if err != nil {
		t.Fatalf("config refuses the suggestion: %v\nfragment:\n%s\nmerged:\n%s", err, s.YAML, merged)
	}
	tool := after.Tools[s.Tool]
	pol := policy.New(tool.Egress)
	answered := make([]bool, len(tool.Egress))
	mark := func(d *policy.Destination) {
		for i, dd := range tool.Egress {
			if dd.String() == d.String() && dd.Private == d.Private {
				answered[i] = true
			}
		}
	}
	opUsed := map[string]bool{}
	for _, ev := range evs {
		if ev.Tool != s.Tool {
			continue
		}
		switch ev.Kind {
		case "egress", "dns":
			var e result.EgressEvent
			if err := json.Unmarshal(ev.Detail, &e); err != nil {
				t.Fatal(err)
			}
			needed := e.Allow || e.Code == result.EgressNotAllowed
			var d *policy.Destination
			var allowed bool
			if e.Kind == result.EgressDNS {
				d = pol.Lookup(e.Destination)
				allowed = d != nil
			} else {
				h, p, err := net.SplitHostPort(e.Destination)
				if err != nil {
					continue
				}
				port, _ := strconv.Atoi(p)
				var dec policy.Decision
				d, dec = pol.Match(h, uint16(port))
				allowed = dec.Allow
				if _, cerr := policy.Compile(policy.Spec{Host: h}); cerr != nil {
					needed = false // no plain entry could: stays refused
				}
			}
			if allowed {
				mark(d)
			}
			if needed && !allowed {
				t.Errorf("under the suggestion %s is still refused", e.Destination)
			}
			if !needed && allowed {
				t.Errorf("under the suggestion %s (refused %s) is allowed", e.Destination, e.Code)
			}
		case "broker":
			var e result.BrokerEvent
			if err := json.Unmarshal(ev.Detail, &e); err != nil {
				t.Fatal(err)
			}
			needed := e.Allow || e.Code == result.BrokerNoOperation || e.Code == result.BrokerNoService
			svc := after.Services[e.Service]
			given := svc != nil && contains(tool.Services, e.Service)
			segs, nerr := route.Normalize(e.Path)
			allowed := false
			if given && nerr == nil {
				for _, op := range svc.Operations {
					if _, ok := op.Template.Match(e.Method, segs); ok {
						allowed = true
						opUsed[e.Service+" "+op.Template.String()] = true
						break
					}
				}
			}
			if needed && svc != nil && nerr == nil && !strings.ContainsAny(e.Path, "\n") && !allowed {
				t.Errorf("under the suggestion broker call %s %s %s is still refused", e.Service, e.Method, e.Path)
			}
		}
	}
	for i, d := range tool.Egress {
		if !answered[i] {
			t.Errorf("the suggestion keeps or adds %s, which answers no decision", d)
		}
	}
	for name, svc := range after.Services {
		old := map[string]bool{}
		for _, op := range before.Services[name].Operations {
			old[op.Template.String()] = true
		}
		for _, op := range svc.Operations {
			if k := op.Template.String(); !old[k] && !opUsed[name+" "+k] {
				t.Errorf("the suggestion adds %s %s, which answers no call", name, k)
			}
		}
	}
	if !s.Wildcards {
		for _, d := range tool.Egress {
			if d.Wildcard {
				t.Errorf("a wildcard %s without being asked", d)
			}
		}
	}
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}
