package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/airlockhq/airlock/internal/broker/brokerspec"
	"github.com/airlockhq/airlock/internal/egress/policy"
	"github.com/airlockhq/airlock/internal/image/imageref"
	"github.com/airlockhq/airlock/internal/sbspec"
)

// MaxFileSize is the largest config file Load and Parse accept, in bytes.
const MaxFileSize = 1 << 20

// Where Find looks.
const (
	// PathEnv names the environment variable that points at a config file.
	PathEnv = "AIRLOCK_CONFIG"
	// SystemPath is the host-wide config file.
	SystemPath = "/etc/airlock/airlock.yaml"
)

// ImageHost is the only image today: the sandbox sees the host's /usr
// and friends, read-only.
const ImageHost = imageref.Host

// DefaultWorkdir is a tool's working directory unless it names one.
const DefaultWorkdir = sbspec.HomeDir

// Config is a parsed airlock.yaml.
type Config struct {
	// Path is the file the config came from; "" for the built-in default.
	Path string
	// Tools maps tool names to tools.
	Tools map[string]*Tool
	// Order lists the tool names in file order.
	Order []string
	// Secrets maps secret names to where their values are read from.
	Secrets map[string]*Secret
	// Services maps service names to the services the credential broker
	// forwards to.
	Services map[string]*brokerspec.Service
	// ServiceOrder lists the service names in file order.
	ServiceOrder []string
	// Server configures `airlock serve`'s listeners and tokens.
	Server Server
	// Audit configures the daemon's audit log, defaults filled in.
	Audit Audit
	// Images configures the image store.
	Images Images
	// MCPServers are third-party MCP servers run in sandboxes behind the
	// daemon's MCP gateway: each is a tool profile whose command speaks
	// MCP on stdio. MCPServerOrder lists their names in file order.
	MCPServers     map[string]*Tool
	MCPServerOrder []string
	// MCP configures airlock's own MCP tools.
	MCP MCP
	// Cluster, when enabled, makes the daemon a node of a cluster.
	Cluster Cluster
	// Tracing configures the daemon's OpenTelemetry traces; off unless
	// its endpoint is set.
	Tracing Tracing
	// Builds, when set, lets tokens with builds: true build E2B
	// templates on the daemon.
	Builds *Builds
}

// Tool is one named sandbox profile: what an agent asks for by name.
type Tool struct {
	// Name is the tool's key in the file.
	Name string
	// Description is free text for people and agents; may be empty.
	Description string
	// Image is the root file system: ImageHost, or a stored image's name
	// or digest.
	Image string
	// Workdir is the absolute, clean working directory of commands;
	// WorkdirSet says the file gave it (else an image's own applies).
	Workdir    string
	WorkdirSet bool
	// User, when set, is who commands run as (else the image's user, else
	// 1000:1000).
	User *sbspec.User
	// WritableRoot gives each sandbox of the tool a writable root: an
	// upper layer over its image, on its disk tmpfs. Images only.
	WritableRoot bool
	// Env holds "KEY=VALUE" entries in file order, added to the sandbox's
	// default environment.
	Env []string
	// Limits are the tool's overrides of the default ceilings.
	Limits Limits
	// Egress lists the destinations the tool may reach; empty means none.
	Egress []policy.Destination
	// Network holds the per-sandbox egress caps, defaults filled in.
	Network Network
	// Pool says how many sandboxes of the tool the daemon keeps warm.
	Pool Pool
	// E2BTemplates are further names E2B clients may create the tool's
	// sandboxes by (templateID): "code-interpreter-v1", "base". Unique
	// across the tools, and never another tool's name.
	E2BTemplates []string
	// Services names the services, defined in Config.Services, whose
	// operations the tool's sandboxes may call through the credential
	// broker; in file order, without duplicates.
	Services []string
	// Command is the argv template of the tool when called through MCP:
	// each argument is literal text with {input} placeholders, and an
	// input's value is never split or given to a shell. Empty for a tool
	// that only serves runs given a command by the caller.
	Command []Template
	// Stdin names the input fed to the command's standard input; "" for
	// none.
	Stdin string
	// Inputs are the tool's declared inputs, in file order.
	Inputs []Input
	// Mounts are host paths bound read-only into the tool's sandboxes.
	Mounts []sbspec.Mount
	// Volumes are volumes every sandbox of the tool gets, writable:
	// made by the daemon if they are not there, and shared by every
	// caller of the tool (the config says so; a caller's own volumes
	// are never shared).
	Volumes []ToolVolume
	// Isolation is the tool's sandbox backend: "" (the namespace
	// runtime) or sbspec.IsolationGVisor. Callers cannot choose another:
	// the tool's is the one every run, session, pool and E2B sandbox of it
	// gets.
	Isolation string
	// Line is the line of the tool's key, for later error messages.
	Line int
}

// Limits are a tool's overrides of sandbox ceilings. A nil pointer leaves
// the ceiling as it is.
type Limits struct {
	// Memory, Disk and Output are in bytes; Pids and FDs are counts. See
	// sandbox.Limits for what each ceiling covers.
	Memory, Pids, Disk, FDs, Output *int64
	// CPUMilli is in millicores; 0 means unthrottled.
	CPUMilli *int64
	Time     *time.Duration
	// CPUTime is the CPU budget of one command; 0 means none.
	CPUTime *time.Duration
}

// Apply returns base with the overrides of l put on top. The runtime
// takes the result as its sandbox.Limits (see attach.Limits).
func (l Limits) Apply(base sbspec.Limits) sbspec.Limits {
	set := func(dst *int64, src *int64) {
		if src != nil {
			*dst = *src
		}
	}
	set(&base.Memory, l.Memory)
	set(&base.Pids, l.Pids)
	set(&base.Disk, l.Disk)
	set(&base.FDs, l.FDs)
	set(&base.Output, l.Output)
	set(&base.CPUMilli, l.CPUMilli)
	if l.Time != nil {
		base.Time = *l.Time
	}
	if l.CPUTime != nil {
		base.CPUTime = *l.CPUTime
	}
	return base
}

// Pool is a tool's warm pool: Warm sandboxes created ahead of demand
// (0, the default, creates each on demand), or, when Max is set, as many
// as the tool's claim rate needs, from Min to Max.
type Pool struct {
	Warm int
	// Min and Max bound an adaptive pool; Max is 0 for a fixed one.
	Min, Max int
	// Idle is how long an adaptive pool goes without a claim before it
	// shrinks to Min (DefaultPoolIdle unless set); 0 for a fixed pool.
	Idle time.Duration
	// Kernels are the code interpreter's kernels (languages: "python",
	// "bash") each pooled sandbox starts before it is claimed, so that an
	// E2B sandbox's first runCode finds its context running. In file
	// order, without duplicates.
	Kernels []string
}

// E2BTemplate is the tool E2B clients create by templateID name: the
// tool of that name, or the one that lists it in e2b_templates; nil for
// none.
func (c *Config) E2BTemplate(name string) *Tool {
	if t, ok := c.Tools[name]; ok {
		return t
	}
	for _, n := range c.Order {
		if slices.Contains(c.Tools[n].E2BTemplates, name) {
			return c.Tools[n]
		}
	}
	return nil
}

// KernelLanguages are the languages pool.kernels may name: those the code
// interpreter serves (internal/interp.Languages; a test keeps the two
// the same).
var KernelLanguages = []string{"python", "bash"}

// Network holds the egress caps of one sandbox.
type Network struct {
	// Connections caps concurrent outbound connections (1..65536).
	Connections int
	// Bytes caps the bytes sent and received by all connections together.
	Bytes int64
	// DNSRate caps DNS queries per second (1..10000).
	DNSRate int
	// WildcardNames caps the distinct names under wildcard destinations
	// the host resolves for one sandbox (1..4096).
	WildcardNames int
	// NoHostLookups: the host resolves no name for the sandbox; every
	// name destination must be pinned with addresses (host_lookups:
	// false).
	NoHostLookups bool
}

// Bounds and defaults of Network.
const (
	maxConnections = 65536
	maxDNSRate     = 10000
	maxWildNames   = 4096
)

// DefaultNetwork returns the caps a tool gets unless it sets its own.
func DefaultNetwork() Network {
	return Network{Connections: 256, Bytes: 4 << 30, DNSRate: 100, WildcardNames: 64}
}

// Empty returns the built-in default config: no tools, secrets or
// services.
func Empty() *Config {
	return &Config{Tools: map[string]*Tool{}, Secrets: map[string]*Secret{}, Services: map[string]*brokerspec.Service{}, MCPServers: map[string]*Tool{}, Audit: defaultAudit(), Images: defaultImages()}
}

// Tool returns the tool called name. An unknown name gives an error that
// matches ErrNotFound and lists the known names.
func (c *Config) Tool(name string) (*Tool, error) {
	var tools map[string]*Tool
	if c != nil {
		tools = c.Tools
	}
	return lookup(tools, "tool", name)
}

// Service returns the service called name. An unknown name gives an error
// that matches ErrNotFound and lists the known names.
func (c *Config) Service(name string) (*brokerspec.Service, error) {
	var services map[string]*brokerspec.Service
	if c != nil {
		services = c.Services
	}
	return lookup(services, "service", name)
}

// lookup returns m[name], or an error matching ErrNotFound that lists the
// names m has; kind ("tool") names what m holds.
func lookup[T any](m map[string]*T, kind, name string) (*T, error) {
	if v, ok := m[name]; ok {
		return v, nil
	}
	if len(m) == 0 {
		return nil, fmt.Errorf("%s %s %w (no %ss are configured)", kind, quote(name), ErrNotFound, kind)
	}
	names := slices.Sorted(maps.Keys(m))
	return nil, fmt.Errorf("%s %s %w (known %ss: %s)", kind, quote(name), ErrNotFound, kind, strings.Join(names, ", "))
}

// Find picks the config file to use and returns its path, or "" when there
// is none and the built-in default applies. In order:
//
//  1. explicit (the --config flag), if not empty; it must exist;
//  2. $AIRLOCK_CONFIG, if set and not empty; it must exist;
//  3. /etc/airlock/airlock.yaml, if it exists.
//
// The current directory is never searched.
//
// getenv and exists stand for os.Getenv and Exists, and are parameters so
// that tests need not touch the real environment or file system. A missing
// explicit or $AIRLOCK_CONFIG file gives an error that matches ErrNotFound.
func Find(explicit string, getenv func(string) string, exists func(string) bool) (string, error) {
	if explicit != "" {
		if !exists(explicit) {
			return "", fmt.Errorf("config file %s (from --config) %w", quote(explicit), ErrNotFound)
		}
		return explicit, nil
	}
	if p := getenv(PathEnv); p != "" {
		if !exists(p) {
			return "", fmt.Errorf("config file %s (from $%s) %w", quote(p), PathEnv, ErrNotFound)
		}
		return p, nil
	}
	// The current directory is deliberately not searched: a repository
	// the operator happens to be in must not be able to supply the tools'
	// egress policy.
	if exists(SystemPath) {
		return SystemPath, nil
	}
	return "", nil
}

// Exists reports whether path exists, for Find. Only "does not exist"
// counts as absent: a file that exists but cannot be read is found, so
// that Load reports the real problem instead of silently skipping it.
func Exists(path string) bool {
	_, err := os.Stat(path)
	return !errors.Is(err, fs.ErrNotExist)
}

// Discover finds the config file as Find does, with the real environment
// and file system, and loads it; with no file it returns Empty().
func Discover(explicit string) (*Config, error) {
	path, err := Find(explicit, os.Getenv, Exists)
	if err != nil {
		return nil, err
	}
	if path == "" {
		return Empty(), nil
	}
	return Load(path)
}

// Load reads and parses the config file at path. A file larger than
// MaxFileSize is refused before parsing. Errors reading the file are
// returned wrapped (matching fs.ErrNotExist and the like); problems in the
// file are *Error.
func Load(path string) (*Config, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read config file: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("read config file: %w", err)
	}
	return Parse(path, data)
}

// Parse parses the contents of a config file. file names it in error
// messages and in Config.Path. Every error is an *Error.
func Parse(file string, data []byte) (*Config, error) {
	p := &parser{file: file}
	if len(data) > MaxFileSize {
		return nil, p.errAt(nil, "", "the file is larger than %d MiB", MaxFileSize>>20)
	}
	root, err := p.decode(data)
	if err != nil {
		return nil, err
	}
	c := Empty()
	c.Path = file
	if root == nil || isNull(root) {
		return c, nil // empty file, only comments, or just "~"
	}
	if err := p.checkTree(root, "", 0); err != nil {
		return nil, err
	}
	top, err := p.fields(root, "", "a mapping at the top level", topKeys)
	if err != nil {
		return nil, err
	}
	for _, f := range top {
		switch f.name {
		case "secrets":
			err = p.secrets(f.val, c)
		case "services":
			err = p.services(f.val, c)
		case "tools":
			err = p.tools(f.val, c)
		case "server":
			err = p.server(f.val, c)
		case "audit":
			err = p.audit(f.val, c)
		case "images":
			err = p.images(f.val, c)
		case "mcp_servers":
			err = p.mcpServers(f.val, c)
		case "mcp":
			err = p.mcp(f.val, c)
		case "cluster":
			err = p.cluster(f.val, c)
		case "tracing":
			err = p.tracing(f.val, c)
		case "builds":
			err = p.builds(f.val, c)
		}
		if err != nil {
			return nil, err
		}
	}
	for _, f := range top {
		if f.name == "cluster" && !c.Server.TCP.IsValid() {
			return nil, p.errAt(f.val, "cluster", "a node needs server.tcp: fronts reach its API there")
		}
	}
	// Names may be used before they are defined, so references are
	// checked once the whole file is read.
	if err := p.checkRefs(c); err != nil {
		return nil, err
	}
	return c, nil
}

// tools parses the tools mapping into c.
func (p *parser) tools(n *yaml.Node, c *Config) error {
	tools, err := p.fields(n, "tools", "a mapping of tool names to their settings", nil)
	if err != nil {
		return err
	}
	for _, tf := range tools {
		t, err := p.tool(tf, "tools")
		if err != nil {
			return err
		}
		c.Tools[t.Name] = t
		c.Order = append(c.Order, t.Name)
	}
	return nil
}

// decode parses data into a node tree and returns the content of its
// only document, or nil if data holds no document at all.
func (p *parser) decode(data []byte) (root *yaml.Node, err error) {
	// The YAML library reports its own errors by panicking and recovering;
	// a bug of it that escapes must not take the caller down with it.
	defer func() {
		if r := recover(); r != nil {
			root, err = nil, p.errAt(nil, "", "the YAML parser failed: %v", r)
		}
	}()
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, nil
		}
		return nil, p.syntaxError(err, data)
	}
	var next yaml.Node
	switch err := dec.Decode(&next); {
	case err == nil:
		return nil, p.errAt(&next, "", "more than one YAML document (---); a config file has exactly one")
	case !errors.Is(err, io.EOF):
		return nil, p.syntaxError(err, data)
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) == 0 {
		return nil, nil
	}
	return doc.Content[0], nil
}

// tabIndent returns the column of the first tab among the leading
// whitespace of line (1-based) of data, or 0.
func tabIndent(data []byte, line int) int {
	if line <= 0 {
		return 0
	}
	lines := bytes.SplitN(data, []byte("\n"), line+1)
	if len(lines) < line {
		return 0
	}
	for i, c := range lines[line-1] {
		switch c {
		case '\t':
			return i + 1
		case ' ':
		default:
			return 0
		}
	}
	return 0
}

// syntaxError turns a YAML library error into an *Error, with the line
// taken from its message when it has one.
func (p *parser) syntaxError(err error, data []byte) *Error {
	msg := err.Error()
	e := &Error{File: p.file}
	msg = strings.TrimPrefix(msg, "yaml: ")
	if rest, ok := strings.CutPrefix(msg, "line "); ok {
		if num, tail, ok := strings.Cut(rest, ": "); ok {
			if n, err := strconv.Atoi(num); err == nil && n > 0 {
				e.Line, msg = n, tail
			}
		}
	}
	e.Msg = "invalid YAML: " + msg
	// A tab where the library stopped ("found character that cannot
	// start any token") says nothing of tabs: say it.
	if col := tabIndent(data, e.Line); col > 0 {
		e.Column = col
		e.Msg = "invalid YAML: a tab in the indentation; YAML indents with spaces only (replace the tab with spaces)"
		return e
	}
	// An unquoted wildcard is read as a YAML alias ("*" starts one).
	if strings.Contains(msg, "did not find expected alphabetic or numeric character") || strings.Contains(msg, "unknown anchor") {
		e.Msg += `; a value that starts with "*" (a wildcard such as *.example.com) must be quoted: "*.example.com"`
	}
	return e
}
