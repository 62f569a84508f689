package cluster

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/kube"
	"github.com/airlockhq/airlock/internal/kube/kubetest"
)

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestRegistrarAndView: nodes register through a real API server, a
// front's view sees them with their stats as they change, a draining
// node is left out of placement, a node that leaves is gone from the
// view, and one whose lease expires is no longer live.
func TestRegistrarAndView(t *testing.T) {
	cp := kubetest.Start(t)
	kc := cp.Client(t, "admin")
	logger := slog.New(slog.DiscardHandler)
	var smu sync.Mutex // guards stats: the registrars read it as the test changes it
	stats := map[string]*Stats{
		"node-a": {Tools: map[string]ToolStats{"sh": {Warm: 2, Idle: 0}}},
		"node-b": {Tools: map[string]ToolStats{"sh": {Warm: 2, Idle: 2}}},
	}
	type reg struct {
		stop context.CancelFunc
		done chan struct{}
		ran  chan struct{}
	}
	regs := map[string]reg{}
	for _, name := range []string{"node-a", "node-b"} {
		r := &Registrar{Kube: kc, Node: name, Endpoint: "http://127.0.0.1:1/" + name, Lease: 3 * time.Second, Logger: logger,
			Stats: func() Stats { smu.Lock(); defer smu.Unlock(); return *stats[name] }}
		ctx, stop := context.WithCancel(context.Background())
		started := make(chan error, 1)
		g := reg{stop: stop, done: make(chan struct{}), ran: make(chan struct{})}
		go func() { defer close(g.ran); r.Run(ctx, started, g.done) }()
		if err := <-started; err != nil {
			t.Fatalf("register %s: %v", name, err)
		}
		regs[name] = g
		t.Cleanup(func() {
			stop()
			select {
			case <-g.done:
			default:
				close(g.done)
			}
			<-g.ran
		})
	}
	v := NewView(kc, logger)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go v.Run(ctx)
	<-v.Ready()
	waitFor(t, "both nodes in the view", func() bool { return len(v.Nodes()) == 2 })
	// Placement prefers the node with a warm sandbox.
	for range 20 {
		n, ok := v.Place("sh", nil)
		if !ok || n.Name != "node-b" {
			t.Fatalf("Place = %+v, %v: want the warm node-b", n, ok)
		}
		// Undo the view's own count of the placement: the stats say 2
		// idle until the node's next renewal.
		smu.Lock()
		v.replaceStats("node-b", *stats["node-b"])
		smu.Unlock()
	}
	if _, ok := v.Place("python", nil); ok {
		t.Error("Place found a node for a tool no node serves")
	}
	// A renewal carries new stats: node-a becomes the warm one.
	smu.Lock()
	stats["node-a"] = &Stats{Tools: map[string]ToolStats{"sh": {Warm: 2, Idle: 2}}}
	stats["node-b"] = &Stats{Tools: map[string]ToolStats{"sh": {Warm: 2, Idle: 0}}}
	smu.Unlock()
	waitFor(t, "node-a's new stats", func() bool {
		n, _ := v.Get("node-a")
		return n.Stats.Tools["sh"].Idle == 2
	})
	// Leaving: draining while its work ends, out of placement, then
	// gone.
	regs["node-a"].stop()
	waitFor(t, "node-a draining", func() bool { n, _ := v.Get("node-a"); return n.Stats.Draining })
	for range 10 {
		if n, _ := v.Place("sh", nil); n.Name != "node-b" {
			t.Fatalf("Place chose %s, which is draining", n.Name)
		}
	}
	close(regs["node-a"].done)
	waitFor(t, "node-a gone", func() bool { _, ok := v.Get("node-a"); return !ok })
	if _, err := kc.GetLease(context.Background(), LeaseName("node-a")); !errors.Is(err, kube.ErrNotFound) {
		t.Errorf("node-a's lease after it left: %v", err)
	}
	// A node that stops renewing (killed: it neither drains nor leaves)
	// is no longer live once its lease runs out, though its lease is
	// still there.
	dead := &Registrar{Kube: kc, Node: "node-c", Endpoint: "http://127.0.0.1:1/c", Lease: 2 * time.Second, Logger: logger,
		Stats: func() Stats { return Stats{Tools: map[string]ToolStats{"sh": {Warm: 5, Idle: 5}}} }}
	if err := dead.publish(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "node-c in the view", func() bool { _, live := v.Get("node-c"); return live })
	waitFor(t, "node-c expired", func() bool { _, live := v.Get("node-c"); return !live })
	for range 10 {
		if n, _ := v.Place("sh", nil); n.Name != "node-b" {
			t.Fatalf("Place chose %s, whose lease has run out", n.Name)
		}
	}
	// A node a front found unreachable is out of placement at once.
	v.MarkDown("node-b", time.Minute)
	if n, ok := v.Place("sh", nil); ok {
		t.Errorf("Place chose %s, marked down", n.Name)
	}
}

// replaceStats sets a node's stats in the view (tests).
func (v *View) replaceStats(name string, st Stats) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if n, ok := v.nodes[name]; ok {
		c := *n
		c.Stats = st
		v.nodes[name] = &c
	}
}

func TestNodeOfID(t *testing.T) {
	for id, want := range map[string]string{
		"s_node-a-0123abcd": "node-a",
		"s_n-1":             "n",
		"s_0123abcd":        "",
		"x_node-a-0123":     "",
		"s_-0123":           "",
	} {
		if got := NodeOfID(id); got != want {
			t.Errorf("NodeOfID(%q) = %q, want %q", id, got, want)
		}
	}
}
