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
// exit code with ok true. Any binary that creates sandboxes must call it
// first thing in main (and in TestMain): the runtime re-executes the running
// binary for both.
//
// Before that, in every process, it marks each descriptor above stderr
// close-on-exec. A process inherits whatever descriptors its parent left
// open without that flag (a shell's redirections, a supervisor's pipes), and
// Go passes such descriptors on to every child it starts: without this, the
// spawner, each init, and through init every command in a sandbox would
// hold them — host files and pipes inside the sandbox.
func Child() (code int, ok bool) {
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
