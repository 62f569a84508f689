package httpapi

import (
	"encoding/json"
	"errors"
	"net"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlockhq/airlock/client"
	"github.com/airlockhq/airlock/internal/audit"
	"github.com/airlockhq/airlock/internal/config"
	"github.com/airlockhq/airlock/internal/edge"
	"github.com/airlockhq/airlock/internal/node"
	"github.com/airlockhq/airlock/internal/tokens"
	"github.com/airlockhq/airlock/result"
)

// auditCore is the fake core with a real audit log.
type auditCore struct {
	*fakeCore
	log *audit.Log
}

func (a *auditCore) Audit() *audit.Log { return a.log }

// TestPolicySuggestionEndpoint drives GET
// /v1/tools/{name}/policy-suggestion over a real audit log: who may ask,
// an unknown tool, bad parameters, and an answer.
func TestPolicySuggestionEndpoint(t *testing.T) {
	cfg, err := config.Parse("a.yaml", []byte("tools:\n  sh:\n    egress: [pypi.org, unused.test]\n  other: {}\n"))
	if err != nil {
		t.Fatal(err)
	}
	log, err := audit.Open(t.Context(), audit.Options{Path: filepath.Join(t.TempDir(), "audit.db")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { log.Close(t.Context()) })
	rec := func(dest string, allow bool, code string) audit.Event {
		b, _ := json.Marshal(result.EgressEvent{Kind: result.EgressProxy, Destination: dest, Allow: allow, Code: code})
		d := audit.Deny
		if allow {
			d = audit.Allow
		}
		return audit.Event{Kind: audit.KindEgress, Tool: "sh", Decision: d, Detail: b, Time: time.Now().Add(-time.Hour)}
	}
	if err := log.Append(t.Context(), rec("pypi.org:443", true, ""), rec("files.pythonhosted.org:443", false, result.EgressNotAllowed),
		rec("old.test:443", false, result.EgressNotAllowed)); err != nil {
		t.Fatal(err)
	}
	// Eight days ago: outside the default week.
	old := rec("old.test:443", false, result.EgressNotAllowed)
	old.Time = time.Now().Add(-8 * 24 * time.Hour)
	if err := log.Append(t.Context(), old); err != nil {
		t.Fatal(err)
	}
	serve := func(c *node.Caller) *client.Client {
		f := &auditCore{fakeCore: &fakeCore{cfg: cfg}, log: log}
		s := New(f, edge.NewGuard(f, &tokens.Set{}, nil), Options{Config: cfg, StallTimeout: time.Second})
		sock := filepath.Join(t.TempDir(), "api.sock")
		ln, err := net.Listen("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewUnstartedServer(edge.WithCaller(c, s.Handler()))
		srv.Listener = ln
		srv.Start()
		t.Cleanup(srv.Close)
		return client.New(sock)
	}
	local := serve(node.Local)
	s, err := local.PolicySuggestion(t.Context(), "sh", client.PolicySuggestionQuery{})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, e := range s.Egress {
		got[e.Entry] = e.Action
	}
	want := map[string]string{"pypi.org": "keep", "unused.test": "drop", "files.pythonhosted.org": "add", "old.test": "add"}
	if len(got) != len(want) || got["pypi.org"] != "keep" || got["unused.test"] != "drop" || got["files.pythonhosted.org"] != "add" || got["old.test"] != "add" {
		t.Errorf("got %v, want %v", got, want)
	}
	if s.Decisions != 3 || !strings.Contains(s.YAML, "- files.pythonhosted.org") {
		t.Errorf("decisions %d, yaml:\n%s", s.Decisions, s.YAML)
	}
	// since=30m reads none of them (they are an hour old and older).
	if s, err = local.PolicySuggestion(t.Context(), "sh", client.PolicySuggestionQuery{Since: "30m"}); err != nil || s.Decisions != 0 {
		t.Errorf("since 30m: %+v %v", s, err)
	}

	auditor := &node.Caller{Name: "token:aud", Token: &config.Token{Name: "aud", Tools: []string{"sh"}, Auditor: true}}
	plain := &node.Caller{Name: "token:run", Token: &config.Token{Name: "run", Tools: []string{"*"}}}
	otherAuditor := &node.Caller{Name: "token:aud2", Token: &config.Token{Name: "aud2", Tools: []string{"other"}, Auditor: true}}
	for _, tt := range []struct {
		name   string
		c      *node.Caller
		tool   string
		q      client.PolicySuggestionQuery
		status int
		msg    string
	}{
		{"auditor of the tool", auditor, "sh", client.PolicySuggestionQuery{}, 200, ""},
		{"token that runs but does not audit", plain, "sh", client.PolicySuggestionQuery{}, 403, "auditor token"},
		{"auditor of another tool", otherAuditor, "sh", client.PolicySuggestionQuery{}, 403, `"sh"`},
		{"unknown tool", node.Local, "nope", client.PolicySuggestionQuery{}, 404, `no tool "nope"`},
		{"bad since", node.Local, "sh", client.PolicySuggestionQuery{Since: "yesterday"}, 400, `"since" must be`},
		{"since after until", node.Local, "sh", client.PolicySuggestionQuery{Since: "1h", Until: "2h"}, 400, `"since" must be before "until"`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := serve(tt.c).PolicySuggestion(t.Context(), tt.tool, tt.q)
			var ae *client.Error
			switch {
			case tt.status == 200 && err != nil:
				t.Fatalf("got %v", err)
			case tt.status == 200:
			case !errors.As(err, &ae) || ae.Status != tt.status || !strings.Contains(ae.Message, tt.msg):
				t.Fatalf("got %v, want %d with %q", err, tt.status, tt.msg)
			}
		})
	}
}
