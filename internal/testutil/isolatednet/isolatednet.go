// Package isolatednet runs a test package inside a network namespace of its
// own that holds only lo. Only tests import it.
package isolatednet

import (
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"testing"

	"github.com/airlockhq/airlock/internal/linux/netns"
	"github.com/airlockhq/airlock/internal/testutil"
)

// isolatedEnv marks a test binary that already runs in its own network
// namespace.
const isolatedEnv = "AIRLOCK_TEST_ISOLATED_NET"

// Main runs the package's tests in a fresh network namespace
// that holds only `lo`, for packages whose tests try forbidden
// destinations (metadata, private ranges, outside addresses): even when
// the code under test is wrong, nothing can leave the machine. Call it
// from TestMain: os.Exit(isolatednet.Main(m)). Without root the
// tests run as they are (the ones that need root skip).
func Main(m *testing.M) int {
	if os.Getenv(isolatedEnv) == "1" {
		if err := netns.LoopbackUp(); err != nil {
			fmt.Fprintf(os.Stderr, "isolated network: %v\n", err)
			return 1
		}
		return m.Run()
	}
	if os.Geteuid() != 0 {
		return m.Run()
	}
	cmd := exec.Command(os.Args[0], os.Args[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = append(os.Environ(), isolatedEnv+"=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNET, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Run(); err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			return ee.ExitCode()
		}
		fmt.Fprintf(os.Stderr, "run tests in an isolated network namespace: %v\n", err)
		return 1
	}
	return 0
}

// Require skips a test unless it runs in the namespace Main made.
func Require(t testing.TB) {
	t.Helper()
	testutil.RequireRoot(t)
	if os.Getenv(isolatedEnv) != "1" {
		t.Skip("needs the isolated network namespace of isolatednet.Main")
	}
}
