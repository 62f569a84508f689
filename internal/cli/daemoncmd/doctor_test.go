package daemoncmd

import (
	"context"
	"strings"
	"testing"

	"github.com/airlockhq/airlock/internal/config"
)

// TestDoctorRunscFromConfig: doctor looks for the runsc serve would use,
// its --runsc, else the config's server.runsc.
func TestDoctorRunscFromConfig(t *testing.T) {
	cfg, err := config.Parse("airlock.yaml", []byte("server: {runsc: /nonexistent/config-runsc}\ntools:\n  untrusted: {isolation: gvisor}\n"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct{ flag, want string }{
		{"", "/nonexistent/config-runsc"},
		{"/nonexistent/flag-runsc", "/nonexistent/flag-runsc"},
	} {
		c := checkGVisor(context.Background(), cfg, tt.flag, t.TempDir(), "/airlock-doctor-test", false)
		if c.ok || !strings.Contains(c.found, tt.want) || !strings.Contains(c.found, "untrusted") {
			t.Errorf("--runsc %q: %+v; want a failed check naming %s and the tool", tt.flag, c, tt.want)
		}
	}
}
