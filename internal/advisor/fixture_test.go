package advisor

import (
	"bufio"
	"encoding/json"
	"os"
	"testing"

	"github.com/airlockhq/airlock/api"
)

// TestFixtureWeek replays a recorded week of a tool's decisions, made by
// real sandboxed runs (internal/cli's TestPolicySuggestRealRuns wrote
// testdata/week.jsonl and week.yaml with AIRLOCK_RECORD_FIXTURE): under
// the suggestion, merged into the config and parsed by config, every
// decision the runs needed passes the gateway's and broker's matchers,
// what no entry may answer is still refused, and every entry and
// operation beyond the config's answers a decision (checkApplies).
func TestFixtureWeek(t *testing.T) {
	conf, err := os.ReadFile("testdata/week.yaml")
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open("testdata/week.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var evs []api.AuditEvent
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var ev api.AuditEvent
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatal(err)
		}
		evs = append(evs, ev)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if span := evs[len(evs)-1].Time.Sub(evs[0].Time); span < 72*60*60e9 {
		t.Fatalf("the fixture spans %s, not most of a week", span)
	}
	for _, wildcards := range []bool{false, true} {
		s, err := Suggest(Input{Config: parse(t, string(conf)), Tool: "gh", Events: evs, Wildcards: wildcards})
		if err != nil {
			t.Fatal(err)
		}
		if s.Decisions != len(evs) {
			t.Errorf("read %d decisions, want %d", s.Decisions, len(evs))
		}
		got := map[string]int{}
		for _, e := range s.Egress {
			got[e.Action]++
		}
		// plain.test widened, unused.test dropped, the address and
		// nowhere.test added; the metadata address only noted.
		if got["widen"] != 1 || got["drop"] != 1 || got["add"] != 2 || got["keep"] != 0 {
			t.Errorf("actions %v:\n%s", got, s.YAML)
		}
		checkApplies(t, string(conf), s, evs)
	}
}
