package node

import (
	"context"
	"maps"
	"reflect"
	"slices"
	"time"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/internal/audit"
	"github.com/airlockhq/airlock/internal/config"
	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/runner/attach"
	"github.com/airlockhq/airlock/pool"
)

// toolset is one generation of the node's tools: the config they came
// from, each profile's plan and pool. New makes the first; each Reload
// makes the next and swaps it in whole. A run or session keeps the tool
// and binding it started with.
type toolset struct {
	// raw is the config as the operator wrote it (the edges look tools
	// up in it); cfg the same with each image's defaults applied.
	raw, cfg *config.Config
	// base are the plans as attach.For made them, before the tools'
	// volumes were added: what a reload compares.
	base map[string]attach.Plan
	// plans are the plans sandboxes are made from.
	plans map[string]attach.Plan
	pools map[string]*pool.Pool
}

// plan is tool's plan in the current generation.
func (n *Node) plan(tool string) attach.Plan { return n.ts.Load().plans[tool] }

// newPool starts t's pool from plan: its sandboxes, the policy bound to
// them ahead and the kernels started in them are all plan's, never the
// node's current generation's, which during a reload is still the one
// before (a changed tool's new pool bound the old policy, an added
// tool's none).
func (n *Node) newPool(t *config.Tool, plan attach.Plan) *pool.Pool {
	spec := plan.Spec
	spec.OnStart = n.prebind(t, plan.Policy)
	return pool.New(n.rt, pool.Config{Name: t.Name, Spec: spec, Warm: t.Pool.Warm, Min: t.Pool.Min, Max: t.Pool.Max, Idle: t.Pool.Idle, Logger: n.opts.Logger, Prepare: n.prestart(t, plan.Spec.Limits)})
}

// profile is the tool or MCP server name of cfg, nil if none.
func profile(cfg *config.Config, name string) *config.Tool {
	if t := cfg.Tools[name]; t != nil {
		return t
	}
	return cfg.MCPServers[name]
}

// samePlan reports whether two plans make the same sandboxes under the
// same policy (the rate limiters, made anew with each plan, aside).
func samePlan(a, b attach.Plan) bool {
	a.Policy.Rates, b.Policy.Rates = nil, nil
	a.Policy.OnEgress, a.Policy.OnBroker, b.Policy.OnEgress, b.Policy.OnBroker = nil, nil, nil, nil
	return sameConfig(a, b)
}

// Reload makes raw (a config read again) the node's: every tool's image
// name resolved again, then each tool new or changed (its settings, or
// what its plan resolves to: an image re-imported under its name) gets
// a fresh pool, each changed or removed tool's pool drains in the
// background, and a tool unchanged keeps its pool and its ready
// sandboxes. Runs and sessions in flight keep the tool and binding they
// started with. A config that does not plan, or a tool that no longer
// fits the node's capacity, changes nothing and says why (ErrInvalid).
// Settings read only at start (server's, audit's, images') are named in
// the report's Restart, not applied. client is who asked, for the audit
// log.
func (n *Node) Reload(ctx context.Context, raw *config.Config, client string) (api.ReloadReport, error) {
	return n.ReloadWith(ctx, raw, client, nil)
}

// ReloadWith is Reload that also runs apply (when set) the moment the new
// tools take effect, before the audit record and the old pools' closing:
// what the caller applies with them (the daemon's tokens) is never seen
// out of step with them for longer than the two stores.
func (n *Node) ReloadWith(ctx context.Context, raw *config.Config, client string, apply func()) (api.ReloadReport, error) {
	n.reloadMu.Lock()
	defer n.reloadMu.Unlock()
	rep := api.ReloadReport{Config: raw.Path}
	// A reload that comes as the node stops (a SIGHUP in its shutdown)
	// would start pools nobody closes.
	if n.stopped {
		return rep, ErrShutdown
	}
	o := n.opts
	o.Config = raw
	plans, err := planAll(&o)
	if err != nil {
		return rep, errdefs.Errorf(errdefs.ErrInvalid, "the config was not reloaded: %v", err)
	}
	outBudget := CaptureBudget(n.opts.Config.Server.Capacity, n.opts.Sandbox.Budget.Memory)
	for _, t := range o.Config.Profiles() {
		if err := n.opts.Sandbox.Budget.Fits(plans[t.Name].Spec.Limits); err != nil {
			return rep, errdefs.Errorf(errdefs.ErrInvalid, "the config was not reloaded: tool %s: %v of the node (server.capacity)", t.Name, err)
		}
		if err := CheckCapture(t.Name, plans[t.Name].Spec.Limits.Output, outBudget); err != nil {
			return rep, errdefs.Errorf(errdefs.ErrInvalid, "the config was not reloaded: %v", err)
		}
	}
	old := n.ts.Load()
	next := &toolset{raw: raw, cfg: o.Config, base: maps.Clone(plans), plans: plans, pools: map[string]*pool.Pool{}}
	var fresh []*config.Tool
	for _, t := range o.Config.Profiles() {
		switch {
		case old.pools[t.Name] == nil:
			rep.Added = append(rep.Added, t.Name)
		case !sameConfig(profile(old.raw, t.Name), profile(raw, t.Name)) || !samePlan(old.base[t.Name], plans[t.Name]):
			rep.Changed = append(rep.Changed, t.Name)
		default:
			rep.Kept = append(rep.Kept, t.Name)
			next.plans[t.Name], next.pools[t.Name] = old.plans[t.Name], old.pools[t.Name]
			continue
		}
		fresh = append(fresh, t)
	}
	for name := range old.pools {
		if profile(o.Config, name) == nil {
			rep.Removed = append(rep.Removed, name)
		}
	}
	slices.Sort(rep.Removed)
	if err := n.checkIsolation(ctx, fresh); err != nil {
		return rep, errdefs.Errorf(errdefs.ErrInvalid, "the config was not reloaded: %v", err)
	}
	if err := n.toolVolumes(ctx, next, fresh); err != nil {
		return rep, errdefs.Errorf(errdefs.ErrInvalid, "the config was not reloaded: %v", err)
	}
	for _, t := range fresh {
		next.pools[t.Name] = n.newPool(t, next.plans[t.Name])
	}
	n.ts.Store(next)
	if apply != nil {
		apply()
	}
	n.metrics.addTools(o.Config.Order)
	for _, name := range append(slices.Clone(rep.Changed), rep.Removed...) {
		p := old.pools[name]
		n.draining.Add(1)
		go func() {
			defer n.draining.Done()
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
			defer cancel()
			if err := p.Close(cctx); err != nil {
				n.opts.Logger.Warn("a reloaded tool's old pool did not close cleanly", "tool", name, "err", err)
			}
		}()
	}
	// Against the config the node started with: what only a restart
	// applies is still to be applied until one, however many reloads
	// come between.
	rep.Restart = restartOnly(n.started, raw)
	e := audit.Event{Kind: audit.KindDaemonReloaded, Client: client}
	e.Detail = audit.Detail(rep)
	n.audit.Record(e)
	n.opts.Logger.Info("config reloaded", "config", raw.Path, "added", rep.Added, "changed", rep.Changed, "removed", rep.Removed, "restart", rep.Restart)
	return rep, nil
}

// ReloadImages is Reload of the config the node runs: each tool's image
// name resolved again, so a name imported anew is what the next
// sandboxes of its tools are made from.
func (n *Node) ReloadImages(ctx context.Context, client string) (api.ReloadReport, error) {
	return n.Reload(ctx, n.ts.Load().raw, client)
}

// restartOnly names the settings of next that differ from old's and
// take effect only at a restart.
func restartOnly(old, next *config.Config) []string {
	var out []string
	a, b := old.Server, next.Server
	// Tokens are the daemon's to reload; the rest of server is read at
	// start (listeners, socket, capacity, cluster).
	a.Tokens, b.Tokens = nil, nil
	if !sameConfig(a, b) {
		out = append(out, "server")
	}
	if !sameConfig(old.Audit, next.Audit) {
		out = append(out, "audit")
	}
	if !sameConfig(old.Images, next.Images) {
		out = append(out, "images")
	}
	if !sameConfig(old.Tracing, next.Tracing) {
		out = append(out, "tracing")
	}
	return out
}

// sameConfig is reflect.DeepEqual but for the fields named Line: where
// a setting sits in the file (a tool added above another moves it)
// changes nothing it does. Funcs are equal only when both are nil.
func sameConfig(a, b any) bool {
	return sameValue(reflect.ValueOf(a), reflect.ValueOf(b), 0)
}

func sameValue(a, b reflect.Value, depth int) bool {
	if depth > 64 {
		return false // a cycle, which configs do not have
	}
	if a.IsValid() != b.IsValid() {
		return false
	}
	if !a.IsValid() {
		return true
	}
	if a.Type() != b.Type() {
		return false
	}
	switch a.Kind() {
	case reflect.Pointer, reflect.Interface:
		if a.IsNil() || b.IsNil() {
			return a.IsNil() == b.IsNil()
		}
		return sameValue(a.Elem(), b.Elem(), depth+1)
	case reflect.Struct:
		for i := range a.NumField() {
			if a.Type().Field(i).Name == "Line" && a.Field(i).Kind() == reflect.Int {
				continue
			}
			if !sameValue(a.Field(i), b.Field(i), depth+1) {
				return false
			}
		}
		return true
	case reflect.Slice, reflect.Array:
		if a.Kind() == reflect.Slice && a.IsNil() != b.IsNil() && (a.Len() > 0 || b.Len() > 0) {
			return false
		}
		if a.Len() != b.Len() {
			return false
		}
		for i := range a.Len() {
			if !sameValue(a.Index(i), b.Index(i), depth+1) {
				return false
			}
		}
		return true
	case reflect.Map:
		if a.Len() != b.Len() {
			return false
		}
		for _, k := range a.MapKeys() {
			bv := b.MapIndex(k)
			if !bv.IsValid() || !sameValue(a.MapIndex(k), bv, depth+1) {
				return false
			}
		}
		return true
	case reflect.Func, reflect.Chan, reflect.UnsafePointer:
		return a.IsNil() && b.IsNil()
	}
	// Unexported fields of basic kinds are compared too.
	switch a.Kind() {
	case reflect.Bool:
		return a.Bool() == b.Bool()
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return a.Int() == b.Int()
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return a.Uint() == b.Uint()
	case reflect.Float32, reflect.Float64:
		return a.Float() == b.Float()
	case reflect.Complex64, reflect.Complex128:
		return a.Complex() == b.Complex()
	case reflect.String:
		return a.String() == b.String()
	}
	return false
}
