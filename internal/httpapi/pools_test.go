package httpapi

import (
	"encoding/json"
	"testing"

	"github.com/airlockhq/airlock/pool"
)

// TestPoolStatsJSON pins the body of GET /v1/pools: the counters moved
// from the pool's own type to the API's, and the wire kept its names.
func TestPoolStatsJSON(t *testing.T) {
	st := pool.Stats{Name: "sh", Warm: 2, Idle: 1, Hits: 3, Misses: 4, Created: 5, CreateFailures: 6, Discarded: 7, Evicted: 8, AtCapacity: true, ClaimNanos: 9}
	b, err := json.Marshal(poolStats(st))
	if err != nil {
		t.Fatal(err)
	}
	want := `{"name":"sh","warm":2,"idle":1,"hits":3,"misses":4,"created":5,"create_failures":6,"discarded":7,"evicted":8,"at_capacity":true,"claim_ns":9}`
	if got := string(b); got != want {
		t.Errorf("got %s\nwant %s", got, want)
	}
	b, _ = json.Marshal(poolStats(pool.Stats{Name: "cold"}))
	if got, want := string(b), `{"name":"cold","warm":0,"idle":0,"hits":0,"misses":0,"created":0,"create_failures":0,"discarded":0,"evicted":0,"claim_ns":0}`; got != want {
		t.Errorf("got %s\nwant %s", got, want)
	}
}
