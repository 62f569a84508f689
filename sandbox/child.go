package sandbox

import (
	"github.com/airlockhq/airlock/internal/sbinit"
	"github.com/airlockhq/airlock/internal/spawner"
)

// Child runs this process as one of the runtime's helper processes when it
// was started as one (a sandbox's init, or the spawner), and returns its
// exit code with ok true. Any binary that creates sandboxes must call it
// first thing in main (and in TestMain): the runtime re-executes the running
// binary for both.
func Child() (code int, ok bool) {
	switch {
	case sbinit.IsInit():
		return sbinit.Main(), true
	case spawner.IsSpawner():
		return spawner.Main(), true
	}
	return 0, false
}
