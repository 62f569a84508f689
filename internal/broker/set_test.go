package broker

import (
	"strings"
	"testing"

	"github.com/airlockhq/airlock/internal/config"
)

// TestCheckSet: what an opener may set on a service's calls is what the
// sandbox could send itself, and nothing else.
func TestCheckSet(t *testing.T) {
	cfg, err := config.Parse("airlock.yaml", []byte(svcYAML(newUpstream(t, false), "")))
	if err != nil {
		t.Fatal(err)
	}
	svc, err := cfg.Service("gh")
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name, value string
		err         string // in the error; "" when allowed
	}{
		{"X-GitHub-Api-Version", "2022-11-28", ""},
		{"x-github-api-version", "2022-11-28", ""},
		{"Accept", "application/vnd.github+json", ""},
		{"User-Agent", "agent/1", ""},
		{"Authorization", "Bearer mine", "credential"},
		{"X-Api-Key", "k", "credential"},
		{"Cookie", "a=b", "credential"},
		{"X-Session-Id", "s", "credential"},
		{"Host", "other.test", "connection"},
		{"X-Forwarded-Host", "other.test", "connection"},
		{"Transfer-Encoding", "chunked", "connection"},
		{"Content-Type", "text/plain", "body"},
		{"Content-Length", "1", "body"},
		{"X-Original-URL", "/admin", "no operation"},
		{"X-HTTP-Method-Override", "DELETE", "no operation"},
		{"Bad Name", "v", "not a header name"},
		{"", "v", "not a header name"},
		{"X-GitHub-Api-Version", "a\r\nX-Evil: 1", "not a header value"},
		{"X-GitHub-Api-Version", strings.Repeat("v", MaxSetValue+1), "not a header value"},
	} {
		err := CheckSet(svc, tt.name, tt.value)
		switch {
		case tt.err == "" && err != nil:
			t.Errorf("%s: %v", tt.name, err)
		case tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)):
			t.Errorf("%s: %v, want an error about %q", tt.name, err, tt.err)
		}
	}
}

// TestSetOnCalls: headers set on a service's calls go with each call
// whose operation forwards them, over what the sandbox sent; not with
// one whose operation does not.
func TestSetOnCalls(t *testing.T) {
	u := newUpstream(t, false)
	f := attachSet(t, svcYAML(u, ""), nil, map[string]string{"X-Github-Api-Version": "2022-11-28"})
	resp, body := f.raw(t, "GET /gh/repos/o/r/issues HTTP/1.1\r\nHost: b\r\nX-GitHub-Api-Version: 1999\r\n\r\n")
	if resp.StatusCode != 200 {
		t.Fatalf("%d %q", resp.StatusCode, body)
	}
	if got := u.last().Header.Values("X-Github-Api-Version"); len(got) != 1 || got[0] != "2022-11-28" {
		t.Errorf("the upstream got %q", got)
	}
	resp, body = f.raw(t, "GET /gh/repos/o/r HTTP/1.1\r\nHost: b\r\n\r\n")
	if resp.StatusCode != 200 {
		t.Fatalf("%d %q", resp.StatusCode, body)
	}
	if got := u.last().Header.Values("X-Github-Api-Version"); len(got) != 0 {
		t.Errorf("an operation that does not forward it got %q", got)
	}
}
