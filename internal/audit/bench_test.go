package audit

import (
	"context"
	"path/filepath"
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
	ev := func(kind string) Event {
		return Event{Kind: kind, Tool: "warm", Sandbox: "0123456789ab", Run: "r_0123456789abcdef", Client: "local", Detail: Detail(map[string]string{"argv": "/bin/true"})}
	}
	b.ReportAllocs()
	for b.Loop() {
		_ = l.Linger(ctx, ev(KindSandboxCreated), ev(KindSandboxClaimed), ev(KindAPI))
		if err := l.Append(ctx, ev(KindRunStarted)); err != nil {
			b.Fatal(err)
		}
		_ = l.Linger(ctx, ev(KindRunFinished), ev(KindSandboxDestroyed))
	}
}
