package config

import (
	"go.yaml.in/yaml/v3"

	"github.com/airlockhq/airlock/internal/egress/policy"
)

var buildsKeys = []string{"allow", "cache_max", "concurrency", "limits", "tool", "upload_max"}

// Builds lets tokens build E2B templates on the daemon (the Template
// SDK's Template.build; docs/images.md): nil, no section, refuses them.
type Builds struct {
	// Tool is the tool a built template runs as: its limits, egress,
	// network, environment and mounts, with the build's image in place
	// of its own. A token builds only if it may use this tool, and a
	// create naming one of the token's templates is a session of it.
	Tool string
	// Allow are the destinations the build's steps may reach (as a
	// tool's egress); none means no network at build time.
	Allow []policy.Destination
	// Limits are each step's sandbox's ceilings, over the builder's
	// defaults (2 GiB memory, 4 GiB disk, 512 processes, 30 minutes).
	Limits Limits
	// Concurrency bounds the builds running at once on the node (1 if
	// unset); more wait their turn.
	Concurrency int
	// UploadMax bounds one uploaded file archive (1 GiB if unset).
	UploadMax int64
	// CacheMax bounds the build cache: the bytes of the step images no
	// name holds, least recently used trimmed first after each build
	// (10 GiB if unset).
	CacheMax int64
	Line     int
}

// Builds.UploadMax and Builds.CacheMax when unset.
const (
	DefaultBuildUploadMax = 1 << 30
	DefaultBuildCacheMax  = 10 << 30
)

func (p *parser) builds(n *yaml.Node, c *Config) error {
	const at = "builds"
	fs, err := p.fields(n, at, "a mapping of build settings (tool, allow, limits, concurrency, upload_max, cache_max)", buildsKeys)
	if err != nil {
		return err
	}
	b := &Builds{Concurrency: 1, UploadMax: DefaultBuildUploadMax, CacheMax: DefaultBuildCacheMax, Line: n.Line}
	for _, f := range fs {
		sub := join(at, f.name)
		switch f.name {
		case "tool":
			if b.Tool, err = p.str(f.val, sub); err == nil {
				p.buildTool = &toolRef{name: b.Tool, node: f.val, at: sub}
			}
		case "allow":
			b.Allow, err = p.egress(f.val, sub)
		case "limits":
			b.Limits, err = p.limits(f, sub)
		case "concurrency":
			var v int64
			v, err = p.integer(f.val, sub, 1, 64)
			b.Concurrency = int(v)
		case "cache_max":
			var v *int64
			if v, err = p.size(f.val, sub); err == nil {
				b.CacheMax = *v
			}
		case "upload_max":
			var v *int64
			if v, err = p.size(f.val, sub); err == nil {
				if *v < 1<<10 {
					err = p.errAt(f.val, sub, "at least 1KiB")
				}
				b.UploadMax = *v
			}
		}
		if err != nil {
			return err
		}
	}
	if b.Tool == "" {
		return p.errAt(n, at, "builds needs tool: the tool whose settings a built template runs with")
	}
	c.Builds = b
	return nil
}
