package daemon

import (
	"testing"

	"github.com/airlockhq/airlock/internal/config"
)

// TestClusterStatsFollowReloads: the lease publishes the tools the node
// has now. A reload that removed a tool left the publisher asking for
// that tool's pool, nil, and the daemon went down on it.
func TestClusterStatsFollowReloads(t *testing.T) {
	d, _ := serveConfig(t, "tools:\n  a: {}\n  b: {}\n", nil)
	next, err := config.Parse("airlock.yaml", []byte("tools:\n  a: {}\n  c: {}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.Node.Reload(t.Context(), next, "test"); err != nil {
		t.Fatal(err)
	}
	st := d.clusterStats()
	if _, ok := st.Tools["b"]; ok || len(st.Tools) != 2 {
		t.Errorf("the lease's tools after the reload: %v, want a and c", st.Tools)
	}
	for _, name := range []string{"a", "c"} {
		if _, ok := st.Tools[name]; !ok {
			t.Errorf("the lease's tools after the reload: %v, want %s", st.Tools, name)
		}
	}
}
