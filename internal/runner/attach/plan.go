package attach

import (
	"fmt"
	"slices"

	"github.com/airlockhq/airlock/internal/broker"
	"github.com/airlockhq/airlock/internal/config"
	"github.com/airlockhq/airlock/internal/egress/policy"
	"github.com/airlockhq/airlock/internal/image"
	"github.com/airlockhq/airlock/sandbox"
)

// Plan is everything a run of a tool takes from the config: the spec its
// sandbox is made from, its command's environment and directory, and the
// policy bound to the sandbox when it is claimed.
type Plan struct {
	// Spec has the limits, label, mounts, user and image; the caller adds
	// OnStart.
	Spec sandbox.Spec
	// Env is the image's environment, then the tool's, then the
	// overrides'.
	Env []string
	// Workdir is the overrides', else the tool's, else the image's (else
	// config.DefaultWorkdir with an image); empty leaves it to the caller.
	Workdir string
	// Argv and Digest are the image's default command and digest; empty
	// without an image.
	Argv   []string
	Digest string
	Policy Policy
}

// Overrides are a caller's changes to a tool for one run (the command
// line's flags); the zero value changes nothing.
type Overrides struct {
	// Limits, when set, changes the tool's limits (the defaults under the
	// tool's own).
	Limits func(*sandbox.Limits)
	// Image is the run's image, already resolved in the store; nil runs
	// on the host's directories.
	Image *image.Image
	// Egress and Env come after the tool's.
	Egress []policy.Destination
	Env    []string
	// Workdir replaces the tool's when WorkdirSet.
	Workdir    string
	WorkdirSet bool
}

// For is the one translation of a tool into what its runs need, for the
// daemon (runs, sessions, MCP tools and gateway servers) and the command
// line alike: no caller assembles a spec or a policy itself. c may be nil
// for a tool that names no services. A service the config does not have
// is an error.
func For(c *config.Config, t *config.Tool, o Overrides) (Plan, error) {
	lim := Limits(t.Limits)
	if o.Limits != nil {
		o.Limits(&lim)
	}
	p := Plan{
		Spec:    sandbox.Spec{Limits: lim, Label: t.Name, Mounts: Mounts(t.Mounts), User: User(t.User), Isolation: t.Isolation},
		Env:     append(slices.Clone(t.Env), o.Env...),
		Workdir: t.Workdir,
	}
	set := t.WorkdirSet
	if o.WorkdirSet {
		p.Workdir, set = o.Workdir, true
	}
	if o.Image != nil {
		merged := config.Tool{Env: p.Env, Workdir: p.Workdir, WorkdirSet: set, User: t.User, WritableRoot: t.WritableRoot}
		ir := WithImage(&merged, o.Image)
		p.Spec.Image, p.Spec.User, p.Env, p.Workdir = ir.Image, ir.User, ir.Env, ir.Workdir
		p.Argv, p.Digest = o.Image.Argv(), o.Image.Digest
	}
	p.Policy = Policy{
		Tool:    t.Name,
		Egress:  append(slices.Clone(t.Egress), o.Egress...),
		Network: NetworkLimits(t.Network),
	}
	for _, name := range t.Services {
		s, err := c.Service(name)
		if err != nil {
			return Plan{}, fmt.Errorf("tool %s: %w", t.Name, err)
		}
		p.Policy.Services = append(p.Policy.Services, s)
		p.Policy.Secrets = c.Secrets
	}
	if len(p.Policy.Services) > 0 {
		p.Policy.Rates = broker.NewRates()
	}
	return p, nil
}
