// Package gvisor drives runsc, gVisor's OCI runtime, for airlock's gvisor
// isolation backend: where runsc is, which runsc it is, the flags every
// airlock sandbox runs it with, the bundle (spec.go) that describes one
// sandbox to it, and what runsc's log says of its container's end
// (log.go). Starting, confining and bounding the sandbox is
// package sandbox's; this package runs nothing.
package gvisor

import (
	"bytes"
	"context"
	"debug/buildinfo"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/airlockhq/airlock/internal/rootowned"
)

// Name is runsc's file name.
const Name = "runsc"

// Dirs are searched for runsc after the directory of the running
// executable, in order.
var Dirs = []string{"/usr/local/libexec/airlock", "/usr/local/bin", "/usr/bin"}

// Find returns the runsc to use: path when set, else runsc beside the
// running executable, then in Dirs. The file must be one only root can
// change: it runs as root, and builds every gVisor sandbox.
func Find(path string) (string, error) {
	if path != "" {
		if err := rootowned.Check(path, "airlock's runsc"); err != nil {
			return "", err
		}
		return path, nil
	}
	var tried []string
	if exe, err := os.Executable(); err == nil {
		tried = append(tried, filepath.Dir(exe))
	}
	tried = append(tried, Dirs...)
	for _, dir := range tried {
		p := filepath.Join(dir, Name)
		if _, err := os.Lstat(p); err != nil {
			continue
		}
		if err := rootowned.Check(p, "airlock's runsc"); err != nil {
			return "", err
		}
		return p, nil
	}
	return "", fmt.Errorf("%s not found in %s: build it (scripts/runsc in airlock's source, or CGO_ENABLED=0 go install gvisor.dev/gvisor/runsc@%s) and install it there, or name it with --runsc",
		Name, strings.Join(tried, ", "), PinnedVersion)
}

// PinnedVersion is the gvisor.dev/gvisor module version airlock is tested
// with (scripts/runsc builds it).
const PinnedVersion = "v0.0.0-20260905035102-160fafc42237"

// Version names the runsc at path: the gvisor.dev/gvisor module version
// it was built from ("v0.0.0-2026..."), as its Go build information says,
// or else what `runsc --version` says (scripts/runsc's build, of a copy
// of the module, and gVisor's own release builds, whose build information
// names no version), or "" when neither says.
func Version(path string) string {
	if v := moduleVersion(path); v != "" && v != "(devel)" {
		return v
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, path, "--version").Output()
	if err != nil {
		return ""
	}
	return versionLine(string(out))
}

// versionLine reads the version from `runsc --version`'s output, whose
// first line is "runsc version VERSION".
func versionLine(out string) string {
	first, _, _ := strings.Cut(out, "\n")
	v, ok := strings.CutPrefix(strings.TrimSpace(first), "runsc version ")
	if !ok || v == "VERSION_MISSING" || strings.ContainsAny(v, " \t") {
		return ""
	}
	return v
}

func moduleVersion(path string) string {
	bi, err := buildinfo.ReadFile(path)
	if err != nil {
		return ""
	}
	if bi.Main.Path == "gvisor.dev/gvisor" {
		return bi.Main.Version
	}
	for _, d := range bi.Deps {
		if d.Path == "gvisor.dev/gvisor" {
			return d.Version
		}
	}
	return bi.Main.Version
}

// Flags are runsc's global flags for an airlock sandbox whose runsc state
// lives in root (its own directory: one per sandbox).
//
//   - systrap: the platform that needs no KVM.
//   - host network: the guest's sockets are host sockets in the sandbox's
//     own network namespace, which holds only lo and airlock's gateway
//     listeners, so egress is airlock's exactly as for the namespace
//     backend (see docs/isolation.md for why not gVisor's netstack).
//   - no cgroups of runsc's: the sandbox, runsc, its sentry and gofer
//     run in the cgroup airlock made for the sandbox, so all of gVisor's
//     own memory and threads count against the sandbox's ceilings.
//   - no overlay: the root is read-only; the writable directories are
//     binds of the sandbox's size-limited tmpfs on the host.
//   - no host Unix sockets or FIFOs reachable from the guest.
func Flags(root string) []string {
	return []string{
		"--root=" + root,
		"--platform=systrap",
		"--network=host",
		"--ignore-cgroups",
		"--overlay2=none",
		"--host-settings=ignore",
		"--host-uds=none",
		"--host-fifo=none",
		"--file-access-mounts=shared",
	}
}

// precompiledMarker is in a runsc that has the sentry's seccomp program
// for airlock's options compiled in: the program's name, its options key,
// as gVisor's registries of precompiled programs hold it (scripts/runsc's
// build, and gVisor's own release builds, which precompile every
// combination of options).
var precompiledMarker = []byte(`Platform="systrap" HostNetwork=true HostNetworkRawSockets=false`)

// Precompiled says whether the runsc at path has the sentry's seccomp
// program for airlock's options compiled in. One without it builds and
// optimizes the program at every sandbox's start: 35-40 ms of CPU (a
// runsc built by go install).
func Precompiled(path string) (bool, error) {
	f, err := os.Open(path)
	if err != nil {
		return false, err
	}
	defer f.Close()
	return containsBytes(f, precompiledMarker)
}

// containsBytes says whether r holds pat, read in chunks that overlap by
// len(pat)-1 bytes.
func containsBytes(r io.Reader, pat []byte) (bool, error) {
	buf := make([]byte, 1<<20)
	keep := 0
	for {
		n, err := io.ReadFull(r, buf[keep:])
		if bytes.Contains(buf[:keep+n], pat) {
			return true, nil
		}
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		keep = min(len(pat)-1, keep+n)
		copy(buf, buf[len(buf)-keep:])
	}
}
