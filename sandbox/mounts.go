package sandbox

import (
	"fmt"
	"os"
	"path"
	"strings"

	"github.com/airlockhq/airlock/internal/sbinit"
)

// Mount is a host file or directory bound read-only into a sandbox, so a
// tool's or MCP server's code can live on the host. It is never writable,
// and nosuid and nodev like every bind.
type Mount struct {
	// Source is the absolute host path. Init reaches it with the
	// sandbox's unprivileged ids, so it must be readable by others.
	Source string
	// Target is the absolute path inside; it may not be in or over the
	// paths airlock builds (/, /proc, /dev, /etc, /tmp, /workspace, the
	// host's system directories).
	Target string
}

// reservedTargets are the paths a mount may not cover or land inside.
var reservedTargets = []string{"/proc", "/dev", "/sys", "/etc", "/tmp", "/workspace", "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/run", "/var", "/root", "/home"}

// maxMounts bounds a spec's mounts.
const maxMounts = 32

// CheckMount reports why m cannot be mounted, or nil. It looks at the
// host path too: it must exist and not be a symlink.
func CheckMount(m Mount) error {
	for _, p := range []struct{ what, p string }{{"source", m.Source}, {"target", m.Target}} {
		if !path.IsAbs(p.p) || path.Clean(p.p) != p.p || len(p.p) > 4095 || strings.ContainsRune(p.p, 0) {
			return fmt.Errorf("mount %s %q: want an absolute, clean path", p.what, p.p)
		}
	}
	if m.Target == "/" {
		return fmt.Errorf("mount target %q: the root is airlock's", m.Target)
	}
	for _, r := range reservedTargets {
		if m.Target == r || strings.HasPrefix(m.Target, r+"/") || strings.HasPrefix(r, m.Target+"/") {
			return fmt.Errorf("mount target %q: %s is built by airlock; choose another place, like /srv or /opt", m.Target, r)
		}
	}
	fi, err := os.Lstat(m.Source)
	if err != nil {
		return fmt.Errorf("mount source: %w", err)
	}
	if fi.Mode()&os.ModeSymlink != 0 {
		return fmt.Errorf("mount source %q is a symlink; name what it points to", m.Source)
	}
	if !fi.IsDir() && !fi.Mode().IsRegular() {
		return fmt.Errorf("mount source %q is neither a directory nor a regular file", m.Source)
	}
	// Init binds the source with the sandbox's unprivileged ids: others
	// must be able to reach and read it.
	need := os.FileMode(0o004)
	if fi.IsDir() {
		need = 0o005
	}
	if fi.Mode().Perm()&need != need {
		return fmt.Errorf("mount source %q is not readable by others (mode %v); the sandbox reads it with unprivileged ids", m.Source, fi.Mode().Perm())
	}
	for d := path.Dir(m.Source); d != "/"; d = path.Dir(d) {
		if di, err := os.Stat(d); err == nil && di.Mode().Perm()&0o001 == 0 {
			return fmt.Errorf("mount source %q: %s cannot be traversed by others (mode %v); the sandbox reads it with unprivileged ids", m.Source, d, di.Mode().Perm())
		}
	}
	return nil
}

// mountBinds checks mounts and returns them as binds for init.
func mountBinds(ms []Mount) ([]sbinit.Bind, error) {
	if len(ms) > maxMounts {
		return nil, fmt.Errorf("%d mounts; at most %d", len(ms), maxMounts)
	}
	var out []sbinit.Bind
	seen := map[string]bool{}
	for _, m := range ms {
		if err := CheckMount(m); err != nil {
			return nil, err
		}
		if seen[m.Target] {
			return nil, fmt.Errorf("two mounts at %q", m.Target)
		}
		seen[m.Target] = true
		fi, err := os.Stat(m.Source)
		if err != nil {
			return nil, fmt.Errorf("mount source: %w", err)
		}
		out = append(out, sbinit.Bind{Source: m.Source, Target: m.Target, File: !fi.IsDir()})
	}
	return out, nil
}
