package config

import (
	"strings"
	"testing"
	"time"
)

func TestAudit(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want Audit
		err  string // a substring of the error, "" for none
	}{
		{"defaults", "tools: {}", Audit{Path: DefaultAuditPath, Retention: 30 * 24 * time.Hour, Sync: "normal"}, ""},
		{"all set", "audit: {path: /srv/a.db, retention: 7d, sync: full}", Audit{Path: "/srv/a.db", Retention: 7 * 24 * time.Hour, Sync: "full", Set: true}, ""},
		{"hours", "audit: {retention: 36h}", Audit{Path: DefaultAuditPath, Retention: 36 * time.Hour, Sync: "normal", Set: true}, ""},
		{"forever", `audit: {retention: "0"}`, Audit{Path: DefaultAuditPath, Sync: "normal", Set: true}, ""},
		{"relative path", "audit: {path: a.db}", Audit{}, "1:15: audit.path"},
		{"bad sync", "audit: {sync: sometimes}", Audit{}, `audit.sync: "sometimes": want "normal" or "full"`},
		{"bad days", "audit: {retention: 3.5d}", Audit{}, "audit.retention"},
		{"negative days", "audit: {retention: -1d}", Audit{}, "audit.retention"},
		{"garbage", "audit: {retention: soon}", Audit{}, "audit.retention"},
		{"unknown key", "audit: {paht: /a.db}", Audit{}, `unknown field "paht"`},
		{"not a mapping", "audit: [a]", Audit{}, "audit"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Parse("a.yaml", []byte(tt.in))
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("Parse error = %v, want one containing %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.Audit != tt.want {
				t.Errorf("got %+v, want %+v", c.Audit, tt.want)
			}
		})
	}
	if got := Empty().Audit; got.Path != DefaultAuditPath || got.Sync != "normal" {
		t.Errorf("Empty().Audit = %+v, want the defaults", got)
	}
}

func TestAuditExport(t *testing.T) {
	c, err := Parse("a.yaml", []byte("audit: {export: stdout}\n"))
	if err != nil || c.Audit.Export != "stdout" {
		t.Fatalf("export: %+v %v", c.Audit, err)
	}
	if _, err := Parse("a.yaml", []byte("audit: {export: loki}\n")); err == nil || !strings.Contains(err.Error(), `want "stdout"`) {
		t.Errorf("an unknown export: %v", err)
	}
}
