package audit

import (
	"context"
	"math/rand/v2"
	"path/filepath"
	"strconv"
	"testing"
)

// BenchmarkRunEvents appends what a run through the API records: five
// events that linger and one that is waited for (the run's start), so one
// transaction a run, as under sustained load.
func BenchmarkRunEvents(b *testing.B) {
	l, err := Open(context.Background(), Options{Path: filepath.Join(b.TempDir(), "audit.db")})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close(context.Background())
	ctx := context.Background()
	// Each run its own sandbox, as in a daemon: the sandbox index takes
	// an id at a random place.
	var sandbox string
	ev := func(kind string) Event {
		return Event{Kind: kind, Tool: "warm", Sandbox: sandbox, Run: "r_0123456789abcdef", Client: "local", Detail: Detail(map[string]string{"argv": "/bin/true"})}
	}
	b.ReportAllocs()
	for b.Loop() {
		sandbox = strconv.FormatUint(rand.Uint64(), 36)
		_ = l.Linger(ctx, ev(KindSandboxCreated), ev(KindSandboxClaimed), ev(KindAPI))
		if err := l.Append(ctx, ev(KindRunStarted)); err != nil {
			b.Fatal(err)
		}
		_ = l.Linger(ctx, ev(KindRunFinished), ev(KindSandboxDestroyed))
	}
}
