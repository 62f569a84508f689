package kubernetes

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/client"
	"github.com/airlockhq/airlock/internal/e2b"
)

// TestOnKubelet runs the kustomization as shipped (the image set to the
// one built from this checkout, as kustomize edit set image would) on a
// one-node cluster with a real kubelet and container runtime, and checks
// what the manifests promise: the node pod becomes ready and keeps its
// Lease; the front's replicas become ready; runs, sessions and an E2B
// sandbox go through the front's Service; the sandboxes' cgroups sit
// below the node pod's, so the kubelet accounts for them; the front's
// PodDisruptionBudget holds; evicting the node pod drains it (a run in flight finishes)
// within its grace, and the DaemonSet's replacement registers and
// serves, with nothing of its predecessor's left, also after a kill
// without grace.
//
// It needs a host booted with systemd, cgroup v2 only, and the programs
// and images in $AIRLOCK_TEST_VM_FILES: scripts/test-cluster runs it in
// a guest of scripts/test-vm --systemd.
func TestOnKubelet(t *testing.T) {
	files := os.Getenv(FilesEnv)
	if files == "" {
		t.Skipf("runs a Kubernetes node on this host: only where %s is set (scripts/test-cluster)", FilesEnv)
	}
	if comm, _ := os.ReadFile("/proc/1/comm"); string(comm) != "systemd\n" {
		t.Fatalf("PID 1 is %q, not systemd", comm)
	}
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err != nil {
		t.Fatalf("not a cgroup-v2-only host: %v", err)
	}
	began := time.Now()
	c := startCluster(t, files)
	t.Logf("the node was Ready %.0fs after the test began", time.Since(began).Seconds())

	token := randomHex(16)
	if _, err := c.api(http.MethodPost, "/api/v1/namespaces/airlock/secrets", map[string]any{
		"apiVersion": "v1", "kind": "Secret", "metadata": map[string]any{"name": "airlock-tokens"},
		"stringData": map[string]string{"agents": token},
	}, nil); err != nil {
		t.Fatal(err)
	}
	var k struct {
		Resources []string `yaml:"resources"`
	}
	b, err := os.ReadFile("kustomization.yaml")
	must(t, err)
	must(t, yaml.Unmarshal(b, &k))
	for _, f := range k.Resources {
		m, err := os.ReadFile(f)
		must(t, err)
		m = bytes.ReplaceAll(m, []byte("image: airlock:latest"), []byte("image: "+image))
		if _, err := c.cp.Apply(t, "admin", m, false); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
	}

	var node pod
	c.wait("the node pod to be Ready", 5*time.Minute, func() error {
		ps, err := c.readyPods("node")
		if err != nil || len(ps) != 1 {
			return fmt.Errorf("%d ready node pods: %v", len(ps), err)
		}
		node = ps[0]
		return nil
	})
	t.Logf("node pod %s ready at %.0fs", node.Metadata.Name, time.Since(began).Seconds())
	c.checkLease(t, node)
	c.wait("the front's two replicas to be Ready", 3*time.Minute, func() error {
		ps, err := c.readyPods("front")
		if err != nil || len(ps) != 2 {
			return fmt.Errorf("%d ready front pods: %v", len(ps), err)
		}
		return nil
	})

	var svc struct{ Spec struct{ ClusterIP string } }
	must(t, c.get("/api/v1/namespaces/airlock/services/airlock", &svc))
	front := client.NewTCP(svc.Spec.ClusterIP+":80", token)
	ctx := t.Context()
	var res *apiResult
	c.wait("a run through the front's Service", 2*time.Minute, func() error {
		r, err := front.Run(ctx, api.RunRequest{Tool: "sh", Argv: []string{"sh", "-c", "echo via the front; cat /proc/self/cgroup"}})
		if err != nil {
			return err
		}
		res = &apiResult{string(r.Stdout), string(r.Outcome)}
		return nil
	})
	if !strings.HasPrefix(res.stdout, "via the front\n0::/") {
		t.Errorf("a run through the Service: %+v", res)
	}
	sess, err := front.CreateSession(ctx, api.SessionRequest{Tool: "sh"})
	must(t, err)
	if r, err := front.Exec(ctx, sess.ID, api.ExecRequest{Argv: []string{"sh", "-c", "echo kept > f; cat f"}}); err != nil || string(r.Stdout) != "kept\n" {
		t.Errorf("a session through the Service: %v %+v", err, r)
	}

	t.Run("E2B sandbox", func(t *testing.T) {
		c.e2bThroughFront(t, "http://"+net.JoinHostPort(svc.Spec.ClusterIP, "7401"), token)
	})

	// Every sandbox's init, seen from the host, is in a cgroup below the
	// node pod's: the kubelet's accounting covers them.
	podSlice := "kubepods-burstable-pod" + strings.ReplaceAll(node.Metadata.UID, "-", "_") + ".slice"
	inits := sandboxInits(t)
	if len(inits) == 0 {
		t.Fatal("no sandbox init on the host with a session open and pools warm")
	}
	for pid, cg := range inits {
		if !strings.Contains(cg, "/"+podSlice+"/") {
			t.Errorf("sandbox init %s is in cgroup %s, not below the node pod's %s", pid, cg, podSlice)
		}
	}

	t.Run("PodDisruptionBudget of the front", func(t *testing.T) {
		ps, err := c.readyPods("front")
		if err != nil || len(ps) != 2 {
			t.Fatalf("%d ready front pods: %v", len(ps), err)
		}
		c.waitBudget("airlock-front")
		if code, err := c.evict(ps[0].Metadata.Name); err != nil {
			t.Fatalf("evicting one of two fronts (minAvailable 1): %d %v", code, err)
		}
		if code, err := c.evict(ps[1].Metadata.Name); code != http.StatusTooManyRequests {
			t.Errorf("evicting the second front at once: %d %v, want 429 (the budget)", code, err)
		}
		c.wait("the front's two replicas to be Ready again", 3*time.Minute, func() error {
			ps, err := c.readyPods("front")
			if err != nil || len(ps) != 2 {
				return fmt.Errorf("%d ready front pods: %v", len(ps), err)
			}
			return nil
		})
	})

	t.Run("drain", func(t *testing.T) {
		// A run in flight when the eviction comes finishes: the node
		// drains within --grace (45 s) and the pod's 60 s.
		done := make(chan error, 1)
		go func() {
			r, err := front.Run(ctx, api.RunRequest{Tool: "sh", Argv: []string{"sh", "-c", "sleep 5; echo finished"}})
			if err == nil && string(r.Stdout) != "finished\n" {
				err = fmt.Errorf("%+v", r)
			}
			done <- err
		}()
		c.wait("the run to start", time.Minute, func() error {
			a, err := front.PS(ctx)
			if err == nil && len(a.Runs) == 0 {
				err = errors.New("no run in flight yet")
			}
			return err
		})
		start := time.Now()
		if code, err := c.evict(node.Metadata.Name); err != nil {
			t.Fatalf("evicting the node pod (no budget covers it): %d %v", code, err)
		}
		if err := <-done; err != nil {
			t.Errorf("the run in flight at the eviction: %v", err)
		}
		old := node
		node = c.replacement(old)
		t.Logf("drained and replaced in %.0fs", time.Since(start).Seconds())
		c.checkGone(t, old)
		c.checkLease(t, node)
		if _, err := front.Exec(ctx, sess.ID, api.ExecRequest{Argv: []string{"true"}}); err == nil {
			t.Errorf("the session of the drained node still runs commands")
		}
		c.wait("a run through the front on the new node", 2*time.Minute, func() error {
			r, err := front.Run(ctx, api.RunRequest{Tool: "sh", Argv: []string{"echo", "again"}})
			if err == nil && string(r.Stdout) != "again\n" {
				err = fmt.Errorf("%+v", r)
			}
			return err
		})
	})

	t.Run("killed without grace", func(t *testing.T) {
		_, err := front.CreateSession(ctx, api.SessionRequest{Tool: "sh"})
		must(t, err)
		old := node
		if _, err := c.api(http.MethodDelete, "/api/v1/namespaces/airlock/pods/"+old.Metadata.Name, map[string]any{"gracePeriodSeconds": 0}, nil); err != nil {
			t.Fatal(err)
		}
		node = c.replacement(old)
		c.checkGone(t, old)
		c.checkLease(t, node)
		c.wait("a run through the front after the kill", 2*time.Minute, func() error {
			_, err := front.Run(ctx, api.RunRequest{Tool: "sh", Argv: []string{"true"}})
			return err
		})
	})
}

type apiResult struct {
	stdout  string
	outcome string
}

// replacement waits for the DaemonSet's pod that replaces old to be
// Ready, and returns it.
func (c *nodeCluster) replacement(old pod) pod {
	c.t.Helper()
	var p pod
	c.wait("the DaemonSet's replacement to be Ready", 5*time.Minute, func() error {
		ps, err := c.readyPods("node")
		if err != nil || len(ps) != 1 || ps[0].Metadata.UID == old.Metadata.UID {
			return fmt.Errorf("%d ready node pods: %v", len(ps), err)
		}
		p = ps[0]
		return nil
	})
	return p
}

// waitBudget waits until the disruption controller has looked at the
// PodDisruptionBudget name and allows a disruption: before that the API
// server refuses every eviction it covers ("still being processed"), as
// a drain's retries would find.
func (c *nodeCluster) waitBudget(name string) {
	c.t.Helper()
	c.wait("PodDisruptionBudget "+name+" to allow a disruption", 2*time.Minute, func() error {
		var pdb struct {
			Metadata struct{ Generation int64 }
			Status   struct {
				ObservedGeneration int64
				DisruptionsAllowed int
			}
		}
		if err := c.get("/apis/policy/v1/namespaces/airlock/poddisruptionbudgets/"+name, &pdb); err != nil {
			return err
		}
		if pdb.Status.ObservedGeneration < pdb.Metadata.Generation || pdb.Status.DisruptionsAllowed < 1 {
			return fmt.Errorf("%+v", pdb)
		}
		return nil
	})
}

// e2bThroughFront makes an E2B sandbox through the front's E2B API at
// base, as E2B's SDKs call it: created with an API key, a command run in
// it through envd's process service (routed by the E2b-Sandbox-Id
// header, with the sandbox's access token), listed, and killed.
func (c *nodeCluster) e2bThroughFront(t *testing.T, base, key string) {
	do := func(method, path string, hdr map[string]string, body []byte) (int, []byte) {
		t.Helper()
		req, err := http.NewRequestWithContext(t.Context(), method, base+path, bytes.NewReader(body))
		must(t, err)
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		must(t, err)
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		return resp.StatusCode, b
	}
	apiKey := map[string]string{"X-API-KEY": key, "Content-Type": "application/json"}
	status, b := do(http.MethodPost, "/v2/sandboxes", apiKey, []byte(`{"templateID":"sh"}`))
	var sb e2b.Sandbox
	if status != http.StatusCreated || json.Unmarshal(b, &sb) != nil || sb.EnvdAccessToken == "" {
		t.Fatalf("create: %d %s", status, b)
	}
	cmd := e2b.AppendEnvelope(nil, 0, []byte(`{"process":{"cmd":"/bin/sh","args":["-c","echo through the front"]}}`))
	_, b = do(http.MethodPost, "/process.Process/Start", map[string]string{"E2b-Sandbox-Id": sb.SandboxID, "X-Access-Token": sb.EnvdAccessToken,
		"Content-Type": "application/connect+json", "Connect-Protocol-Version": "1"}, cmd)
	if want := base64.StdEncoding.EncodeToString([]byte("through the front\n")); !bytes.Contains(b, []byte(want)) {
		t.Errorf("a command in the E2B sandbox: %q, want its output %s", b, want)
	}
	if status, b := do(http.MethodGet, "/v2/sandboxes", apiKey, nil); status != http.StatusOK || !bytes.Contains(b, []byte(sb.SandboxID)) {
		t.Errorf("list: %d %s, want %s in it", status, b, sb.SandboxID)
	}
	if status, b := do(http.MethodDelete, "/sandboxes/"+sb.SandboxID, apiKey, nil); status != http.StatusNoContent {
		t.Errorf("kill: %d %s", status, b)
	}
}

// evict asks for a pod's eviction, as a drain does: the
// PodDisruptionBudgets decide.
func (c *nodeCluster) evict(name string) (int, error) {
	return c.api(http.MethodPost, "/api/v1/namespaces/airlock/pods/"+name+"/eviction", map[string]any{
		"apiVersion": "policy/v1", "kind": "Eviction", "metadata": map[string]any{"name": name, "namespace": "airlock"},
	}, nil)
}

// checkLease checks that the node pod's Lease is held and names the
// pod's address.
func (c *nodeCluster) checkLease(t *testing.T, node pod) {
	t.Helper()
	c.wait("the node's Lease to name "+node.Status.PodIP, time.Minute, func() error {
		var l struct {
			Metadata struct{ Annotations map[string]string }
		}
		if err := c.get("/apis/coordination.k8s.io/v1/namespaces/airlock/leases/airlock-node-"+node.Spec.NodeName, &l); err != nil {
			return err
		}
		if want := "http://" + node.Status.PodIP + ":7400"; l.Metadata.Annotations["airlock.dev/endpoint"] != want {
			return fmt.Errorf("its endpoint is %q, want %s", l.Metadata.Annotations["airlock.dev/endpoint"], want)
		}
		return nil
	})
}

// checkGone checks that nothing of a node pod is left on the host: no
// sandbox init in its cgroups, and its cgroup gone.
func (c *nodeCluster) checkGone(t *testing.T, old pod) {
	t.Helper()
	slice := "kubepods-burstable-pod" + strings.ReplaceAll(old.Metadata.UID, "-", "_") + ".slice"
	c.wait("the old node pod's cgroup to go", time.Minute, func() error {
		out, _ := exec.Command("find", "/sys/fs/cgroup/kubepods.slice", "-name", slice).Output()
		if len(bytes.TrimSpace(out)) > 0 {
			return fmt.Errorf("still there: %s", out)
		}
		return nil
	})
	for pid, cg := range sandboxInits(t) {
		if strings.Contains(cg, slice) {
			t.Errorf("sandbox init %s of the old node pod is left, in %s", pid, cg)
		}
	}
}

// sandboxInits maps each sandbox init on the host to its cgroup.
func sandboxInits(t *testing.T) map[string]string {
	t.Helper()
	ents, err := os.ReadDir("/proc")
	must(t, err)
	m := map[string]string{}
	for _, e := range ents {
		if comm, _ := os.ReadFile("/proc/" + e.Name() + "/comm"); string(comm) == "airlock-init\n" {
			cg, _ := os.ReadFile("/proc/" + e.Name() + "/cgroup")
			m[e.Name()] = strings.TrimSpace(strings.TrimPrefix(string(cg), "0::"))
		}
	}
	return m
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}
