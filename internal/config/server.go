package config

import (
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

var (
	serverKeys   = []string{"capacity", "e2b", "e2b_domain", "e2b_tls", "runsc", "socket", "socket_group", "tcp", "tokens"}
	tokenKeys    = []string{"auditor", "builds", "concurrency", "name", "paused", "secret", "snapshots", "tools", "volumes"}
	capacityKeys = []string{"memory", "output", "paused", "paused_for", "pids", "sandboxes", "snapshot_bytes", "snapshots", "volume_bytes", "volumes"}
)

// Server configures `airlock serve`'s listeners.
type Server struct {
	// Socket is the unix socket ("" for the default).
	Socket string
	// SocketGroup, if set, is the group (name or number) that owns the
	// socket; members may use the API.
	SocketGroup string
	// TCP, if set, is an address to serve the API on too; every request
	// there needs a bearer token.
	TCP netip.AddrPort
	// E2B, if set, is an address to serve the E2B-compatible API on
	// (docs/e2b.md); its API keys are the tokens.
	E2B netip.AddrPort
	// E2BTLS, if set, makes the E2B API's listener answer TLS (and
	// HTTP/2, which the SDKs negotiate over it) with this certificate.
	E2BTLS *TLSFiles
	// E2BDomain, if set, is the domain of the sandboxes' ports: the E2B
	// listener serves a sandbox's port P at the host P-ID.E2BDomain (as
	// E2B's getHost names it), for a name that resolves to it.
	E2BDomain string
	// Tokens are the bearer tokens accepted on TCP, and the API keys of
	// the E2B API.
	Tokens []Token
	// Capacity bounds what the node's live sandboxes reserve together.
	Capacity Capacity
	// Runsc, if set, is gVisor's runsc for tools with isolation gvisor
	// (an absolute path; serve's --runsc wins over it). Unset, it is
	// looked for beside airlockd and in the usual places.
	Runsc string
}

// MaxPausedFor is the longest capacity.paused_for: a paused session
// holds its memory, and no node should promise it for longer.
const MaxPausedFor = 30 * 24 * time.Hour

// TLSFiles name a listener's certificate chain and key, PEM files.
type TLSFiles struct {
	Cert, Key string
}

// Capacity is the node's budget: how many sandboxes may be live at once
// (warm in pools, running, held by sessions and MCP servers), and what
// their memory and pids ceilings may add up to. A zero field takes the
// daemon's default, derived from the host.
type Capacity struct {
	Sandboxes int
	// Memory is a size, or MemoryShare a share of the host's memory in
	// percent (one of the two is set, or neither).
	Memory      int64
	MemoryShare int
	Pids        int64
	// Output bounds the output the daemon holds at once for callers that
	// take it whole (not streamed): each such run reserves its output
	// ceiling of it. 0 is the default.
	Output int64
	// Paused bounds the sessions paused at once on the node (each still
	// holds its sandbox and memory); 0 is the default, 64.
	Paused int
	// PausedFor is how long a session may stay paused before it ends;
	// 0 is the default, 24h.
	PausedFor time.Duration
	// Snapshots bounds the snapshots the node keeps, and SnapshotBytes
	// the bytes of their files; 0 is the default (256, 20GiB).
	Snapshots     int
	SnapshotBytes int64
	// Volumes bounds the volumes the node keeps, and VolumeBytes the sum
	// of their sizes; 0 is the default (64, 64GiB).
	Volumes     int
	VolumeBytes int64
}

// Token is one bearer token: its value is a secret, read at start, and
// it may use only the tools it lists ("*" for all).
type Token struct {
	Name   string
	Secret string
	Tools  []string
	// Concurrency bounds the token's calls in flight (runs, MCP tool
	// calls) plus the sessions and MCP servers it holds open; 0 is no
	// bound of its own (the node's capacity still applies).
	Concurrency int
	// Paused bounds the sessions of the token paused at once; 0 is no
	// bound of its own (the node's, capacity.paused, still applies).
	Paused int
	// Snapshots bounds the snapshots of the token; 0 is no bound of its
	// own (the node's, capacity.snapshots, still applies).
	Snapshots int
	// Volumes bounds the volumes of the token; 0 is no bound of its own
	// (the node's, capacity.volumes, still applies).
	Volumes int
	// Auditor lets the token read every caller's audit events of the
	// tools it may use; any other token reads only the events it caused
	// itself (its runs, sessions, requests and refusals), since another
	// caller's command lines may carry that caller's secrets.
	Auditor bool
	// Builds lets the token build E2B templates (the config's builds
	// section); its templates are its own.
	Builds bool
	Line   int
}

// AllowsTool reports whether the token may use tool.
func (t *Token) AllowsTool(tool string) bool {
	return slices.Contains(t.Tools, "*") || slices.Contains(t.Tools, tool)
}

// toolRef is a use of a tool's name by a token, checked once all tools
// are read.
type toolRef struct {
	name string
	node *yaml.Node
	at   string
}

func (p *parser) server(n *yaml.Node, c *Config) error {
	const at = "server"
	fs, err := p.fields(n, at, "a mapping of server settings", serverKeys)
	if err != nil {
		return err
	}
	for _, f := range fs {
		sub := join(at, f.name)
		switch f.name {
		case "socket":
			c.Server.Socket, err = p.absPath(f.val, sub)
		case "socket_group":
			c.Server.SocketGroup, err = p.str(f.val, sub)
			if err == nil && !validToolName(c.Server.SocketGroup) {
				err = p.errAt(f.val, sub, "%s is not a group name or number", quote(c.Server.SocketGroup))
			}
		case "tcp":
			var s string
			if s, err = p.str(f.val, sub); err == nil {
				if c.Server.TCP, err = netip.ParseAddrPort(s); err != nil || c.Server.TCP.Port() == 0 {
					err = p.errAt(f.val, sub, "%s is not IP:PORT (e.g. 127.0.0.1:7400)", quote(s))
				}
			}
		case "e2b":
			var s string
			if s, err = p.str(f.val, sub); err == nil {
				if c.Server.E2B, err = netip.ParseAddrPort(s); err != nil || c.Server.E2B.Port() == 0 {
					err = p.errAt(f.val, sub, "%s is not IP:PORT (e.g. 127.0.0.1:7401)", quote(s))
				}
			}
		case "e2b_domain":
			if c.Server.E2BDomain, err = p.str(f.val, sub); err == nil && !validDomain(c.Server.E2BDomain) {
				err = p.errAt(f.val, sub, "%s is not a domain name (lower-case labels of letters, digits and hyphens, e.g. sandbox.example.com)", quote(c.Server.E2BDomain))
			}
		case "e2b_tls":
			c.Server.E2BTLS, err = p.tlsFiles(f.val, sub)
		case "runsc":
			c.Server.Runsc, err = p.absPath(f.val, sub)
		case "tokens":
			c.Server.Tokens, err = p.tokens(f.val, sub)
		case "capacity":
			c.Server.Capacity, err = p.capacity(f.val, sub)
		}
		if err != nil {
			return err
		}
	}
	if c.Server.TCP.IsValid() && len(c.Server.Tokens) == 0 {
		return p.errAt(n, at, "tcp is set but no tokens are: every request on TCP needs one")
	}
	if c.Server.E2B.IsValid() && len(c.Server.Tokens) == 0 {
		return p.errAt(n, at, "e2b is set but no tokens are: the E2B API's keys are the tokens")
	}
	if c.Server.E2BDomain != "" && !c.Server.E2B.IsValid() {
		return p.errAt(n, at, "e2b_domain is set but e2b is not: it is the domain of the E2B listener's sandbox ports")
	}
	if c.Server.E2BTLS != nil && !c.Server.E2B.IsValid() {
		return p.errAt(n, at, "e2b_tls is set but e2b is not: it is the E2B API listener's certificate")
	}
	if c.Server.E2B.IsValid() && c.Server.E2B == c.Server.TCP {
		return p.errAt(n, at, "e2b and tcp are the same address; give the E2B API a port of its own")
	}
	return nil
}

// validDomain reports whether s is a DNS name of at least two labels, in
// lower case: letters, digits and inner hyphens.
func validDomain(s string) bool {
	labels := strings.Split(s, ".")
	if len(s) > 253 || len(labels) < 2 {
		return false
	}
	for _, l := range labels {
		if l == "" || len(l) > 63 || l[0] == '-' || l[len(l)-1] == '-' {
			return false
		}
		for _, c := range l {
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
				return false
			}
		}
	}
	return true
}

func (p *parser) tlsFiles(n *yaml.Node, at string) (*TLSFiles, error) {
	fs, err := p.fields(n, at, "a mapping with cert and key (PEM files)", []string{"cert", "key"})
	if err != nil {
		return nil, err
	}
	t := &TLSFiles{}
	for _, f := range fs {
		switch f.name {
		case "cert":
			t.Cert, err = p.absPath(f.val, join(at, f.name))
		case "key":
			t.Key, err = p.absPath(f.val, join(at, f.name))
		}
		if err != nil {
			return nil, err
		}
	}
	if t.Cert == "" || t.Key == "" {
		return nil, p.errAt(n, at, "both cert and key are required")
	}
	return t, nil
}

func (p *parser) tokens(n *yaml.Node, at string) ([]Token, error) {
	items, err := p.list(n, at)
	if err != nil {
		return nil, err
	}
	var out []Token
	for i, item := range items {
		sub := index(at, i)
		fs, err := p.fields(item, sub, "a mapping with name, secret, tools, concurrency, paused, snapshots, volumes, auditor and builds", tokenKeys)
		if err != nil {
			return nil, err
		}
		t := Token{Line: item.Line}
		for _, f := range fs {
			fsub := join(sub, f.name)
			switch f.name {
			case "name":
				if t.Name, err = p.str(f.val, fsub); err == nil && !validToolName(t.Name) {
					err = p.errAt(f.val, fsub, "%s: want 1-64 letters, digits, '_' and '-'", quote(t.Name))
				}
			case "secret":
				if t.Secret, err = p.str(f.val, fsub); err == nil {
					p.secretRefs = append(p.secretRefs, secretRef{name: t.Secret, node: f.val, at: fsub})
				}
			case "auditor":
				t.Auditor, err = p.boolean(f.val, fsub)
			case "builds":
				t.Builds, err = p.boolean(f.val, fsub)
			case "concurrency":
				var n int64
				n, err = p.integer(f.val, fsub, 1, 1<<20)
				t.Concurrency = int(n)
			case "paused":
				var n int64
				n, err = p.integer(f.val, fsub, 1, 1<<20)
				t.Paused = int(n)
			case "snapshots":
				var n int64
				n, err = p.integer(f.val, fsub, 1, 1<<20)
				t.Snapshots = int(n)
			case "volumes":
				var n int64
				n, err = p.integer(f.val, fsub, 1, 1<<20)
				t.Volumes = int(n)
			case "tools":
				if t.Tools, err = p.distinct(f.val, fsub, nil); err == nil {
					items, _ := p.list(f.val, fsub)
					for j, name := range t.Tools {
						if name != "*" {
							p.toolRefs = append(p.toolRefs, toolRef{name: name, node: items[j], at: index(fsub, j)})
						}
					}
				}
			}
			if err != nil {
				return nil, err
			}
		}
		switch {
		case t.Name == "":
			return nil, p.errAt(item, sub, "a token needs a name")
		case t.Secret == "":
			return nil, p.errAt(item, sub, "token %s needs a secret", quote(t.Name))
		case len(t.Tools) == 0:
			return nil, p.errAt(item, sub, "token %s needs tools (a list of tool names, or [\"*\"])", quote(t.Name))
		}
		for _, o := range out {
			if o.Name == t.Name {
				return nil, p.errAt(item, sub, "token name %s is used twice", quote(t.Name))
			}
		}
		out = append(out, t)
	}
	return out, nil
}

// capacity reads server.capacity: sandboxes (a count), memory (a size,
// or a share of the host's memory such as "75%"), pids (a count), output
// (a size).
func (p *parser) capacity(n *yaml.Node, at string) (Capacity, error) {
	var c Capacity
	fs, err := p.fields(n, at, "a mapping of sandboxes, memory, pids, output, paused, paused_for, snapshots, snapshot_bytes, volumes and volume_bytes", capacityKeys)
	if err != nil {
		return c, err
	}
	for _, f := range fs {
		sub := join(at, f.name)
		switch f.name {
		case "sandboxes":
			var v int64
			v, err = p.integer(f.val, sub, 1, 1<<20)
			c.Sandboxes = int(v)
		case "paused":
			var v int64
			v, err = p.integer(f.val, sub, 1, 1<<20)
			c.Paused = int(v)
		case "snapshots":
			var v int64
			v, err = p.integer(f.val, sub, 1, 1<<20)
			c.Snapshots = int(v)
		case "snapshot_bytes":
			c.SnapshotBytes, err = p.positiveSize(f.val, sub)
		case "volumes":
			var v int64
			v, err = p.integer(f.val, sub, 1, 1<<20)
			c.Volumes = int(v)
		case "volume_bytes":
			c.VolumeBytes, err = p.positiveSize(f.val, sub)
		case "paused_for":
			var d *time.Duration
			if d, err = p.duration(f.val, sub, false); err == nil {
				if *d < time.Minute || *d > MaxPausedFor {
					err = p.errAt(f.val, sub, "%s: want a duration from 1m to %s", quote(d.String()), MaxPausedFor)
				}
				c.PausedFor = *d
			}
		case "pids":
			var v *int64
			if v, err = p.count(f.val, sub); err == nil {
				c.Pids = *v
			}
		case "output":
			var v *int64
			if v, err = p.size(f.val, sub); err == nil {
				if *v <= 0 {
					err = p.errAt(f.val, sub, "want a size above zero")
				}
				c.Output = *v
			}
		case "memory":
			var s string
			if s, err = p.str(f.val, sub); err != nil {
				break
			}
			if pct, ok := strings.CutSuffix(s, "%"); ok {
				v, perr := strconv.Atoi(pct)
				if perr != nil || v < 1 || v > 100 || pct != strconv.Itoa(v) {
					err = p.errAt(f.val, sub, "%s: want a share of the host's memory from 1%% to 100%%, or a size", quote(s))
				}
				c.MemoryShare = v
				break
			}
			var v *int64
			if v, err = p.size(f.val, sub); err == nil {
				if *v <= 0 {
					err = p.errAt(f.val, sub, "%s: want a size above zero", quote(s))
				}
				c.Memory = *v
			}
		}
		if err != nil {
			return c, err
		}
	}
	return c, nil
}
