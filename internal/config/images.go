package config

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/airlockhq/airlock/internal/sbspec"
)

var (
	imagesKeys   = []string{"max_entries", "max_pull", "max_size", "registries", "snapshot_max_age", "snapshots", "store", "volumes"}
	registryKeys = []string{"insecure", "secret", "username"}
)

// DefaultImageStore is the image store's directory unless the file names
// one: the store's own default (image.DefaultDir, which this package does
// not link).
const DefaultImageStore = "/var/lib/airlock/images"

// DefaultSnapshots is the snapshots' directory unless the file names one.
const DefaultSnapshots = "/var/lib/airlock/snapshots"

// DefaultVolumes is the volumes' directory unless the file names one.
const DefaultVolumes = "/var/lib/airlock/volumes"

// Images configures the image store; the runtime takes it as the store's
// options (see attach.StoreOptions).
type Images struct {
	// Store is the store's directory.
	Store string
	// Snapshots is the directory of the sessions' snapshots; empty is
	// DefaultSnapshots.
	Snapshots string
	// Volumes is the directory of the volumes; empty is DefaultVolumes.
	Volumes string
	// SnapshotMaxAge, if set, is the policy that collects snapshots:
	// one older is deleted (and its deletion recorded). Unset, they are
	// kept until deleted.
	SnapshotMaxAge time.Duration
	// MaxSize and MaxEntries cap what one import may unpack; 0 takes the
	// store's defaults (16GiB, 1048576).
	MaxSize    int64
	MaxEntries int
	// MaxPull caps what one pull downloads (its layers, compressed); 0
	// takes the smaller of twice MaxSize plus 1 GiB and half the free
	// space of the store's file system (see package pull).
	MaxPull int64
	// Registries are what `airlock image pull` knows of a registry, by
	// host ("ghcr.io", "registry.internal:5000"): its credential, and
	// whether it may be reached over plain HTTP.
	Registries map[string]Registry
}

// Registry is one registry's settings: a user name and a secret
// (docs/config.md#secrets) holding the password or token, and Insecure:
// plain HTTP for a registry on a public address (loopback and private
// addresses get it anyway).
type Registry struct {
	Username string
	Secret   string
	Insecure bool
}

func defaultImages() Images { return Images{Store: DefaultImageStore} }

func (p *parser) images(n *yaml.Node, c *Config) error {
	const at = "images"
	fs, err := p.fields(n, at, "a mapping of image store settings", imagesKeys)
	if err != nil {
		return err
	}
	for _, f := range fs {
		sub := join(at, f.name)
		switch f.name {
		case "store":
			c.Images.Store, err = p.absPath(f.val, sub)
		case "snapshots":
			c.Images.Snapshots, err = p.absPath(f.val, sub)
		case "volumes":
			c.Images.Volumes, err = p.absPath(f.val, sub)
		case "snapshot_max_age":
			var d *time.Duration
			if d, err = p.duration(f.val, sub, false); err == nil {
				if *d < time.Hour {
					err = p.errAt(f.val, sub, "%s: want an hour or more", quote(d.String()))
				}
				c.Images.SnapshotMaxAge = *d
			}
		case "max_size":
			c.Images.MaxSize, err = p.positiveSize(f.val, sub)
		case "max_pull":
			c.Images.MaxPull, err = p.positiveSize(f.val, sub)
		case "max_entries":
			var v int64
			v, err = p.integer(f.val, sub, 1, 1<<31-1)
			c.Images.MaxEntries = int(v)
		case "registries":
			c.Images.Registries, err = p.registries(f.val, sub)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// user parses a tool's user: "UID" or "UID:GID", numbers inside the
// sandbox's ids 0-65535.
func (p *parser) user(n *yaml.Node, at string) (*sbspec.User, error) {
	s, err := p.str(n, at)
	if err != nil {
		return nil, err
	}
	u, g, hasG := strings.Cut(s, ":")
	if !hasG {
		g = u
	}
	uid, err1 := strconv.ParseUint(u, 10, 16)
	gid, err2 := strconv.ParseUint(g, 10, 16)
	if err1 != nil || err2 != nil {
		return nil, p.errAt(n, at, "%s: want UID or UID:GID, numbers from 0 to 65535", quote(s))
	}
	return &sbspec.User{UID: uint32(uid), GID: uint32(gid)}, nil
}

// rootfs parses a tool's rootfs: read-only (the default) or writable.
func (p *parser) rootfs(n *yaml.Node, at string) (bool, error) {
	s, err := p.str(n, at)
	if err != nil {
		return false, err
	}
	switch s {
	case "read-only":
		return false, nil
	case "writable":
		return true, nil
	}
	return false, p.errAt(n, at, "%s: want \"read-only\" or \"writable\"", quote(s))
}

// isolation parses a tool's isolation: "namespaces" (the default, kept
// as "") or "gvisor".
func (p *parser) isolation(n *yaml.Node, at string) (string, error) {
	s, err := p.str(n, at)
	if err != nil {
		return "", err
	}
	switch s {
	case sbspec.IsolationNamespaces:
		return "", nil
	case sbspec.IsolationGVisor:
		return s, nil
	}
	return "", p.errAt(n, at, "%s: want %q or %q", quote(s), sbspec.IsolationNamespaces, sbspec.IsolationGVisor)
}

// checkGVisorTool says what of a gvisor tool its backend cannot give, or
// "": the sandbox runtime refuses the same (sandbox.checkGVisorSpec), and
// the config says so at load, not at the first run.
func checkGVisorTool(t *Tool) string {
	lim := t.Limits.Apply(sbspec.DefaultLimits())
	switch {
	case t.User != nil && t.User.UID == 0:
		return "commands as root (user 0) are not available with isolation gvisor: gVisor's root may signal any process of the sandbox, airlock's init included"
	case lim.Memory < sbspec.GVisorMinMemory:
		return fmt.Sprintf("limits.memory %d bytes: isolation gvisor needs %d MiB at least (gVisor's own processes count in it)", lim.Memory, sbspec.GVisorMinMemory>>20)
	case lim.Pids < sbspec.GVisorMinPids:
		return fmt.Sprintf("limits.pids %d: isolation gvisor needs %d at least (gVisor's own threads count in it)", lim.Pids, sbspec.GVisorMinPids)
	}
	return ""
}

// registries parses images.registries: registry host to credential.
func (p *parser) registries(n *yaml.Node, at string) (map[string]Registry, error) {
	fs, err := p.fields(n, at, "a mapping of registry hosts to their settings", nil)
	if err != nil {
		return nil, err
	}
	out := map[string]Registry{}
	for _, f := range fs {
		sub := join(at, f.name)
		if f.name == "" || strings.ContainsAny(f.name, "/ @") || strings.ToLower(f.name) != f.name {
			return nil, p.errAt(f.key, sub, "%s: want a registry host, like ghcr.io or registry.internal:5000", quote(f.name))
		}
		rs, err := p.fields(f.val, sub, "a mapping with username, secret and insecure", registryKeys)
		if err != nil {
			return nil, err
		}
		var r Registry
		for _, g := range rs {
			gsub := join(sub, g.name)
			switch g.name {
			case "username":
				r.Username, err = p.str(g.val, gsub)
			case "secret":
				if r.Secret, err = p.str(g.val, gsub); err == nil {
					p.secretRefs = append(p.secretRefs, secretRef{name: r.Secret, node: g.val, at: gsub})
				}
			case "insecure":
				r.Insecure, err = p.boolean(g.val, gsub)
			}
			if err != nil {
				return nil, err
			}
		}
		switch {
		case r.Username != "" && r.Secret == "":
			return nil, p.errAt(f.val, sub, "a registry's credential needs a secret")
		case r.Secret == "" && !r.Insecure:
			return nil, p.errAt(f.val, sub, "say a secret (the registry's credential) or insecure: true")
		}
		out[f.name] = r
	}
	return out, nil
}
