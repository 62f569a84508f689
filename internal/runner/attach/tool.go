package attach

import (
	"github.com/airlockhq/airlock/internal/config"
	"github.com/airlockhq/airlock/internal/sbspec"
	"github.com/airlockhq/airlock/sandbox"
)

// Package config emits plain values (sbspec's, its own) and links none of
// the runtime; these turn a tool's settings into what the runtime takes,
// once, for the daemon and the command line alike.

// Limits are a tool's ceilings: its overrides over the defaults.
func Limits(l config.Limits) sandbox.Limits {
	return sandbox.Limits(l.Apply(sbspec.DefaultLimits()))
}

// Mounts are a tool's read-only host mounts.
func Mounts(ms []sbspec.Mount) []sandbox.Mount {
	if ms == nil {
		return nil
	}
	out := make([]sandbox.Mount, len(ms))
	for i, m := range ms {
		out[i] = sandbox.Mount(m)
	}
	return out
}

// User is who a tool's commands run as; nil leaves it to the image or the
// runtime's default.
func User(u *sbspec.User) *sandbox.User { return (*sandbox.User)(u) }
