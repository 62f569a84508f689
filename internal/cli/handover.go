package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/airlockhq/airlock/sandbox"
)

// DaemonProgram is the file name of the program that carries the commands
// airlock hands over (cmd/airlockd).
const DaemonProgram = "airlockd"

// findDaemonProgram looks for DaemonProgram beside the running executable,
// then where airlock-init is looked for.
func findDaemonProgram() (string, error) {
	var tried []string
	if exe, err := os.Executable(); err == nil {
		tried = append(tried, filepath.Dir(exe))
	}
	tried = append(tried, sandbox.InitDirs...)
	for _, dir := range tried {
		p := filepath.Join(dir, DaemonProgram)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s not found in %s: it carries airlock's serve, mcp, session, pool, audit and image, runs of a tool, a config or an image, and the sandbox's egress gateway; install it beside airlock (go build -o DIR/ ./cmd/... from a clone, or go install github.com/airlockhq/airlock/cmd/...@VERSION)",
		DaemonProgram, strings.Join(tried, ", "))
}

// handOver replaces this process with airlockd running the same command
// line: the process (its id, descriptors, cgroup and environment) stays
// the one the caller started, as a service manager expects.
func handOver(args []string) error {
	p, err := findDaemonProgram()
	if err != nil {
		return err
	}
	argv := append([]string{p}, args[1:]...)
	if err := syscall.Exec(p, argv, os.Environ()); err != nil {
		return fmt.Errorf("start %s: %w", p, err)
	}
	panic("unreachable")
}
