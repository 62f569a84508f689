package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/airlockhq/airlock/internal/kube"
)

// Node is a front's view of one node.
type Node struct {
	Name     string
	Endpoint string
	// E2B is the node's E2B-compatible API; "" when it serves none.
	E2B   string
	Stats Stats
	// Expires is when the node is taken for dead unless it renews.
	Expires time.Time
}

// View is a front's live view of the nodes, from a watch of their
// leases. Its zero value is not usable; use NewView.
type View struct {
	kube   *kube.Client
	logger *slog.Logger

	mu    sync.Mutex
	nodes map[string]*Node
	// down are nodes a front found unreachable, kept out of placement
	// until the time given (or until their lease is renewed after it).
	down  map[string]time.Time
	ready chan struct{} // closed after the first list
}

// NewView returns a view of the nodes registered through c; Run fills
// it.
func NewView(c *kube.Client, logger *slog.Logger) *View {
	return &View{kube: c, logger: logger, nodes: map[string]*Node{}, down: map[string]time.Time{}, ready: make(chan struct{})}
}

// Ready is closed once the view holds the nodes listed at start.
func (v *View) Ready() <-chan struct{} { return v.ready }

// Run lists the leases and watches them until ctx ends, listing again
// when a watch's version is too old, and retrying after errors.
func (v *View) Run(ctx context.Context) {
	first := true
	for ctx.Err() == nil {
		leases, rv, err := v.kube.ListLeases(ctx, Selector)
		if err != nil {
			if ctx.Err() == nil {
				v.logger.Warn("cluster: listing the nodes", "err", err)
			}
			sleep(ctx, time.Second)
			continue
		}
		v.replace(leases)
		if first {
			close(v.ready)
			first = false
		}
		for ctx.Err() == nil {
			err := v.kube.WatchLeases(ctx, Selector, rv, func(ev kube.Event) {
				switch ev.Type {
				case "BOOKMARK":
					rv = ev.Bookmark
				case "DELETED":
					rv = ev.Lease.Metadata.ResourceVersion
					v.remove(ev.Lease.Spec.HolderIdentity, ev.Lease.Metadata.Name)
				default:
					rv = ev.Lease.Metadata.ResourceVersion
					v.update(&ev.Lease)
				}
			})
			if errors.Is(err, kube.ErrGone) {
				break // list again
			}
			if err != nil && ctx.Err() == nil {
				v.logger.Warn("cluster: watching the nodes", "err", err)
				sleep(ctx, time.Second)
				break
			}
		}
	}
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// nodeOf reads a lease into a node; nil when it is not a node's.
func nodeOf(l *kube.Lease) *Node {
	name := l.Spec.HolderIdentity
	if name == "" || l.Metadata.Name != LeaseName(name) || l.Spec.RenewTime == nil {
		return nil
	}
	n := &Node{Name: name, Endpoint: l.Metadata.Annotations[AnnotationEndpoint], E2B: l.Metadata.Annotations[AnnotationE2B],
		Expires: l.Spec.RenewTime.Add(time.Duration(l.Spec.LeaseDurationSeconds) * time.Second)}
	if n.Endpoint == "" || json.Unmarshal([]byte(l.Metadata.Annotations[AnnotationStats]), &n.Stats) != nil {
		return nil
	}
	return n
}

func (v *View) replace(leases []kube.Lease) {
	m := map[string]*Node{}
	for i := range leases {
		if n := nodeOf(&leases[i]); n != nil {
			m[n.Name] = n
		}
	}
	v.mu.Lock()
	v.nodes = m
	v.mu.Unlock()
}

func (v *View) update(l *kube.Lease) {
	n := nodeOf(l)
	if n == nil {
		return
	}
	v.mu.Lock()
	v.nodes[n.Name] = n
	v.mu.Unlock()
}

func (v *View) remove(holder, lease string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	for name := range v.nodes {
		if name == holder || LeaseName(name) == lease {
			delete(v.nodes, name)
		}
	}
}

// Get returns the node name as last seen, and whether it is live (its
// lease not expired and not marked down).
func (v *View) Get(name string) (Node, bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	n, ok := v.nodes[name]
	if !ok {
		return Node{}, false
	}
	return *n, v.liveLocked(n, time.Now())
}

func (v *View) liveLocked(n *Node, now time.Time) bool {
	if now.After(n.Expires) {
		return false
	}
	if until, ok := v.down[n.Name]; ok && now.Before(until) {
		return false
	}
	return true
}

// MarkDown keeps name out of placement for d: a front could not reach
// it, which its lease will say too once it expires.
func (v *View) MarkDown(name string, d time.Duration) {
	v.mu.Lock()
	v.down[name] = time.Now().Add(d)
	v.mu.Unlock()
}

// Nodes returns the live nodes, by name.
func (v *View) Nodes() []Node {
	v.mu.Lock()
	defer v.mu.Unlock()
	now := time.Now()
	var out []Node
	for _, n := range v.nodes {
		if v.liveLocked(n, now) {
			out = append(out, *n)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Serves tells whether any node known, live or not, has tool.
func (v *View) Serves(tool string) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	for _, n := range v.nodes {
		if _, ok := n.Stats.Tools[tool]; ok {
			return true
		}
	}
	return false
}

// score ranks a node for a new run or session of tool: a ready sandbox
// first (served warm), then less load for its capacity.
func score(n *Node, tool string) float64 {
	s := 0.0
	if ts, ok := n.Stats.Tools[tool]; ok && ts.Idle > 0 {
		s += 1000 + float64(min(ts.Idle, 10))
	}
	load := float64(n.Stats.Running + n.Stats.Sessions)
	if n.Stats.Capacity > 0 {
		load = float64(n.Stats.Sandboxes) / float64(n.Stats.Capacity) * 100
	}
	return s - load
}

// Place picks a node for a new run or session of tool, skipping those
// in skip: best of two sampled at random among the live nodes that serve
// the tool and are not draining, as E2B's orchestrator does; the
// sampling spreads work that the same scores would pile on one node.
func (v *View) Place(tool string, skip map[string]bool) (Node, bool) {
	var cands []Node
	for _, n := range v.Nodes() {
		if _, ok := n.Stats.Tools[tool]; ok && !n.Stats.Draining && !skip[n.Name] {
			cands = append(cands, n)
		}
	}
	switch len(cands) {
	case 0:
		return Node{}, false
	case 1:
		v.placed(cands[0].Name, tool)
		return cands[0], true
	}
	i := rand.IntN(len(cands))
	j := rand.IntN(len(cands) - 1)
	if j >= i {
		j++
	}
	a, b := cands[i], cands[j]
	if score(&b, tool) > score(&a, tool) {
		a = b
	}
	v.placed(a.Name, tool)
	return a, true
}

// placed counts a placement in the view until the node's next renewal
// says it: a sandbox claimed, one more call running. The stats are
// copied, never changed in place: Nodes' callers hold them.
func (v *View) placed(name, tool string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	n, ok := v.nodes[name]
	if !ok {
		return
	}
	c := *n
	c.Stats.Tools = make(map[string]ToolStats, len(n.Stats.Tools))
	for k, ts := range n.Stats.Tools {
		if k == tool && ts.Idle > 0 {
			ts.Idle--
		}
		c.Stats.Tools[k] = ts
	}
	c.Stats.Running++
	c.Stats.Sandboxes++
	v.nodes[name] = &c
}

// NodeOfID is the node an id made on a node names: "s_NODE-HEX" gives
// NODE; "" when the id names none.
func NodeOfID(id string) string {
	rest, ok := strings.CutPrefix(id, "s_")
	if !ok {
		return ""
	}
	i := strings.LastIndexByte(rest, '-')
	if i <= 0 {
		return ""
	}
	return rest[:i]
}

// StaticView is a view of the given nodes as they are, live until their
// Expires (never renewed: nothing watches the Kubernetes API): a front's
// tests, which run none.
func StaticView(nodes ...Node) *View {
	v := NewView(nil, nil)
	for _, n := range nodes {
		v.nodes[n.Name] = &n
	}
	close(v.ready)
	return v
}
