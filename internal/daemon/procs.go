package daemon

import (
	"os"
	"runtime"
	"sync"
)

// The daemon's Go scheduler gets half the processors the runtime would
// give it (at least one), and the sandboxes' processes the rest: what a
// sandbox costs is mostly its own processes and the kernel's work for
// them, the daemon's part a third or less. With a processor of its own
// for each of the host's, the runtime wakes an idle thread on another
// processor for nearly every goroutine that becomes ready, and that
// thread spins looking for work on a processor a sandbox wanted: on a
// 2-processor host, a run through the API cost about 4 % more of the
// machine's CPU time and 14 more context switches (docs/benchmarks.md,
// decision 0039). An operator's GOMAXPROCS is left as it is.

var procs struct {
	sync.Mutex
	serving int // daemons of this process that are serving
}

// daemonProcs is how many processors the daemon's scheduler gets when
// the runtime would give it n.
func daemonProcs(n int) int { return max(1, (n+1)/2) }

// shareProcessors sets the process's GOMAXPROCS for a daemon that starts
// serving, unless the environment sets it, and returns what gives the
// runtime its default back once the last daemon of the process stops (a
// process may run more than one: the tests, the benchmark).
func shareProcessors() (restore func()) {
	if os.Getenv("GOMAXPROCS") != "" {
		return func() {}
	}
	procs.Lock()
	defer procs.Unlock()
	if procs.serving == 0 {
		runtime.GOMAXPROCS(daemonProcs(runtime.GOMAXPROCS(0)))
	}
	procs.serving++
	var once sync.Once
	return func() {
		once.Do(func() {
			procs.Lock()
			defer procs.Unlock()
			if procs.serving--; procs.serving == 0 {
				runtime.SetDefaultGOMAXPROCS()
			}
		})
	}
}
