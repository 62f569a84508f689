package daemon

import (
	"runtime"
	"testing"
)

func TestDaemonProcs(t *testing.T) {
	for _, tt := range []struct{ n, want int }{{1, 1}, {2, 1}, {3, 2}, {4, 2}, {8, 4}, {63, 32}, {64, 32}} {
		if got := daemonProcs(tt.n); got != tt.want {
			t.Errorf("daemonProcs(%d) = %d, want %d", tt.n, got, tt.want)
		}
	}
}

// TestShareProcessors: the first daemon to serve sets the share, a second
// leaves it, and the runtime's default comes back when the last stops.
func TestShareProcessors(t *testing.T) {
	t.Setenv("GOMAXPROCS", "")
	runtime.SetDefaultGOMAXPROCS()
	t.Cleanup(runtime.SetDefaultGOMAXPROCS)
	def := runtime.GOMAXPROCS(0)
	a := shareProcessors()
	if got := runtime.GOMAXPROCS(0); got != daemonProcs(def) {
		t.Fatalf("serving: GOMAXPROCS %d, want %d", got, daemonProcs(def))
	}
	b := shareProcessors()
	a()
	a() // twice changes nothing
	if got := runtime.GOMAXPROCS(0); got != daemonProcs(def) {
		t.Errorf("one of two stopped: GOMAXPROCS %d, want %d", got, daemonProcs(def))
	}
	b()
	if got := runtime.GOMAXPROCS(0); got != def {
		t.Errorf("both stopped: GOMAXPROCS %d, want the default %d", got, def)
	}
	// An operator's setting is theirs.
	t.Setenv("GOMAXPROCS", "7")
	runtime.GOMAXPROCS(7)
	c := shareProcessors()
	if got := runtime.GOMAXPROCS(0); got != 7 {
		t.Errorf("with GOMAXPROCS=7 in the environment: %d", got)
	}
	c()
}
