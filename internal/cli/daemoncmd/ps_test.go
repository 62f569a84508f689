package daemoncmd

import (
	"strings"
	"testing"
	"time"

	"github.com/airlockhq/airlock/api"
)

// TestPSAges: ps shows an age for runs and sessions alike, not a
// timestamp for one of them.
func TestPSAges(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	a := &api.Activity{
		Runs:     []api.LiveRun{{ID: "r_1", Kind: "run", Tool: "sh", AgeMillis: 1500}},
		Sessions: []api.Session{{ID: "s_1", Tool: "py", Created: now.Add(-90 * time.Second).Format(time.RFC3339Nano)}},
	}
	var b strings.Builder
	if err := printPS(&b, a, now); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	tests := []struct{ line, age string }{{lines[1], "1.5s"}, {lines[2], "1m30s"}}
	for _, tt := range tests {
		if f := strings.Fields(tt.line); len(f) < 4 || f[3] != tt.age {
			t.Errorf("line %q: want age %s in the AGE column\n%s", tt.line, tt.age, b.String())
		}
	}
}
