package config

import (
	"errors"
	"path"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/airlockhq/airlock/internal/broker/brokerspec"
	"github.com/airlockhq/airlock/internal/image/imageref"
	"github.com/airlockhq/airlock/internal/sbspec"
	"github.com/airlockhq/airlock/internal/units"
)

// Allowed keys of each mapping, sorted: they are listed in errors.
var (
	topKeys     = []string{"audit", "builds", "cluster", "images", "mcp", "mcp_servers", "secrets", "server", "services", "tools", "tracing"}
	toolKeys    = []string{"command", "description", "e2b_templates", "egress", "env", "image", "inputs", "isolation", "limits", "mounts", "network", "pool", "rootfs", "services", "stdin", "user", "volumes", "workdir"}
	mountKeys   = []string{"source", "target"}
	poolKeys    = []string{"idle", "kernels", "max", "min", "warm"}
	limitKeys   = []string{"cpu", "cpu_time", "disk", "fds", "memory", "output", "pids", "time"}
	egressKeys  = []string{"addresses", "host", "opaque", "ports", "private"}
	networkKeys = []string{"bytes", "connections", "dns_rate", "host_lookups", "wildcard_names"}
)

// maxPath is the longest path accepted, PATH_MAX less the NUL.
const maxPath = 4095

// validToolName reports whether name is 1-64 letters, digits, '_' and '-',
// starting with a letter or digit. Names reach command lines, MCP tool
// lists and log lines, so they are kept to characters that need no quoting
// anywhere.
func validToolName(name string) bool {
	if name == "" || len(name) > 64 || name[0] == '_' || name[0] == '-' {
		return false
	}
	return strings.IndexFunc(name, func(r rune) bool { return !isNameChar(r) }) < 0
}

// validEnvName reports whether name is [A-Za-z_][A-Za-z0-9_]*, the names
// every shell can set and read.
func validEnvName(name string) bool {
	if name == "" || name[0] >= '0' && name[0] <= '9' {
		return false
	}
	for _, r := range name {
		if !(isNameChar(r) && r != '-') {
			return false
		}
	}
	return true
}

// tool parses one entry of tools or (section "mcp_servers") of
// mcp_servers.
func (p *parser) tool(tf field, section string) (*Tool, error) {
	name := tf.name
	at := join(section, name)
	if !validToolName(name) {
		return nil, p.errAt(tf.key, at, "invalid tool name %s: use 1-64 letters, digits, '_' and '-', starting with a letter or digit", quote(name))
	}
	t := &Tool{
		Name:    name,
		Image:   ImageHost,
		Workdir: DefaultWorkdir,
		Network: DefaultNetwork(),
		Line:    tf.key.Line,
	}
	fs, err := p.fields(tf.val, at, "a mapping of tool settings", toolKeys)
	if err != nil {
		return nil, err
	}
	var cmdNodes []*yaml.Node
	var stdinNode, rootfsNode, isolationNode *yaml.Node
	for _, f := range fs {
		sub := join(at, f.name)
		switch f.name {
		case "command":
			t.Command, cmdNodes, err = p.command(f.val, sub)
		case "inputs":
			t.Inputs, err = p.inputs(f.val, sub)
		case "stdin":
			stdinNode = f.val
			var s string
			if s, err = p.str(f.val, sub); err == nil {
				var tpl Template
				tpl, err = parseTemplate(s)
				name, whole := tpl.Whole()
				if err == nil && !whole {
					err = p.errAt(f.val, sub, "stdin is one whole input, like \"{text}\"")
				}
				t.Stdin = name
			}
			if err != nil {
				if _, ok := err.(*Error); !ok {
					err = p.wrapAt(f.val, sub, err)
				}
			}
		case "mounts":
			t.Mounts, err = p.mounts(f.val, sub)
		case "volumes":
			t.Volumes, err = p.toolVolumes(f.val, sub)
		case "description":
			t.Description, err = p.str(f.val, sub)
		case "image":
			t.Image, err = p.image(f.val, sub)
		case "workdir":
			t.Workdir, err = p.absPath(f.val, sub)
			t.WorkdirSet = true
		case "user":
			t.User, err = p.user(f.val, sub)
		case "rootfs":
			t.WritableRoot, err = p.rootfs(f.val, sub)
			rootfsNode = f.val
		case "isolation":
			t.Isolation, err = p.isolation(f.val, sub)
			isolationNode = f.val
		case "env":
			t.Env, err = p.env(f.val, sub)
		case "services":
			t.Services, err = p.toolServices(t, f.val, sub)
		case "limits":
			t.Limits, err = p.limits(f, sub)
		case "egress":
			t.Egress, err = p.egress(f.val, sub)
		case "network":
			t.Network, err = p.network(f.val, sub)
		case "pool":
			t.Pool, err = p.pool(f.val, sub)
		case "e2b_templates":
			t.E2BTemplates, err = p.names(f.val, sub, "template name", validToolName, nil)
		}
		if err != nil {
			return nil, err
		}
	}
	if err := p.checkInputs(t, cmdNodes, stdinNode, at); err != nil {
		return nil, err
	}
	if t.WritableRoot && t.Image == ImageHost {
		return nil, p.errAt(rootfsNode, join(at, "rootfs"), "a writable root needs an imported image (image: NAME); the host image is always read-only")
	}
	if t.Isolation == sbspec.IsolationGVisor {
		if err := checkGVisorTool(t); err != "" {
			return nil, p.errAt(isolationNode, join(at, "isolation"), "%s", err)
		}
	}
	for _, v := range t.Volumes {
		for _, m := range t.Mounts {
			if v.Path == m.Target {
				return nil, p.errLine(t.Line, join(at, "volumes"), "volume %s and a mount are both at %s", quote(v.Name), quote(v.Path))
			}
		}
	}
	if t.Network.NoHostLookups {
		// Without host lookups a name destination is reachable only at
		// its pinned addresses: say so now rather than refuse every
		// connection to it later.
		for i, d := range t.Egress {
			if d.Name != "" && len(d.Addresses) == 0 {
				return nil, p.errLine(t.Line, index(join(at, "egress"), i), "%s has no addresses, and network.host_lookups is false: pin it with addresses, or allow host lookups", quote(d.String()))
			}
		}
	}
	return t, nil
}

// image parses image: "host", or a stored image's name or digest (found
// in the image store when the tool is used).
func (p *parser) image(n *yaml.Node, at string) (string, error) {
	s, err := p.str(n, at)
	if err != nil {
		return "", err
	}
	if s != ImageHost {
		if err := imageref.Check(s); err != nil {
			return "", p.errAt(n, at, "%v", err)
		}
	}
	return s, nil
}

// absPath parses an absolute path without ".", ".." or empty elements
// (workdir, a secret's file, a service's ca). Requiring the clean form
// means the path means what it says; nothing downstream has to resolve
// "..".
func (p *parser) absPath(n *yaml.Node, at string) (string, error) {
	s, err := p.str(n, at)
	if err != nil {
		return "", err
	}
	switch {
	case !path.IsAbs(s):
		return "", p.errAt(n, at, "%s is not an absolute path", quote(s))
	case len(s) > maxPath:
		return "", p.errAt(n, at, "path is longer than %d bytes", maxPath)
	case path.Clean(s) != s:
		return "", p.errAt(n, at, `%s is not a clean path: no ".", ".." or empty elements and no trailing slash`, quote(s))
	}
	return s, nil
}

// env parses a tool's env as "NAME=value" entries in file order.
func (p *parser) env(n *yaml.Node, at string) ([]string, error) {
	vars, err := p.envVars(n, at, nil)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, v := range vars {
		out = append(out, v.Name+"="+v.Value)
	}
	return out, nil
}

// envVars parses a mapping of environment variable names to string
// values, kept in file order. check, if not nil, vets each value and
// returns what is wrong with it, or "".
func (p *parser) envVars(n *yaml.Node, at string, check func(string) string) ([]brokerspec.EnvVar, error) {
	fs, err := p.fields(n, at, "a mapping of NAME: value", nil)
	if err != nil {
		return nil, err
	}
	var out []brokerspec.EnvVar
	for _, f := range fs {
		sub := join(at, f.name)
		if !validEnvName(f.name) {
			return nil, p.errAt(f.key, sub, "invalid environment variable name %s: use letters, digits and '_', not starting with a digit", quote(f.name))
		}
		v, err := p.str(f.val, sub)
		if err != nil {
			return nil, err
		}
		if check != nil {
			if problem := check(v); problem != "" {
				return nil, p.errAt(f.val, sub, "%s", problem)
			}
		}
		out = append(out, brokerspec.EnvVar{Name: f.name, Value: v})
	}
	return out, nil
}

// limits parses limits and checks the result against the sandbox's own
// bounds, reporting a failure at the limits key.
func (p *parser) limits(lf field, at string) (Limits, error) {
	var l Limits
	fs, err := p.fields(lf.val, at, "a mapping of limit names to values", limitKeys)
	if err != nil {
		return l, err
	}
	for _, f := range fs {
		sub := join(at, f.name)
		switch f.name {
		case "memory":
			l.Memory, err = p.size(f.val, sub)
		case "disk":
			l.Disk, err = p.size(f.val, sub)
		case "output":
			l.Output, err = p.size(f.val, sub)
		case "pids":
			l.Pids, err = p.count(f.val, sub)
		case "fds":
			l.FDs, err = p.count(f.val, sub)
		case "time":
			l.Time, err = p.duration(f.val, sub, false)
		case "cpu_time":
			l.CPUTime, err = p.duration(f.val, sub, true)
		case "cpu":
			l.CPUMilli, err = p.cpu(f.val, sub)
		}
		if err != nil {
			return l, err
		}
	}
	if err := l.Apply(sbspec.DefaultLimits()).Validate(); err != nil {
		// Validate may join several errors with newlines; one line
		// reads better after "file:line:col:".
		return l, p.wrapAt(lf.key, at, errors.New(strings.ReplaceAll(err.Error(), "\n", "; ")))
	}
	return l, nil
}

// size parses a byte size as the CLI flags do ("256MiB").
func (p *parser) size(n *yaml.Node, at string) (*int64, error) {
	s, err := p.str(n, at)
	if err != nil {
		return nil, err
	}
	v, err := units.ParseSize(s)
	if err != nil {
		return nil, p.wrapAt(n, at, err)
	}
	return &v, nil
}

// count parses a positive whole number (pids, fds).
func (p *parser) count(n *yaml.Node, at string) (*int64, error) {
	v, err := p.integer(n, at, 1, 1<<62)
	if err != nil {
		return nil, err
	}
	return &v, nil
}

// duration parses a duration as the CLI flags do ("30s", "5m", plain
// seconds). Zero is allowed only where it means "none".
func (p *parser) duration(n *yaml.Node, at string, allowZero bool) (*time.Duration, error) {
	s, err := p.str(n, at)
	if err != nil {
		return nil, err
	}
	d, err := units.ParseDuration(s)
	if err != nil {
		return nil, p.wrapAt(n, at, err)
	}
	if d == 0 && !allowZero {
		return nil, p.errAt(n, at, "invalid duration %s: must be positive", quote(s))
	}
	return &d, nil
}

// cpu parses CPU bandwidth in cores as the --cpu flag does: "0" or "none"
// for unthrottled, else a ParseCPU value.
func (p *parser) cpu(n *yaml.Node, at string) (*int64, error) {
	s, err := p.str(n, at)
	if err != nil {
		return nil, err
	}
	var v int64
	if s != "0" && s != "none" {
		if v, err = units.ParseCPU(s); err != nil {
			return nil, p.wrapAt(n, at, err)
		}
	}
	return &v, nil
}

// network parses network, starting from the defaults.
// MaxWarm bounds a tool's pool.warm: each waiting sandbox holds host
// memory (about 1 MiB) and a uid range.
const MaxWarm = 256

// Bounds of an adaptive pool's idle time (pool.idle): long enough to be
// more than a pause between an agent's calls, short enough that a tool
// nobody calls gives its sandboxes back the same day.
const (
	MinPoolIdle     = time.Second
	MaxPoolIdle     = 24 * time.Hour
	DefaultPoolIdle = time.Minute
)

// pool parses a tool's pool settings: a fixed warm, or min and max.
func (p *parser) pool(n *yaml.Node, at string) (Pool, error) {
	var pl Pool
	fs, err := p.fields(n, at, "a mapping of pool settings", poolKeys)
	if err != nil {
		return pl, err
	}
	var warm, lo, bounds *yaml.Node
	for _, f := range fs {
		switch f.name {
		case "warm", "min", "max":
			var v int64
			if v, err = p.integer(f.val, join(at, f.name), 0, MaxWarm); err != nil {
				return pl, err
			}
			switch f.name {
			case "warm":
				pl.Warm, warm = int(v), f.val
			case "min":
				pl.Min, lo, bounds = int(v), f.val, f.val
			case "max":
				pl.Max, bounds = int(v), f.val
			}
		case "idle":
			d, err := p.duration(f.val, join(at, f.name), false)
			if err != nil {
				return pl, err
			}
			if *d < MinPoolIdle || *d > MaxPoolIdle {
				return pl, p.errAt(f.val, join(at, f.name), "idle must be between %s and %s", MinPoolIdle, MaxPoolIdle)
			}
			pl.Idle = *d
		case "kernels":
			if pl.Kernels, err = p.names(f.val, join(at, f.name), "kernel language", nil, KernelLanguages); err != nil {
				return pl, err
			}
		}
	}
	switch {
	case warm != nil && bounds != nil:
		return pl, p.errAt(warm, join(at, "warm"), "a pool is either fixed (warm) or sizes itself (min and max), not both")
	case bounds != nil && pl.Max == 0:
		return pl, p.errAt(n, at, "an adaptive pool needs max, 1 or more (and min at most max)")
	case pl.Min > pl.Max:
		return pl, p.errAt(lo, join(at, "min"), "min %d is more than max %d", pl.Min, pl.Max)
	case pl.Idle != 0 && pl.Max == 0:
		return pl, p.errAt(n, join(at, "idle"), "idle is how long an adaptive pool waits before it shrinks: set min and max too")
	case pl.Max > 0 && pl.Idle == 0:
		pl.Idle = DefaultPoolIdle
	}
	return pl, nil
}

// names parses a list of distinct names, each valid (when valid is set)
// or one of allowed (when that is).
func (p *parser) names(n *yaml.Node, at, what string, valid func(string) bool, allowed []string) ([]string, error) {
	items, err := p.list(n, at)
	if err != nil {
		return nil, err
	}
	var out []string
	for i, it := range items {
		sub := index(at, i)
		s, err := p.str(it, sub)
		if err != nil {
			return nil, err
		}
		switch {
		case valid != nil && !valid(s):
			return nil, p.errAt(it, sub, "invalid %s %s: use 1-64 letters, digits, '_' and '-', starting with a letter or digit", what, quote(s))
		case allowed != nil && !slices.Contains(allowed, s):
			return nil, p.errAt(it, sub, "unknown %s %s: want one of %s", what, quote(s), strings.Join(allowed, ", "))
		case slices.Contains(out, s):
			return nil, p.errAt(it, sub, "%s %s is listed twice", what, quote(s))
		}
		out = append(out, s)
	}
	return out, nil
}

func (p *parser) network(n *yaml.Node, at string) (Network, error) {
	nw := DefaultNetwork()
	fs, err := p.fields(n, at, "a mapping of network settings", networkKeys)
	if err != nil {
		return nw, err
	}
	for _, f := range fs {
		sub := join(at, f.name)
		var v int64
		switch f.name {
		case "connections":
			v, err = p.integer(f.val, sub, 1, maxConnections)
			nw.Connections = int(v)
		case "dns_rate":
			v, err = p.integer(f.val, sub, 1, maxDNSRate)
			nw.DNSRate = int(v)
		case "wildcard_names":
			v, err = p.integer(f.val, sub, 1, maxWildNames)
			nw.WildcardNames = int(v)
		case "host_lookups":
			var on bool
			on, err = p.boolean(f.val, sub)
			nw.NoHostLookups = !on
		case "bytes":
			var b *int64
			if b, err = p.size(f.val, sub); err == nil && *b <= 0 {
				err = p.errAt(f.val, sub, "%s must be more than zero", quote(f.val.Value))
			}
			if err == nil {
				nw.Bytes = *b
			}
		}
		if err != nil {
			return nw, err
		}
	}
	return nw, nil
}

// mounts parses read-only host mounts: a list of {source, target}.
// ToolVolume is a volume a tool's sandboxes get (Tool.Volumes).
type ToolVolume struct {
	Name string
	Path string
	// Size is its size when the daemon makes it; 0 is the default
	// (1GiB). A volume already there keeps its own.
	Size int64
}

// maxToolVolumes bounds a tool's volumes (a sandbox has at most 8).
const maxToolVolumes = 8

func (p *parser) toolVolumes(n *yaml.Node, at string) ([]ToolVolume, error) {
	items, err := p.list(n, at)
	if err != nil {
		return nil, err
	}
	if len(items) > maxToolVolumes {
		return nil, p.errAt(n, at, "%d volumes; a tool has at most %d", len(items), maxToolVolumes)
	}
	var out []ToolVolume
	seen := map[string]bool{}
	for i, item := range items {
		sub := index(at, i)
		fs, err := p.fields(item, sub, "a mapping with name, path and size", []string{"name", "path", "size"})
		if err != nil {
			return nil, err
		}
		var v ToolVolume
		for _, f := range fs {
			switch f.name {
			case "name":
				v.Name, err = p.str(f.val, join(sub, "name"))
				if err == nil && !validVolumeName(v.Name) {
					err = p.errAt(f.val, join(sub, "name"), "%s: 1 to 64 letters, digits and, after the first, - _ . (not vol_...)", quote(v.Name))
				}
			case "path":
				v.Path, err = p.str(f.val, join(sub, "path"))
				if err == nil {
					if cerr := sbspec.CheckTarget(v.Path); cerr != nil {
						err = p.wrapAt(f.val, join(sub, "path"), cerr)
					}
				}
			case "size":
				v.Size, err = p.positiveSize(f.val, join(sub, "size"))
			}
			if err != nil {
				return nil, err
			}
		}
		if v.Name == "" || v.Path == "" {
			return nil, p.errAt(item, sub, "a volume needs name and path")
		}
		if seen[v.Path] || seen["name:"+v.Name] {
			return nil, p.errAt(item, sub, "a second volume at %s, or named %s", quote(v.Path), quote(v.Name))
		}
		seen[v.Path], seen["name:"+v.Name] = true, true
		out = append(out, v)
	}
	return out, nil
}

// validVolumeName: what a volume may be named (node.CreateVolume's rule).
func validVolumeName(s string) bool {
	if len(s) < 1 || len(s) > 64 || strings.HasPrefix(s, "vol_") {
		return false
	}
	for i, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || i > 0 && (c == '-' || c == '_' || c == '.')) {
			return false
		}
	}
	return true
}

func (p *parser) mounts(n *yaml.Node, at string) ([]sbspec.Mount, error) {
	items, err := p.list(n, at)
	if err != nil {
		return nil, err
	}
	var out []sbspec.Mount
	seen := map[string]bool{}
	for i, item := range items {
		sub := index(at, i)
		fs, err := p.fields(item, sub, "a mapping with source and target", mountKeys)
		if err != nil {
			return nil, err
		}
		var m sbspec.Mount
		for _, f := range fs {
			switch f.name {
			case "source":
				m.Source, err = p.str(f.val, join(sub, "source"))
			case "target":
				m.Target, err = p.str(f.val, join(sub, "target"))
			}
			if err != nil {
				return nil, err
			}
		}
		if m.Source == "" || m.Target == "" {
			return nil, p.errAt(item, sub, "a mount needs source and target")
		}
		if err := m.Check(); err != nil {
			return nil, p.wrapAt(item, sub, err)
		}
		if seen[m.Target] {
			return nil, p.errAt(item, sub, "two mounts at %s", quote(m.Target))
		}
		seen[m.Target] = true
		out = append(out, m)
	}
	return out, nil
}
