package sandbox

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"

	"github.com/airlockhq/airlock/internal/rootowned"
)

// InitName is the file name of airlock's init program (cmd/airlock-init),
// which is every sandbox's PID 1 and the runtime's spawner.
const InitName = "airlock-init"

// selfPath names the running binary, for the fallback in which it acts as
// init and spawner itself.
const selfPath = "/proc/self/exe"

// InitDirs are searched for InitName after the directory of the running
// executable, in order.
var InitDirs = []string{"/usr/local/libexec/airlock", "/usr/libexec/airlock"}

// childReady is set by Child: the running binary hands over to init and
// spawner code when started as one, so it can serve as its own init.
var childReady atomic.Bool

// findInit returns the init program to use when Options.InitPath is unset:
// InitName beside the running executable, then in InitDirs; failing those,
// the running binary itself if it calls Child (self is then true). A file
// found but unsafe is an error, never skipped.
func findInit() (path string, self bool, err error) {
	var tried []string
	if exe, err := os.Executable(); err == nil {
		tried = append(tried, filepath.Dir(exe))
	}
	tried = append(tried, InitDirs...)
	for _, dir := range tried {
		p := filepath.Join(dir, InitName)
		if _, err := os.Lstat(p); err != nil {
			continue
		}
		if err := checkInit(p); err != nil {
			return "", false, err
		}
		return p, false, nil
	}
	if childReady.Load() {
		return selfPath, true, nil
	}
	return "", false, fmt.Errorf("%s not found in %s: install it beside airlock (go build -o DIR/ ./cmd/... from a clone, or go install github.com/airlockhq/airlock/cmd/...@VERSION)",
		InitName, strings.Join(tried, ", "))
}

// checkInit makes sure path is fit to be every sandbox's init: a regular,
// executable file that only root can change, in directories only root can
// change (as sshd's StrictModes checks). Init runs inside each sandbox
// before it is confined; a binary that someone else could replace would be
// theirs to run there.
func checkInit(path string) error {
	if path == selfPath {
		return nil
	}
	return rootowned.Check(path, "every sandbox's init")
}
