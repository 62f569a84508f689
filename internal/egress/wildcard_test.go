package egress

import (
	"context"
	"fmt"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"testing"

	"github.com/airlockhq/airlock/internal/egress/policy"
	"github.com/airlockhq/airlock/result"
)

// queryLog is a resolver that answers every name with 127.0.0.1 and keeps
// the names it was asked: what a zone's name servers would see of a
// sandbox's lookups through the host.
type queryLog struct {
	mu    sync.Mutex
	names map[string]int
}

func (q *queryLog) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.names[host]++
	return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
}

func (q *queryLog) distinct() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.names)
}

// TestWildcardLookupsBounded: under an allowed *.wild.test a sandbox could
// spell data into the names the host resolves, and the zone's name
// servers would read them. The names it may have resolved are few and
// short: past the cap, and for a long name, the request is refused
// before any lookup.
func TestWildcardLookupsBounded(t *testing.T) {
	_, port := upstream(t, hello, false)
	q := &queryLog{names: map[string]int{}}
	f := gateway(t, []policy.Spec{{Host: fmt.Sprintf("*.wild.test:%d", port), Private: true}}, func(c *Config) {
		c.Resolver = q
		c.Limits.WildcardNames = 8
	})
	c := f.client(nil)
	get := func(name string) int {
		resp, err := c.Get(fmt.Sprintf("http://%s:%d/", name, port))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for i := range 8 {
		if st := get(fmt.Sprintf("n%d.wild.test", i)); st != 200 {
			t.Fatalf("name %d: %d", i, st)
		}
	}
	if st := get("n8.wild.test"); st != http.StatusForbidden {
		t.Fatalf("a ninth distinct name: %d, want 403", st)
	}
	f.evs.wait(t, "the cap's refusal", func(e result.EgressEvent) bool {
		return !e.Allow && strings.HasPrefix(e.Destination, "n8.wild.test") && e.Code == result.EgressCapped
	})
	if st := get("N0.wild.test."); st != 200 {
		t.Fatalf("a name resolved before, spelt otherwise: %d", st)
	}
	long := strings.Repeat("a", 40) + "." + strings.Repeat("b", 30)
	if st := get(long + ".wild.test"); st != http.StatusForbidden {
		t.Fatalf("a name with 71 bytes under the wildcard: %d, want 403", st)
	}
	if n := q.distinct(); n != 8 {
		t.Fatalf("the host resolved %d distinct names, want the 8 allowed", n)
	}
}

// TestNoHostLookups: a sandbox whose names are not looked up on the host
// reaches pinned names only; another name is refused without a query.
func TestNoHostLookups(t *testing.T) {
	_, port := upstream(t, hello, false)
	q := &queryLog{names: map[string]int{}}
	f := gateway(t, []policy.Spec{pinned("pinned.test", port), {Host: fmt.Sprintf("open.test:%d", port), Private: true}}, func(c *Config) {
		c.Resolver = q
		c.Limits.NoHostLookups = true
	})
	c := f.client(nil)
	for name, want := range map[string]int{"pinned.test": 200, "open.test": http.StatusForbidden} {
		resp, err := c.Get(fmt.Sprintf("http://%s:%d/", name, port))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("%s: %d, want %d", name, resp.StatusCode, want)
		}
	}
	if q.distinct() != 0 {
		t.Fatalf("the host looked up %v", q.names)
	}
}
