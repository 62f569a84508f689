package sandbox

import (
	"fmt"
	"os"

	"github.com/airlockhq/airlock/internal/sbinit"
	"github.com/airlockhq/airlock/internal/sbspec"
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

// maxMounts bounds a spec's mounts.
const maxMounts = 32

// CheckMount reports why m cannot be mounted, or nil. It looks at the
// host path too: it must exist and not be a symlink.
func CheckMount(m Mount) error { return sbspec.Mount(m).Check() }

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
