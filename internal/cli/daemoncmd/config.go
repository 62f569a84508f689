package daemoncmd

import (
	"context"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/airlockhq/airlock/internal/cli"
	"github.com/airlockhq/airlock/internal/config"
	"github.com/airlockhq/airlock/internal/daemon"
	"github.com/airlockhq/airlock/internal/gvisor"
	"github.com/airlockhq/airlock/internal/image"
	"github.com/airlockhq/airlock/internal/node"
	"github.com/airlockhq/airlock/internal/runner/attach"
	"github.com/airlockhq/airlock/internal/tokens"
	"github.com/airlockhq/airlock/internal/units"
	"github.com/airlockhq/airlock/sandbox"
)

// configCmd is `airlock config check`: it reads the config as the daemon
// would, and prints what it resolves to and where things would go.
func configCmd(ctx context.Context, args []string, stdio cli.IO) error {
	if len(args) == 0 || args[0] != "check" {
		return cli.UsageError(stdio.Stderr, "airlock config", "the one subcommand is check: airlock config check [--config PATH]")
	}
	fs := flag.NewFlagSet("airlock config check", flag.ContinueOnError)
	fs.SetOutput(stdio.Stderr)
	cfgPath := fs.String("config", "", "config file (default: $AIRLOCK_CONFIG, /etc/airlock/airlock.yaml)")
	store := fs.String("image-store", "", "image store the tools' images are looked up in (default: the config's images.store)")
	stateDir := fs.String("state-dir", sandbox.DefaultStateDir, "state directory serve would use (serve --state-dir)")
	fs.Usage = func() {
		fmt.Fprintln(stdio.Stderr, "Usage: airlock config check [flags]\n\nReads the config file as `airlock serve` would and prints which file it\nread, the socket, audit log and image store it names, and every tool as it\nresolves: limits over the defaults, image, egress, services and pool.\nExits 1 when the daemon would not start with it, checked as serve checks\nit: an invalid file, a tool's image missing from the store, a socket group\nthe host lacks, a token's unreadable secret, a tool over the capacity, a\nstate directory the sandboxes cannot reach; a service's secret that cannot\nbe read is a warning (the broker reads it at each call).\n\nFlags:")
		fs.PrintDefaults()
	}
	if done, err := cli.ParseNoArgs(fs, args[1:], stdio); done {
		return err
	}
	cfg, err := config.Discover(*cfgPath)
	if err != nil {
		fmt.Fprintf(stdio.Stderr, "airlock config check: %v\n", err)
		return &cli.ExitError{Code: 1}
	}
	c := checker{w: stdio.Stdout, cfg: cfg, store: *store, stateDir: *stateDir}
	c.check()
	for _, w := range c.warnings {
		fmt.Fprintf(stdio.Stderr, "warning: %s\n", w)
	}
	if len(c.errs) > 0 {
		for _, e := range c.errs {
			fmt.Fprintf(stdio.Stderr, "airlock config check: %v\n", e)
		}
		return &cli.ExitError{Code: 1}
	}
	return nil
}

// checker prints a config's resolution and collects what is wrong.
type checker struct {
	w        io.Writer
	cfg      *config.Config
	store    string
	stateDir string
	// budget is the node's capacity, which every tool must fit in.
	budget   *sandbox.Budget
	st       *image.Store
	warnings []string
	errs     []error
}

func (c *checker) check() {
	cfg := c.cfg
	path := cfg.Path
	if path == "" {
		path = "none (the built-in default, which has no tools)"
	}
	fmt.Fprintf(c.w, "config:       %s\n", path)
	sock := cfg.Server.Socket
	if sock == "" {
		sock = daemon.DefaultSocket
	}
	if cfg.Server.SocketGroup != "" {
		sock += " (mode 0660, group " + cfg.Server.SocketGroup + ")"
	} else {
		sock += " (mode 0660, group root)"
	}
	fmt.Fprintf(c.w, "socket:       %s\n", sock)
	// What serve checks before it listens, checked the same way: a file
	// that passes here and fails there is no check at all.
	if g := cfg.Server.SocketGroup; g != "" {
		if _, err := daemon.SocketGroup(g); err != nil {
			c.errs = append(c.errs, err)
		}
	}
	if _, err := tokens.Load(cfg); err != nil {
		c.errs = append(c.errs, err)
	}
	if cfg.Server.TCP.IsValid() {
		fmt.Fprintf(c.w, "tcp:          %s, %d token(s)\n", cfg.Server.TCP, len(cfg.Server.Tokens))
	}
	if cfg.Server.E2B.IsValid() {
		fmt.Fprintf(c.w, "e2b:          %s, its API keys the %d token(s) (docs/e2b.md)\n", cfg.Server.E2B, len(cfg.Server.Tokens))
	}
	if cl := cfg.Cluster; cl.Enabled {
		node, adv, api := cl.Node, cl.Advertise, "the pod's own (in-cluster)"
		if node == "" {
			node = "$AIRLOCK_NODE_NAME"
		}
		if adv == "" {
			adv = "$AIRLOCK_NODE_ADVERTISE, else server.tcp"
		}
		if cl.Kubernetes.Server != "" {
			api = cl.Kubernetes.Server + ", namespace " + cl.Kubernetes.Namespace
		}
		fmt.Fprintf(c.w, "cluster:      node %s at %s; Kubernetes API %s\n", node, adv, api)
	}
	if b, ceil, err := node.Capacity(cfg.Server.Capacity, ""); err != nil {
		c.errs = append(c.errs, fmt.Errorf("server.capacity: %w", err))
	} else {
		c.budget = &b
		from := "the host's"
		if ceil.Memory > 0 || ceil.Pids > 0 {
			from = "the limits of the cgroups above " + sandbox.DefaultCgroupParent + ":"
			if ceil.Memory > 0 {
				from += " " + humanSize(ceil.Memory) + " at " + ceil.MemoryAt
			}
			if ceil.Pids > 0 {
				from += fmt.Sprintf(" %d pids at %s", ceil.Pids, ceil.PidsAt)
			}
		}
		fmt.Fprintf(c.w, "capacity:     %d sandboxes, %s of memory ceilings, %d pids (unless set, shares of %s); %s of captured output\n",
			b.Sandboxes, humanSize(b.Memory), b.Pids, from, humanSize(node.CaptureBudget(cfg.Server.Capacity, b.Memory)))
	}
	ret := "kept forever"
	if cfg.Audit.Retention > 0 {
		ret = "kept " + days(cfg.Audit.Retention)
	}
	fmt.Fprintf(c.w, "audit log:    %s (%s, sync %s)\n", cfg.Audit.Path, ret, cfg.Audit.Sync)
	so := attach.StoreOptions(cfg.Images)
	if c.store != "" {
		so.Dir = c.store
	}
	fmt.Fprintf(c.w, "image store:  %s\n", so.Dir)
	fmt.Fprintf(c.w, "state:        %s (serve --state-dir)\n", c.stateDir)
	if r := cfg.Server.Runsc; r != "" {
		// Named, it must be there and root-owned: what serve checks when
		// a tool asks for gVisor, checked now.
		fmt.Fprintf(c.w, "runsc:        %s (unless serve --runsc)\n", r)
		if _, err := gvisor.Find(r); err != nil {
			c.errs = append(c.errs, fmt.Errorf("server.runsc: %w", err))
		}
	}
	if err := sandbox.CheckStateDir(c.stateDir); err != nil {
		c.errs = append(c.errs, err)
	}
	if len(cfg.Order) == 0 && len(cfg.MCPServerOrder) == 0 {
		c.warnings = append(c.warnings, "no tools are configured: every run and session names a tool (see docs/config.md)")
	}
	for _, name := range cfg.Order {
		c.tool("tool", cfg.Tools[name], so)
	}
	for _, name := range cfg.MCPServerOrder {
		c.tool("mcp server", cfg.MCPServers[name], so)
	}
	for _, name := range sortedSecrets(cfg) {
		if _, err := cfg.Secrets[name].Read(); err != nil {
			c.warnings = append(c.warnings, err.Error())
		}
	}
	if len(c.errs) == 0 {
		fmt.Fprintf(c.w, "\nok: %d tool(s), %d MCP server(s)\n", len(cfg.Order), len(cfg.MCPServerOrder))
	}
}

// tool prints one profile as the daemon would plan it.
func (c *checker) tool(kind string, t *config.Tool, so image.Options) {
	fmt.Fprintf(c.w, "\n%s %s", kind, t.Name)
	if t.Description != "" {
		fmt.Fprintf(c.w, ": %s", t.Description)
	}
	fmt.Fprintln(c.w)
	var o attach.Overrides
	img := t.Image
	if img == "" {
		img = config.ImageHost
	}
	if img != config.ImageHost {
		if c.st == nil {
			st, err := image.Open(so)
			if err != nil {
				c.errs = append(c.errs, fmt.Errorf("%s %s: image store: %w", kind, t.Name, err))
				return
			}
			c.st = st
		}
		im, err := c.st.Resolve(img)
		if err != nil {
			c.errs = append(c.errs, fmt.Errorf("%s %s: %w (airlock image import, or images.store)", kind, t.Name, err))
			return
		}
		o.Image = im
		img += " (" + im.Digest + ")"
	}
	p, err := attach.For(c.cfg, t, o)
	if err != nil {
		c.errs = append(c.errs, err)
		return
	}
	fmt.Fprintf(c.w, "  image:      %s\n", img)
	if len(t.Command) > 0 {
		fmt.Fprintf(c.w, "  command:    %s\n", commandText(t))
	}
	fmt.Fprintf(c.w, "  limits:     %s\n", limitsText(p.Spec.Limits))
	if c.budget != nil {
		if err := c.budget.Fits(p.Spec.Limits); err != nil {
			c.errs = append(c.errs, fmt.Errorf("%s %s: %w of the node (server.capacity)", kind, t.Name, err))
		}
		if err := node.CheckCapture(t.Name, p.Spec.Limits.Output, node.CaptureBudget(c.cfg.Server.Capacity, c.budget.Memory)); err != nil {
			c.errs = append(c.errs, err)
		}
	}
	fmt.Fprintf(c.w, "  workdir:    %s\n", p.Workdir)
	egress := "none (default deny)"
	if len(p.Policy.Egress) > 0 {
		var es []string
		for _, e := range p.Policy.Egress {
			if e.Private {
				es = append(es, e.String()+" (private: true)")
			} else {
				es = append(es, e.String())
			}
		}
		egress = strings.Join(es, ", ")
	}
	fmt.Fprintf(c.w, "  egress:     %s\n", egress)
	for _, s := range p.Policy.Services {
		fmt.Fprintf(c.w, "  service:    %s → %s, %d operation(s), secret %s\n", s.Name, s.Upstream, len(s.Operations), s.Credential.Secret)
	}
	pool := fmt.Sprintf("%d warm", t.Pool.Warm)
	if t.Pool.Max > 0 {
		pool = fmt.Sprintf("%d to %d warm, sized to the claim rate, back to %d after %s without a claim", t.Pool.Min, t.Pool.Max, t.Pool.Min, t.Pool.Idle)
	}
	if len(t.Pool.Kernels) > 0 {
		pool += ", kernels started ahead: " + strings.Join(t.Pool.Kernels, ", ")
	}
	fmt.Fprintf(c.w, "  pool:       %s\n", pool)
	if len(t.E2BTemplates) > 0 {
		fmt.Fprintf(c.w, "  e2b:        also template %s\n", strings.Join(t.E2BTemplates, ", "))
	}
}

// commandText is a tool's command template as the file wrote it.
func commandText(t *config.Tool) string {
	var parts []string
	for _, a := range t.Command {
		var b strings.Builder
		for i, p := range a.Parts {
			if i%2 == 1 {
				p = "{" + p + "}"
			}
			b.WriteString(p)
		}
		parts = append(parts, fmt.Sprintf("%q", b.String()))
	}
	return strings.Join(parts, " ")
}

func limitsText(l sandbox.Limits) string {
	cpu := "unthrottled"
	if l.CPUMilli > 0 {
		cpu = fmt.Sprintf("%g core(s)", float64(l.CPUMilli)/1000)
	}
	cpuTime := "none"
	if l.CPUTime > 0 {
		cpuTime = l.CPUTime.String()
	}
	return fmt.Sprintf("memory %s, pids %d, disk %s, fds %d, output %s, time %s, cpu %s, cpu time %s",
		units.FormatSize(l.Memory), l.Pids, units.FormatSize(l.Disk), l.FDs, units.FormatSize(l.Output), l.Time, cpu, cpuTime)
}

func days(d time.Duration) string {
	if d%(24*time.Hour) == 0 {
		return fmt.Sprintf("%d days", d/(24*time.Hour))
	}
	return d.String()
}

func sortedSecrets(cfg *config.Config) []string {
	var names []string
	for n := range cfg.Secrets {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}
