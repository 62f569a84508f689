package daemon

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"strconv"
	"sync"

	"github.com/airlockhq/airlock/internal/cluster"
	"github.com/airlockhq/airlock/internal/config"
)

// clusterNode is the daemon's part as a node of a cluster
// (docs/cluster.md): its name, which its session ids carry, and the
// registrar that keeps its lease.
type clusterNode struct {
	name string
	reg  *cluster.Registrar
	stop context.CancelFunc // ends the renewals: the node drains
	done chan struct{}      // closed once the node's work has ended
	wg   sync.WaitGroup
}

// setupCluster makes the daemon a node when the config has a cluster
// section: its name and advertised address from the config or the
// environment (a DaemonSet's downward API), and a client of the
// Kubernetes API (the pod's own unless the config names one).
func (d *Daemon) setupCluster() error {
	c := d.opts.Config.Cluster
	if !c.Enabled || d.opts.Embedded {
		return nil
	}
	name := c.Node
	if name == "" {
		name = os.Getenv("AIRLOCK_NODE_NAME")
	}
	if !config.ValidNodeName(name) {
		return fmt.Errorf("cluster: the node's name %q (cluster.node, else $AIRLOCK_NODE_NAME) is not a DNS label: lower-case letters, digits and '-'", name)
	}
	adv := c.Advertise
	if adv == "" {
		adv = os.Getenv("AIRLOCK_NODE_ADVERTISE")
	}
	if tcp := d.opts.Config.Server.TCP; adv == "" && !tcp.Addr().IsUnspecified() {
		adv = "http://" + tcp.String()
	}
	if err := config.CheckAdvertise(adv); err != nil {
		return fmt.Errorf("cluster: the node's address %q (cluster.advertise, else $AIRLOCK_NODE_ADVERTISE, else server.tcp): %w", adv, err)
	}
	client, err := cluster.KubeClient(c.Kubernetes)
	if err != nil {
		return err
	}
	// The E2B API, when served, is at the advertised host on its own
	// port.
	e2bURL := ""
	if e2b := d.opts.Config.Server.E2B; e2b.IsValid() {
		u, _ := url.Parse(adv)
		e2bURL = u.Scheme + "://" + net.JoinHostPort(u.Hostname(), strconv.Itoa(int(e2b.Port())))
	}
	d.SetName(name)
	d.cluster = &clusterNode{name: name, done: make(chan struct{}),
		reg: &cluster.Registrar{Kube: client, Node: name, Endpoint: adv, E2B: e2bURL, Stats: d.clusterStats, Logger: d.opts.Logger}}
	return nil
}

// joinCluster publishes the node's lease and keeps it; an error when the
// first publication fails.
func (d *Daemon) joinCluster() error {
	cn := d.cluster
	if cn == nil {
		return nil
	}
	ctx, stop := context.WithCancel(context.Background())
	cn.stop = stop
	started := make(chan error, 1)
	cn.wg.Add(1)
	go func() {
		defer cn.wg.Done()
		cn.reg.Run(ctx, started, cn.done)
	}()
	if err := <-started; err != nil {
		return fmt.Errorf("cluster: registering node %s: %w", cn.name, err)
	}
	d.opts.Logger.Info("cluster: registered", "node", cn.name, "endpoint", cn.reg.Endpoint, "namespace", cn.reg.Kube.Namespace())
	return nil
}

// drainCluster marks the node draining (shutdown has begun); leaveCluster
// deletes its lease once its work has ended.
func (d *Daemon) drainCluster() {
	if cn := d.cluster; cn != nil && cn.stop != nil {
		cn.stop()
	}
}

func (d *Daemon) leaveCluster() {
	if cn := d.cluster; cn != nil && cn.stop != nil {
		close(cn.done)
		cn.wg.Wait()
	}
}

// clusterStats is what the node publishes in its lease: the tools it has
// now (a reload adds and removes them; the config it started with named
// a removed tool's pool, which is nil, and the lease's publisher
// panicked on it).
func (d *Daemon) clusterStats() cluster.Stats {
	st := cluster.Stats{Tools: map[string]cluster.ToolStats{}}
	for _, name := range d.Tools().Order {
		if ps, ok := d.PoolStats(name); ok {
			st.Tools[name] = cluster.ToolStats{Warm: ps.Warm, Idle: ps.Idle}
		}
	}
	st.Running = d.Running()
	st.Sessions = d.Sessions()
	st.Sandboxes = d.Runtime().Usage().Sandboxes
	st.Capacity = d.Runtime().Budget().Sandboxes
	return st
}
