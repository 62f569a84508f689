// Package node is airlock's core on one machine: the lifecycles of a run
// and of a session, whatever protocol asked for them. A run claims a
// sandbox of its tool (warm from the tool's pool, or created), binds the
// tool's policy, runs one command, records its start and its outcome, and
// destroys the sandbox; a session holds one sandbox for its life and runs
// its commands and file calls in it. Who may use which tool is decided
// here once (Authorize), as is what the audit log records of it.
//
// It has no HTTP in it. The protocol edges (the native HTTP API, MCP, the
// E2B API) translate their wire formats to it and map its errors (classed
// by package errdefs) once, each at its boundary; internal/daemon wires
// them to it.
package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/airlockhq/airlock/internal/audit"
	"github.com/airlockhq/airlock/internal/config"
	"github.com/airlockhq/airlock/internal/image"
	"github.com/airlockhq/airlock/internal/runner/attach"
	"github.com/airlockhq/airlock/internal/tracing"
	"github.com/airlockhq/airlock/pool"
	"github.com/airlockhq/airlock/sandbox"
)

// Options configure a node.
type Options struct {
	// Config holds the tools; nil is the built-in default (no tools).
	Config *config.Config
	// Sandbox configures the runtime (state directory, cgroup parent).
	Sandbox sandbox.Options
	// MaxSessions bounds the sessions and MCP servers open at once (each
	// holds a sandbox and a uid range); 0 means 256.
	MaxSessions int
	// MaxPaused bounds the sessions paused at once (each still holds
	// its sandbox and memory); 0 means DefaultMaxPaused.
	MaxPaused int
	// PausedFor is how long a session may stay paused before it ends;
	// 0 means DefaultPausedFor.
	PausedFor time.Duration
	// SnapshotStore, if set, overrides the config's snapshot directory
	// (images.snapshots).
	SnapshotStore string
	// MaxSnapshots and SnapshotBytes bound the snapshots the node keeps
	// and the bytes of their files; 0 means DefaultMaxSnapshots and
	// DefaultSnapshotBytes.
	MaxSnapshots  int
	SnapshotBytes int64
	// VolumeStore, if set, overrides the config's volume directory
	// (images.volumes).
	VolumeStore string
	// MaxVolumes and VolumeBytes bound the volumes the node keeps and
	// the sum of their sizes; 0 means DefaultMaxVolumes and
	// DefaultVolumeBytes.
	MaxVolumes  int
	VolumeBytes int64
	// CaptureWait is how long a run whose output is captured waits for
	// room in the captured-output budget (server.capacity.output) before
	// it is refused; 0 means 30s.
	CaptureWait time.Duration
	// AuditPath, if set, overrides the config's audit log path.
	AuditPath string
	// ImageStore, if set, overrides the config's image store directory.
	ImageStore string
	// ExportAudit, if set, receives the audit log's export (audit.export:
	// stdout).
	ExportAudit *os.File
	// Logger receives the node's log; nil discards it.
	Logger *slog.Logger
	// Version is airlock's, for the traces' service.version.
	Version string
}

// Node is the core of one machine: its runtime, its tools' pools, its
// runs, sessions and audit log. Create it with New; Stop then Close it.
type Node struct {
	opts Options
	rt   *sandbox.Runtime
	// ts is the tools' generation: the config, each profile's plan and
	// pool. Reload swaps it whole (reload.go); what started under one
	// keeps it.
	ts atomic.Pointer[toolset]
	// started is the config the node started with: what a reload
	// cannot change stays as it says.
	started  *config.Config
	reloadMu sync.Mutex // held by Reload: one at a time; guards stopped
	// stopped is set by Stop: no reload after it.
	stopped bool
	// draining counts the pools a reload replaced, closing; Stop waits.
	draining sync.WaitGroup
	live     liveRuns
	traces   traces
	audit    *audit.Log
	// metrics are the labelled metrics (metrics.go), most counted from
	// the audit log's commits.
	metrics *nodeMetrics

	counts Counters
	holds  holds
	paused pausedHolds
	snaps  snapshots
	tpl    builds
	vols   volumes
	kept   kept
	// keeping counts the pauses whose files are being kept; Stop waits
	// for them, so that a pause just before a stop survives it.
	keeping sync.WaitGroup
	// capture bounds the output held for callers that take it whole
	// (see capture.go).
	capture  *captureBudget
	sessions sessions
	// name is the node's name in a cluster, which its session ids carry
	// ("" alone).
	name string
	// destroying counts sandboxes being destroyed after their answer
	// went out; Stop waits for them.
	destroying sync.WaitGroup
	laterMu    sync.Mutex // guards lateStop
	// lateStop is set by Stop before it waits on destroying: a Later
	// after it (a call an edge cut at its shutdown, still finishing)
	// destroys in its caller, never adding to a WaitGroup being waited
	// on.
	lateStop bool
	// prebound holds, by sandbox id, the bindings made while pooled
	// sandboxes were built (see prebind.go); prebinds counts the
	// goroutines that close those of sandboxes that die unclaimed.
	prebound sync.Map
	prebinds sync.WaitGroup
	// kernels holds, by sandbox id, the code interpreter's kernels
	// started in pooled sandboxes before their claim (see kernel.go).
	kernels sync.Map
	// claimedBy holds, by sandbox id, the audit client of the run,
	// session or MCP server that claimed it, until it is destroyed: its
	// sandbox.destroyed event is that client's.
	claimedBy sync.Map
	// quit ends when the node starts to stop (Quit), so that waits for
	// room end at once instead of holding a shutdown's grace period.
	quit    context.Context
	quitNow context.CancelFunc
	// reapStop ends the reaper of sessions (Start).
	reapStop context.CancelFunc
}

// planAll finds every profile's image in the store and translates each
// profile (attach.For: the one translation). The image's environment and
// working directory become the tool's: tools with an image are copied
// into a copy of opts.Config, so the caller's configuration is never
// changed.
func planAll(opts *Options) (map[string]attach.Plan, error) {
	out := make(map[string]attach.Plan)
	var store *image.Store
	cfg := *opts.Config
	cfg.Tools, cfg.MCPServers = maps.Clone(cfg.Tools), maps.Clone(cfg.MCPServers)
	for _, t := range cfg.Profiles() {
		var o attach.Overrides
		if t.Image != config.ImageHost && t.Image != "" {
			if store == nil {
				so := attach.StoreOptions(cfg.Images)
				if opts.ImageStore != "" {
					so.Dir = opts.ImageStore
				}
				var err error
				if store, err = image.Open(so); err != nil {
					return nil, err
				}
			}
			img, err := store.Resolve(t.Image)
			if err != nil {
				return nil, fmt.Errorf("tool %s: %w", t.Name, err)
			}
			o.Image = img
		}
		p, err := attach.For(&cfg, t, o)
		if err != nil {
			return nil, err
		}
		out[t.Name] = p
		if o.Image == nil {
			continue
		}
		tc := *t
		tc.Env, tc.Workdir = p.Env, p.Workdir
		if _, ok := cfg.Tools[t.Name]; ok {
			cfg.Tools[t.Name] = &tc
		} else {
			cfg.MCPServers[t.Name] = &tc
		}
	}
	opts.Config = &cfg
	return out, nil
}

// New opens the audit log, closes in it what a crashed predecessor left
// open, sweeps what that one left on the host, and starts a pool per
// tool. Its Config is a copy of opts.Config with each image's defaults
// applied (see Config).
func New(ctx context.Context, opts Options) (_ *Node, err error) {
	if opts.Config == nil {
		opts.Config = config.Empty()
	}
	if opts.MaxSessions <= 0 {
		opts.MaxSessions = 256
	}
	if opts.MaxPaused <= 0 {
		opts.MaxPaused = DefaultMaxPaused
	}
	if opts.PausedFor <= 0 {
		opts.PausedFor = DefaultPausedFor
	}
	if opts.MaxSnapshots <= 0 {
		opts.MaxSnapshots = DefaultMaxSnapshots
	}
	if opts.SnapshotBytes <= 0 {
		opts.SnapshotBytes = DefaultSnapshotBytes
	}
	if opts.MaxVolumes <= 0 {
		opts.MaxVolumes = DefaultMaxVolumes
	}
	if opts.VolumeBytes <= 0 {
		opts.VolumeBytes = DefaultVolumeBytes
	}
	if opts.CaptureWait <= 0 {
		opts.CaptureWait = DefaultCaptureWait
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	opts.Sandbox.Logger = opts.Logger
	// Every tool's image is resolved before anything starts (pools, and
	// the runtime's reports to observe, read what this finds).
	raw := opts.Config
	plans, err := planAll(&opts)
	if err != nil {
		return nil, err
	}
	n := &Node{opts: opts, sessions: sessions{m: make(map[string]*Session)}}
	ts := &toolset{raw: raw, cfg: opts.Config, base: maps.Clone(plans), plans: plans, pools: make(map[string]*pool.Pool)}
	n.started = raw
	n.ts.Store(ts)
	n.quit, n.quitNow = context.WithCancel(context.Background())
	defer func() {
		if err != nil {
			n.closePools(context.WithoutCancel(ctx))
			n.prebinds.Wait() // the gateways of the pools' sandboxes
			if n.rt != nil {
				n.rt.Close()
			}
			if n.audit != nil {
				n.audit.Close(context.WithoutCancel(ctx))
			}
			n.traces.t.Close(context.WithoutCancel(ctx))
		}
	}()
	// The audit log opens first, so the sweep below is recorded; a
	// node that cannot record does not start.
	a := opts.Config.Audit
	if opts.AuditPath != "" {
		a.Path = opts.AuditPath
	}
	n.metrics = newNodeMetrics(opts.Config.Order)
	n.traces.t = newTracer(opts.Config.Tracing, opts.Version, opts.Logger)
	observe := func(e audit.Event) {
		n.metrics.observe(e)
		n.traces.observe(e)
	}
	ao := audit.Options{Path: a.Path, Retention: a.Retention, Sync: a.Sync, Logger: opts.Logger, Observe: observe}
	if a.Export == "stdout" && opts.ExportAudit != nil {
		ao.Export = opts.ExportAudit
	}
	if n.audit, err = audit.Open(ctx, ao); err != nil {
		return nil, err
	}
	if err = n.audit.Append(ctx, audit.Event{Kind: audit.KindDaemonStarted, Detail: audit.Detail(map[string]any{
		"pid": os.Getpid(), "config": opts.Config.Path, "tools": opts.Config.Order,
	})}); err != nil {
		return nil, err
	}
	if c, err := n.reconcile(ctx); err != nil {
		return nil, fmt.Errorf("audit log: close what the previous daemon left open: %w", err)
	} else if c > 0 {
		opts.Logger.Warn("the previous daemon stopped without recording every outcome; closed its open runs and sessions in the audit log", "closed", c)
	}
	opts.Sandbox.Observe = n.observe
	if opts.Sandbox.Budget == (sandbox.Budget{}) {
		ceil, err := sandbox.ReadParentCeiling(opts.Sandbox.CgroupParent)
		if err != nil {
			return nil, fmt.Errorf("server.capacity: %w", err)
		}
		if ceil.Memory > 0 || ceil.Pids > 0 {
			opts.Logger.Info("the cgroups above the sandboxes have limits of their own; the capacity stays under them",
				"memory_bytes", ceil.Memory, "memory_at", ceil.MemoryAt, "pids", ceil.Pids, "pids_at", ceil.PidsAt)
		}
		if opts.Sandbox.Budget, err = budget(opts.Config.Server.Capacity, ceil); err != nil {
			return nil, fmt.Errorf("server.capacity: %w", err)
		}
	}
	for _, t := range opts.Config.Profiles() {
		if err := opts.Sandbox.Budget.Fits(plans[t.Name].Spec.Limits); err != nil {
			return nil, fmt.Errorf("tool %s: %w of the node (server.capacity)", t.Name, err)
		}
	}
	n.opts.Sandbox.Budget = opts.Sandbox.Budget
	outBudget := CaptureBudget(opts.Config.Server.Capacity, opts.Sandbox.Budget.Memory)
	for _, t := range opts.Config.Profiles() {
		if err := CheckCapture(t.Name, plans[t.Name].Spec.Limits.Output, outBudget); err != nil {
			return nil, err
		}
	}
	n.capture = newCaptureBudget(outBudget, opts.CaptureWait)
	opts.Logger.Info("capacity", "sandboxes", opts.Sandbox.Budget.Sandboxes, "memory_bytes", opts.Sandbox.Budget.Memory, "pids", opts.Sandbox.Budget.Pids, "captured_output_bytes", outBudget)
	// sandbox.New sweeps leftovers of a crashed predecessor.
	if n.rt, err = sandbox.New(ctx, opts.Sandbox); err != nil {
		return nil, err
	}
	if err := n.checkIsolation(ctx, opts.Config.Profiles()); err != nil {
		return nil, err
	}
	if err = n.toolVolumes(ctx, ts, opts.Config.Profiles()); err != nil {
		// The runtime and the rest are closed by New's undo (above).
		n.closeVolumes()
		return nil, err
	}
	for _, t := range opts.Config.Profiles() {
		ts.pools[t.Name] = n.newPool(t, ts.plans[t.Name])
	}
	// The sessions a previous daemon left paused come back, dormant.
	n.loadDormant(ctx)
	return n, nil
}

// Config is the node's configuration: the one it was given (or the last
// reload's), with each tool's image's defaults (environment, working
// directory) applied.
func (n *Node) Config() *config.Config { return n.ts.Load().cfg }

// Tools is Config, by the name the edges ask for it: where they look
// tools up, the last reload's.
func (n *Node) Tools() *config.Config { return n.ts.Load().cfg }

// Logger is the node's log.
func (n *Node) Logger() *slog.Logger { return n.opts.Logger }

// Audit is the node's audit log.
func (n *Node) Audit() *audit.Log { return n.audit }

// Runtime is the node's sandbox runtime.
func (n *Node) Runtime() *sandbox.Runtime { return n.rt }

// Pool is tool's pool, nil when there is no such tool.
func (n *Node) Pool(tool string) *pool.Pool { return n.ts.Load().pools[tool] }

// PoolStats are tool's pool's counters; false when there is no such
// tool.
func (n *Node) PoolStats(tool string) (pool.Stats, bool) {
	p := n.Pool(tool)
	if p == nil {
		return pool.Stats{}, false
	}
	return p.Stats(), true
}

// Plan is tool's translation (attach.For).
func (n *Node) Plan(tool string) attach.Plan { return n.ts.Load().plans[tool] }

// Counts are the node's own counters.
func (n *Node) Counts() *Counters { return &n.counts }

// SetName names the node in a cluster: the ids of the sessions it opens
// from then on carry the name. Call it before Start.
func (n *Node) SetName(name string) { n.name = name }

// Start starts the reaper of idle and expired sessions.
func (n *Node) Start() {
	ctx, stop := context.WithCancel(context.Background())
	n.reapStop = stop
	go n.reap(ctx)
}

// Quit starts the node's stop: waits for room (captured output) end at
// once, and long polls answer.
func (n *Node) Quit() { n.quitNow() }

// Quitting ends when Quit is called.
func (n *Node) Quitting() context.Context { return n.quit }

// Stop ends every session (their sandboxes destroyed), waits for the
// sandboxes being destroyed after their answer, closes the pools, sweeps
// what dead airlock processes left, and closes the runtime. What holds sandboxes of its own on the node (an edge's MCP
// servers) is stopped first, by its owner.
func (n *Node) Stop(ctx context.Context) error {
	n.quitNow()
	// A reload under way ends first: its pools are then the ones
	// closePools closes, and none starts after.
	n.reloadMu.Lock()
	n.stopped = true
	n.reloadMu.Unlock()

	if n.reapStop != nil {
		n.reapStop()
	}
	// Builds under way are cancelled (their sandboxes destroyed) before
	// the sessions end: a build does not hold the stop.
	n.closeTemplates()
	n.keeping.Wait()
	n.endAll(ctx)
	n.laterMu.Lock()
	n.lateStop = true
	n.laterMu.Unlock()
	n.destroying.Wait()
	err := n.closePools(ctx)
	n.prebinds.Wait()
	// A predecessor's leftover whose lock was still held when this node
	// started (a process of the killed daemon still dying) was skipped
	// by the start's sweep: it is swept now, so that a stop leaves
	// nothing of a dead airlock process behind either.
	if c, serr := n.rt.Sweep(ctx); serr != nil {
		n.opts.Logger.Warn("sweep leftovers at stop", "err", serr)
	} else if c > 0 {
		n.opts.Logger.Info("removed leftovers of a previous airlock process", "sandboxes", c)
	}
	n.rt.Close()
	n.closeVolumes()
	n.snaps.mu.Lock()
	if n.snaps.store != nil {
		// Its unpacking in the background stops; the next start goes
		// on with it.
		_ = n.snaps.store.Close()
	}
	n.snaps.mu.Unlock()
	return err
}

// Close records the node's stop and closes the audit log: last, so that
// everything Stop destroyed is in the log.
func (n *Node) Close(ctx context.Context) error {
	err := n.audit.Append(ctx, audit.Event{Kind: audit.KindDaemonStopped})
	actx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	err = errors.Join(err, n.audit.Close(actx))
	// The spans of what the log committed last go out too, for as long
	// as a collector takes at most.
	tctx, tcancel := context.WithTimeout(ctx, 10*time.Second)
	defer tcancel()
	if terr := n.traces.t.Close(tctx); terr != nil {
		n.opts.Logger.Warn("tracing: the last spans were not sent", "err", terr)
	}
	return err
}

// TraceStats are what the node's tracer has done; zero when tracing is
// off.
func (n *Node) TraceStats() tracing.Stats { return n.traces.t.Stats() }

func (n *Node) closePools(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	var errs []error
	if ts := n.ts.Load(); ts != nil {
		for _, p := range ts.pools {
			errs = append(errs, p.Close(ctx))
		}
	}
	// And the pools a reload replaced, still closing.
	n.draining.Wait()
	return errors.Join(errs...)
}
