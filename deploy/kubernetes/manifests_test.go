package kubernetes

import (
	"context"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/airlockhq/airlock/internal/cluster"
	"github.com/airlockhq/airlock/internal/config"
	"github.com/airlockhq/airlock/internal/kube"
	"github.com/airlockhq/airlock/internal/kube/kubetest"
)

var (
	nodeSA  = kubetest.ServiceAccount("airlock-node")
	frontSA = kubetest.ServiceAccount("airlock-front")
)

// TestManifests applies every file of the kustomization to a real API
// server with server-side apply, so that a schema error fails; checks
// that the ConfigMap's config is one airlock accepts; and tries the
// RBAC's least privilege with the service accounts' own tokens: a node
// keeps its lease and nothing else, a front lists and watches leases
// and nothing else.
func TestManifests(t *testing.T) {
	cp := kubetest.Start(t, nodeSA, frontSA)
	var k struct {
		Resources []string `yaml:"resources"`
	}
	b, err := os.ReadFile("kustomization.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, &k); err != nil || len(k.Resources) == 0 {
		t.Fatalf("kustomization.yaml: %v %+v", err, k)
	}
	var all []string
	for _, f := range k.Resources {
		m, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		objs, err := cp.Apply(t, "admin", m, false)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		all = append(all, objs...)
	}
	for _, want := range []string{"Namespace/airlock", "ServiceAccount/airlock-node", "ServiceAccount/airlock-front", "Role/airlock-node", "RoleBinding/airlock-node",
		"Role/airlock-front", "RoleBinding/airlock-front", "ConfigMap/airlock-config", "DaemonSet/airlock-node", "Deployment/airlock-front",
		"Service/airlock", "PodDisruptionBudget/airlock-front"} {
		if !slices.Contains(all, want) {
			t.Errorf("the kustomization has no %s (it has %v)", want, all)
		}
	}

	// A schema error fails: the checks above can fail.
	ds, _ := os.ReadFile("daemonset.yaml")
	bad := strings.Replace(string(ds), "  updateStrategy:", "  updateStrategi:", 1)
	if _, err := cp.Apply(t, "admin", []byte(bad), true); err == nil || !strings.Contains(err.Error(), "updateStrategi") {
		t.Errorf("a DaemonSet with an unknown field: %v, want it refused", err)
	}

	// The config the pods read.
	var cm struct {
		Data map[string]string `yaml:"data"`
	}
	b, _ = os.ReadFile("configmap.yaml")
	if err := yaml.Unmarshal(b, &cm); err != nil {
		t.Fatal(err)
	}
	c, err := config.Parse("configmap.yaml", []byte(cm.Data["airlock.yaml"]))
	if err != nil {
		t.Fatalf("the ConfigMap's airlock.yaml: %v", err)
	}
	if !c.Cluster.Enabled || !c.Server.TCP.IsValid() {
		t.Errorf("the ConfigMap's config is not a node's: %+v", c.Cluster)
	}

	// Least privilege, as the pods' own service accounts.
	node, front := cp.Client(t, nodeSA.Name), cp.Client(t, frontSA.Name)
	ctx := context.Background()
	r := &cluster.Registrar{Kube: node, Node: "node-x", Endpoint: "http://10.0.0.9:7400", Stats: func() cluster.Stats { return cluster.Stats{} }}
	started, done := make(chan error, 1), make(chan struct{})
	rctx, stop := context.WithCancel(ctx)
	ran := make(chan struct{})
	go func() { defer close(ran); r.Run(rctx, started, done) }()
	if err := <-started; err != nil {
		t.Fatalf("a node registering with its service account: %v", err)
	}
	leases, rv, err := front.ListLeases(ctx, cluster.Selector)
	if err != nil || len(leases) != 1 {
		t.Fatalf("a front listing leases with its service account: %v %v", leases, err)
	}
	wctx, wcancel := context.WithTimeout(ctx, time.Second)
	if err := front.WatchLeases(wctx, cluster.Selector, rv, func(kube.Event) {}); err != nil && wctx.Err() == nil {
		t.Errorf("a front watching leases: %v", err)
	}
	wcancel()
	stop()
	close(done)
	<-ran
	forbidden := func(what string, err error) {
		t.Helper()
		if err == nil || !strings.Contains(err.Error(), "403") {
			t.Errorf("%s: %v, want 403 forbidden", what, err)
		}
	}
	_, err = front.CreateLease(ctx, &kube.Lease{Metadata: kube.ObjectMeta{Name: "airlock-node-forged"}})
	forbidden("a front creating a lease", err)
	forbidden("a front deleting a lease", front.DeleteLease(ctx, "airlock-node-node-x"))
	_, _, err = node.ListLeases(ctx, "")
	forbidden("a node listing leases", err)
	_, err = cp.Apply(t, nodeSA.Name, []byte("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x, namespace: airlock}\n"), true)
	forbidden("a node writing a ConfigMap", err)
	for _, user := range []string{nodeSA.Name, frontSA.Name} {
		kc, err := kube.New(kube.Config{Server: cp.URL, Token: cp.Tokens[user], CA: cp.CA, Namespace: "kube-system"})
		if err != nil {
			t.Fatal(err)
		}
		_, err = kc.GetLease(ctx, "kube-controller-manager")
		forbidden(user+" reading a lease of another namespace", err)
	}
}

// TestNoBudgetOverDaemonSet keeps PodDisruptionBudgets off the
// DaemonSet's pods. The disruption controller cannot compute a budget
// over pods whose controller has no scale subresource ("daemonsets.apps
// does not implement the scale subresource", seen on a real kubelet by
// TestOnKubelet), so such a budget never allows a disruption and every
// eviction of a node pod is refused; a DaemonSet's rollouts are paced by
// its own updateStrategy instead, and kubectl drain leaves its pods be.
func TestNoBudgetOverDaemonSet(t *testing.T) {
	type object struct {
		Kind string `yaml:"kind"`
		Spec struct {
			Selector struct {
				MatchLabels map[string]string `yaml:"matchLabels"`
			} `yaml:"selector"`
			Template struct {
				Metadata struct {
					Labels map[string]string `yaml:"labels"`
				} `yaml:"metadata"`
			} `yaml:"template"`
		} `yaml:"spec"`
	}
	var k struct {
		Resources []string `yaml:"resources"`
	}
	kb, err := os.ReadFile("kustomization.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(kb, &k); err != nil {
		t.Fatal(err)
	}
	var daemonPods []map[string]string
	var budgets []map[string]string
	for _, f := range k.Resources {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		dec := yaml.NewDecoder(strings.NewReader(string(b)))
		for {
			var o object
			if err := dec.Decode(&o); err != nil {
				break
			}
			switch o.Kind {
			case "DaemonSet":
				daemonPods = append(daemonPods, o.Spec.Template.Metadata.Labels)
			case "PodDisruptionBudget":
				budgets = append(budgets, o.Spec.Selector.MatchLabels)
			}
		}
	}
	if len(daemonPods) == 0 || len(budgets) == 0 {
		t.Fatalf("found %d DaemonSets and %d budgets, want some of each", len(daemonPods), len(budgets))
	}
	for _, sel := range budgets {
		for _, labels := range daemonPods {
			matches := true
			for k, v := range sel {
				if labels[k] != v {
					matches = false
				}
			}
			if matches {
				t.Errorf("a PodDisruptionBudget (selector %v) covers the DaemonSet's pods (%v)", sel, labels)
			}
		}
	}
}
