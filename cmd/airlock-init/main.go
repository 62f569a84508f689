// Command airlock-init is PID 1 of every airlock sandbox, and the helper
// (the spawner) that clones those inits for an airlock process. airlock
// starts it; it is not meant to be run by hand. It links only what init
// and the spawner need, so that every sandbox pays the start of this small
// program, not of the whole of airlock (see internal/deptest).
package main

import (
	"os"
	"strconv"

	"github.com/airlockhq/airlock/internal/initproto"
	"github.com/airlockhq/airlock/internal/sbinit"
	"github.com/airlockhq/airlock/internal/spawner"
)

// init runs a sandbox's init before main, on the startup thread (see
// sbinit.MainOnStartupThread); it never returns.
func init() {
	if sbinit.IsInit() {
		os.Exit(sbinit.MainOnStartupThread())
	}
}

func main() {
	switch {
	case spawner.IsSpawner():
		os.Exit(spawner.Main())
	case len(os.Args) == 2 && os.Args[1] == "--version":
		os.Stdout.WriteString("airlock-init protocol " + strconv.Itoa(initproto.Version) + "\n")
		return
	}
	os.Stderr.WriteString("airlock-init is started by airlock for each sandbox; it is not run by hand (airlock-init --version names its protocol)\n")
	os.Exit(2)
}
