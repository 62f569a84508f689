package advisor

import (
	"testing"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/internal/config"
	"github.com/airlockhq/airlock/result"
)

// FuzzSuggest feeds destinations and paths a sandbox chose: whatever
// they are, the fragment merges into the config and the config takes it.
func FuzzSuggest(f *testing.F) {
	for _, s := range []string{"evil.test:443", "a.b.example.org:8443", "[2001:db8::1]:22", "x\n- '*.com'", "169.254.169.254:80", "/user", "/a/{b}/c", "*.a.b:1"} {
		f.Add(s, s, true)
	}
	c, err := config.Parse("a.yaml", []byte(baseConfig))
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, dest, path string, dns bool) {
		mk := conn
		if dns {
			mk = lookup
		}
		evs := spread([]api.AuditEvent{
			mk("web", dest, false, result.EgressNotAllowed),
			mk("web", dest+".x.example.org:443", false, result.EgressNotAllowed),
			call("web", "gh", "GET", path, false, result.BrokerNoOperation),
		})
		for _, wild := range []bool{false, true} {
			s, err := Suggest(Input{Config: c, Tool: "web", Events: evs, Wildcards: wild})
			if err != nil {
				t.Fatal(err)
			}
			merged, err := Merge([]byte(baseConfig), []byte(s.YAML))
			if err != nil {
				t.Fatalf("merge: %v\n%s", err, s.YAML)
			}
			if _, err := config.Parse("merged.yaml", merged); err != nil {
				t.Fatalf("%v\n%s", err, s.YAML)
			}
		}
	})
}
