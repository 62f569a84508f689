package front

import (
	"fmt"
	"testing"
	"time"

	"github.com/airlockhq/airlock/api"
)

// TestMergePagesKeepsPrefixes pages through two nodes' logs whose times
// are not in id order, as a node's are (a request's event has the time
// it began and the id of when it ended): every event comes exactly once.
// Before, the page took the earliest events by time alone, and the
// cursor, each node's last id taken, passed over an event with a later
// time and a smaller id that the page had left.
func TestMergePagesKeepsPrefixes(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 15, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	logs := map[string][]api.AuditEvent{
		// id 3 is a request that began at 1 s and ended after 2 and 4.
		"a": {{ID: 1, Time: at(0)}, {ID: 2, Time: at(2)}, {ID: 3, Time: at(1)}, {ID: 4, Time: at(5)}, {ID: 5, Time: at(3)}, {ID: 6, Time: at(7)}},
		"b": {{ID: 1, Time: at(1)}, {ID: 2, Time: at(4)}, {ID: 3, Time: at(2)}, {ID: 4, Time: at(6)}},
	}
	for _, limit := range []int{1, 2, 3, 4, 100} {
		t.Run(fmt.Sprint("limit ", limit), func(t *testing.T) {
			seen := map[string]int{}
			cur := map[string]int64{}
			for pages := 0; ; pages++ {
				if pages > 100 {
					t.Fatal("the pages never end")
				}
				// Each node answers from the cursor, in id order, as a
				// node does.
				var in [][]api.AuditEvent
				for _, name := range []string{"a", "b"} {
					var p []api.AuditEvent
					for _, ev := range logs[name] {
						if ev.ID > cur[name] && len(p) < limit {
							ev.Node = name
							p = append(p, ev)
						}
					}
					in = append(in, p)
				}
				got := mergePages(in, limit, false)
				if len(got) == 0 {
					break
				}
				for i, ev := range got {
					if i > 0 && byTime(got[i-1], ev) > 0 {
						t.Errorf("the page is out of time order: %+v", got)
					}
					seen[fmt.Sprintf("%s/%d", ev.Node, ev.ID)]++
					cur[ev.Node] = max(cur[ev.Node], ev.ID)
				}
			}
			for name, evs := range logs {
				for _, ev := range evs {
					if k := fmt.Sprintf("%s/%d", name, ev.ID); seen[k] != 1 {
						t.Errorf("event %s came %d times", k, seen[k])
					}
				}
			}
		})
	}
	// The tail: the newest, a suffix of each node's page.
	in := [][]api.AuditEvent{logs["a"], logs["b"]}
	for i := range in {
		for j := range in[i] {
			in[i][j].Node = []string{"a", "b"}[i]
		}
	}
	got := mergePages(in, 3, true)
	want := "a/5 b/4 a/6" // a's last two, b's last one, in time order
	var s string
	for i, ev := range got {
		if i > 0 {
			s += " "
		}
		s += fmt.Sprintf("%s/%d", ev.Node, ev.ID)
	}
	if s != want {
		t.Errorf("tail 3: got %s, want %s", s, want)
	}
}
