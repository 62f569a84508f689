package sandbox

import (
	"fmt"
	"sync"

	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/linux/cgroup"
	"github.com/airlockhq/airlock/internal/units"
)

// Budget bounds what the live sandboxes of one runtime may reserve
// together: how many there are, and the sums of their memory and pids
// ceilings. A sandbox reserves its ceilings from its Start (or Create) to
// the end of its Destroy, warm in a pool or running alike. A zero field
// is unbounded.
type Budget struct {
	Sandboxes int
	Memory    int64
	Pids      int64
}

// ParentCeiling is what the cgroups above a cgroup parent hold all of its
// sandboxes to, together with everything else below them: the lowest
// memory and pids limits of those groups, and where each is set (a
// container's own group, a systemd service's MemoryMax= or TasksMax=).
// Zero is no limit. A budget over it would promise sandboxes what the
// kernel takes back by OOM-killing or refusing forks anywhere below that
// group, the daemon included.
type ParentCeiling struct {
	Memory   int64
	MemoryAt string
	Pids     int64
	PidsAt   string
}

// ReadParentCeiling reads the ceiling above cgroupParent (Options'
// CgroupParent, default DefaultCgroupParent; relative to this process's
// own cgroup when it has no leading slash). It creates nothing.
func ReadParentCeiling(cgroupParent string) (ParentCeiling, error) {
	if cgroupParent == "" {
		cgroupParent = DefaultCgroupParent
	}
	cgroupParent, err := cgroup.ResolveParent(cgroupParent)
	if err != nil {
		return ParentCeiling{}, err
	}
	c, err := cgroup.AncestorCeiling(cgroupParent)
	return ParentCeiling{Memory: c.MemoryBytes, MemoryAt: c.MemoryAt, Pids: c.Pids, PidsAt: c.PidsAt}, err
}

// Usage is what the live sandboxes reserve now. Paused sandboxes are
// live: they count in Sandboxes, Memory and Pids, and Paused and
// PausedMemory say how much of that they are.
type Usage struct {
	Sandboxes    int   `json:"sandboxes"`
	Memory       int64 `json:"memory_bytes"`
	Pids         int64 `json:"pids"`
	Paused       int   `json:"paused"`
	PausedMemory int64 `json:"paused_memory_bytes"`
}

// ErrCapacity is wrapped by the error of a Start or Create refused because
// the runtime's Budget is spent: it may succeed once other sandboxes are
// destroyed. It belongs to errdefs.ErrUnavailable.
var ErrCapacity = errdefs.New(errdefs.ErrUnavailable, "at capacity")

// Fits reports why limits l could never be admitted under b, even with
// no other sandbox live, or nil.
func (b Budget) Fits(l Limits) error {
	switch {
	case b.Memory > 0 && l.Memory > b.Memory:
		return fmt.Errorf("a memory ceiling of %s is over the whole budget of %s", units.FormatSize(l.Memory), units.FormatSize(b.Memory))
	case b.Pids > 0 && l.Pids > b.Pids:
		return fmt.Errorf("a pids ceiling of %d is over the whole budget of %d", l.Pids, b.Pids)
	}
	return nil
}

// ledger keeps a runtime's Usage against its Budget.
type ledger struct {
	b Budget // fixed when the runtime starts

	mu sync.Mutex // guards u
	u  Usage
}

// take reserves l's ceilings, or says which part of the budget is spent.
func (g *ledger) take(l Limits) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	b, u := g.b, g.u
	switch {
	case b.Sandboxes > 0 && u.Sandboxes+1 > b.Sandboxes:
		return fmt.Errorf("%w: %d sandboxes are live, the most this node allows", ErrCapacity, u.Sandboxes)
	case b.Memory > 0 && u.Memory+l.Memory > b.Memory:
		return fmt.Errorf("%w: live sandboxes reserve %s of memory ceilings of the %s this node allows, and this one needs %s", ErrCapacity,
			units.FormatSize(u.Memory), units.FormatSize(b.Memory), units.FormatSize(l.Memory))
	case b.Pids > 0 && u.Pids+l.Pids > b.Pids:
		return fmt.Errorf("%w: live sandboxes reserve %d of the %d pids this node allows, and this one needs %d", ErrCapacity, u.Pids, b.Pids, l.Pids)
	}
	g.u.Sandboxes++
	g.u.Memory += l.Memory
	g.u.Pids += l.Pids
	return nil
}

// give returns what take reserved.
func (g *ledger) give(l Limits) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.u.Sandboxes--
	g.u.Memory -= l.Memory
	g.u.Pids -= l.Pids
}

// pause notes that a sandbox holding l is paused: it stays booked.
func (g *ledger) pause(l Limits) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.u.Paused++
	g.u.PausedMemory += l.Memory
}

// unpause undoes pause.
func (g *ledger) unpause(l Limits) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.u.Paused--
	g.u.PausedMemory -= l.Memory
}

func (g *ledger) usage() Usage {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.u
}

// Usage returns what the runtime's live sandboxes reserve now.
func (rt *Runtime) Usage() Usage { return rt.ledger.usage() }

// Budget returns the runtime's budget (Options.Budget).
func (rt *Runtime) Budget() Budget { return rt.opts.Budget }
