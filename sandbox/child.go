package sandbox

import (
	"os"
	"strconv"

	"github.com/airlockhq/airlock/internal/sbinit"
	"github.com/airlockhq/airlock/internal/spawner"
	"golang.org/x/sys/unix"
)

// Child runs this process as one of the runtime's helper processes when it
// was started as one (a sandbox's init, or the spawner), and returns its
// exit code with ok true. A binary calls it first thing in main (and in
// TestMain) only to serve as its own init when airlock-init is not
// installed (see Options.InitPath); airlock does.
//
// Before that, in every process, it marks each descriptor above stderr
// close-on-exec. A process inherits whatever descriptors its parent left
// open without that flag (a shell's redirections, a supervisor's pipes), and
// Go passes such descriptors on to every child it starts.
func Child() (code int, ok bool) {
	childReady.Store(true)
	closeInheritedOnExec()
	switch {
	case sbinit.IsInit():
		return sbinit.Main(), true
	case spawner.IsSpawner():
		return spawner.Main(), true
	}
	return 0, false
}

func closeInheritedOnExec() {
	if unix.CloseRange(3, ^uint(0), unix.CLOSE_RANGE_CLOEXEC) == nil {
		return
	}
	// Kernels before 5.11 lack CLOSE_RANGE_CLOEXEC: flag them one by one.
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return
	}
	for _, e := range ents {
		if fd, err := strconv.Atoi(e.Name()); err == nil && fd > 2 {
			unix.CloseOnExec(fd)
		}
	}
}
