package httpapi

import (
	"encoding/json"
	"testing"

	"github.com/airlockhq/airlock/pool"
)

// TestPoolStatsJSON pins the body of GET /v1/pools: the counters moved
// from the pool's own type to the API's, and the wire kept its names.
func TestPoolStatsJSON(t *testing.T) {
	st := pool.Stats{Name: "sh", Warm: 2, Idle: 1, Hits: 3, Misses: 4, Created: 5, CreateFailures: 6, Discarded: 7, Evicted: 8, AtCapacity: true, ClaimNanos: 9, Reason: "fixed: pool.warm is 2"}
	b, err := json.Marshal(poolStats(st))
	if err != nil {
		t.Fatal(err)
	}
	want := `{"name":"sh","warm":2,"idle":1,"reason":"fixed: pool.warm is 2","hits":3,"misses":4,"created":5,"create_failures":6,"discarded":7,"evicted":8,"released":0,"at_capacity":true,"claim_ns":9}`
	if got := string(b); got != want {
		t.Errorf("got %s\nwant %s", got, want)
	}
	b, _ = json.Marshal(poolStats(pool.Stats{Name: "cold"}))
	if got, want := string(b), `{"name":"cold","warm":0,"idle":0,"reason":"","hits":0,"misses":0,"created":0,"create_failures":0,"discarded":0,"evicted":0,"released":0,"claim_ns":0}`; got != want {
		t.Errorf("got %s\nwant %s", got, want)
	}
}

// TestAdaptivePoolStatsJSON: an adaptive pool's bounds, rate and build
// time are on the wire.
func TestAdaptivePoolStatsJSON(t *testing.T) {
	st := pool.Stats{Name: "a", Warm: 3, Min: 1, Max: 8, ClaimRate: 12.5, BuildNanos: 4000000, Reason: "r", Released: 2}
	b, _ := json.Marshal(poolStats(st))
	want := `{"name":"a","warm":3,"idle":0,"min":1,"max":8,"claim_rate":12.5,"build_ns":4000000,"reason":"r","hits":0,"misses":0,"created":0,"create_failures":0,"discarded":0,"evicted":0,"released":2,"claim_ns":0}`
	if got := string(b); got != want {
		t.Errorf("got %s\nwant %s", got, want)
	}
}
