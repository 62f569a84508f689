// Package cluster joins airlock nodes into a cluster through the
// Kubernetes API (docs/cluster.md): each node keeps a Lease with its
// address and its warm capacity; a front watches the leases and places
// work on the node most likely to serve it warm. The API server is never
// on a call's path: a node renews its lease every few seconds, and a
// front reads the leases from its watch.
package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/airlockhq/airlock/internal/config"
	"github.com/airlockhq/airlock/internal/kube"
)

// Labels and annotations of a node's lease.
const (
	LabelName      = "app.kubernetes.io/name"
	LabelComponent = "app.kubernetes.io/component"
	// Selector selects the nodes' leases.
	Selector = LabelName + "=airlock," + LabelComponent + "=node"
	// AnnotationEndpoint is the node's TCP API, as fronts reach it.
	AnnotationEndpoint = "airlock.dev/endpoint"
	// AnnotationE2B is the node's E2B-compatible API, when it serves one.
	AnnotationE2B = "airlock.dev/e2b-endpoint"
	// AnnotationStats is the node's Stats, in JSON.
	AnnotationStats = "airlock.dev/stats"
)

// KubeClient is a client of the API server k names, or of the pod's own
// when k is zero.
func KubeClient(k config.Kubernetes) (*kube.Client, error) {
	var kc kube.Config
	if k.Server != "" {
		kc = kube.Config{Server: k.Server, TokenFile: k.TokenFile, Namespace: k.Namespace}
		if k.CAFile != "" {
			ca, err := os.ReadFile(k.CAFile)
			if err != nil {
				return nil, fmt.Errorf("cluster.kubernetes.ca_file: %w", err)
			}
			kc.CA = ca
		}
	} else {
		var err error
		if kc, err = kube.InCluster(); err != nil {
			return nil, fmt.Errorf("cluster: %w (or name an API server in cluster.kubernetes)", err)
		}
	}
	c, err := kube.New(kc)
	if err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	return c, nil
}

// LeaseName is the name of node's lease.
func LeaseName(node string) string { return "airlock-node-" + node }

// Stats is what a node says of its load and warm capacity.
type Stats struct {
	// Tools are the node's tools and their pools.
	Tools map[string]ToolStats `json:"tools"`
	// Running counts runs and execs in flight; Sessions the sessions
	// open.
	Running  int `json:"running"`
	Sessions int `json:"sessions"`
	// Sandboxes is how many are live, of Capacity.
	Sandboxes int `json:"sandboxes"`
	Capacity  int `json:"capacity"`
	// Draining: the node takes nothing new (it is shutting down).
	Draining bool `json:"draining,omitempty"`
}

// ToolStats is one tool's pool on a node.
type ToolStats struct {
	Warm int `json:"warm"` // the pool's target
	Idle int `json:"idle"` // ready now
}

// DefaultLease is a node lease's duration; it is renewed every third of
// it.
const DefaultLease = 9 * time.Second

// Registrar keeps a node's lease.
type Registrar struct {
	Kube     *kube.Client
	Node     string
	Endpoint string
	// E2B is the node's E2B-compatible API ("" when it serves none).
	E2B string
	// Lease is the lease's duration (DefaultLease when 0).
	Lease time.Duration
	// Stats is read at each renewal.
	Stats  func() Stats
	Logger *slog.Logger
}

// Run renews the lease until ctx ends, then publishes the node as
// draining and, once drained (done closed, or at once when done is nil),
// deletes the lease. It returns the first renewal's error: a node that
// cannot register does not start.
func (r *Registrar) Run(ctx context.Context, started chan<- error, done <-chan struct{}) {
	every := r.lease() / 3
	err := r.publish(ctx, false)
	started <- err
	if err != nil {
		return
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			r.leave(done)
			return
		case <-t.C:
			if err := r.publish(ctx, false); err != nil && ctx.Err() == nil {
				r.Logger.Warn("cluster: renewing the node's lease", "err", err)
			}
		}
	}
}

func (r *Registrar) lease() time.Duration {
	if r.Lease <= 0 {
		return DefaultLease
	}
	return r.Lease
}

// leave marks the node draining while its work ends, then deletes its
// lease.
func (r *Registrar) leave(done <-chan struct{}) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	err := r.publish(ctx, true)
	cancel()
	if err != nil {
		r.Logger.Warn("cluster: marking the node draining", "err", err)
	}
	if done != nil {
		t := time.NewTicker(r.lease() / 3)
		defer t.Stop()
	wait:
		for {
			select {
			case <-done:
				break wait
			case <-t.C:
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				_ = r.publish(ctx, true)
				cancel()
			}
		}
	}
	ctx, cancel = context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := r.Kube.DeleteLease(ctx, LeaseName(r.Node)); err != nil && !errors.Is(err, kube.ErrNotFound) {
		r.Logger.Warn("cluster: deleting the node's lease", "err", err)
	}
}

// publish writes the lease: created if missing, else updated from the
// version just read (a conflict is retried once).
func (r *Registrar) publish(ctx context.Context, draining bool) error {
	st := r.Stats()
	st.Draining = st.Draining || draining
	js, err := json.Marshal(st)
	if err != nil {
		return err
	}
	now := kube.MicroTime{Time: time.Now()}
	for try := 0; ; try++ {
		l, err := r.Kube.GetLease(ctx, LeaseName(r.Node))
		if errors.Is(err, kube.ErrNotFound) {
			l = &kube.Lease{Metadata: kube.ObjectMeta{Name: LeaseName(r.Node)}}
			l.Spec.AcquireTime = &now
		} else if err != nil {
			return err
		}
		l.Metadata.Labels = map[string]string{LabelName: "airlock", LabelComponent: "node"}
		if l.Metadata.Annotations == nil {
			l.Metadata.Annotations = map[string]string{}
		}
		l.Metadata.Annotations[AnnotationEndpoint] = r.Endpoint
		if r.E2B != "" {
			l.Metadata.Annotations[AnnotationE2B] = r.E2B
		} else {
			delete(l.Metadata.Annotations, AnnotationE2B)
		}
		l.Metadata.Annotations[AnnotationStats] = string(js)
		l.Spec.HolderIdentity = r.Node
		l.Spec.LeaseDurationSeconds = int32(r.lease() / time.Second)
		l.Spec.RenewTime = &now
		if l.Metadata.ResourceVersion == "" {
			_, err = r.Kube.CreateLease(ctx, l)
		} else {
			_, err = r.Kube.UpdateLease(ctx, l)
		}
		if errors.Is(err, kube.ErrConflict) && try == 0 {
			continue
		}
		return err
	}
}
