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
	"path/filepath"
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
// within its grace while the front sends new runs to another node, and
// the DaemonSet's replacement registers and serves, with nothing of its
// predecessor's left; and a daemon killed outright is started again,
// with nothing of it left and its open session closed in the audit log.
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
		// drains within --grace (45 s) and the pod's 60 s. Meanwhile a
		// second node, outside the cluster's pods (an airlock serve on the
		// host, with the node service account's token), takes the new
		// runs: the front routes around the draining one.
		other := c.hostNode(t, token)
		// The run in flight goes to the node pod itself (its own API, at
		// the address its lease names), so that it is the one drained.
		// It lasts 30 s, well within the grace: a loaded kubelet once
		// took 9 s to signal the pod, and a 10 s run left the lease
		// saying draining for 2 s only, between two of the test's looks.
		direct := client.NewTCP(net.JoinHostPort(node.Status.PodIP, "7400"), token)
		done := make(chan error, 1)
		go func() {
			r, err := direct.Run(ctx, api.RunRequest{Tool: "sh", Argv: []string{"sh", "-c", "sleep 30; echo finished"}})
			if err == nil && string(r.Stdout) != "finished\n" {
				err = fmt.Errorf("%+v", r)
			}
			done <- err
		}()
		c.wait("the run to start", time.Minute, func() error {
			a, err := direct.PS(ctx)
			if err == nil && len(a.Runs) == 0 {
				err = errors.New("no run in flight yet")
			}
			return err
		})
		start := time.Now()
		if code, err := c.evict(node.Metadata.Name); err != nil {
			t.Fatalf("evicting the node pod (no budget covers it): %d %v", code, err)
		}
		// The node's lease says it is draining as soon as the kubelet has
		// signalled it; a moment later (the fronts' watch) every new run
		// goes to the other node, and succeeds.
		c.wait("the node pod's lease to say draining", time.Minute, func() error {
			var l struct {
				Metadata struct{ Annotations map[string]string }
			}
			if err := c.get("/apis/coordination.k8s.io/v1/namespaces/airlock/leases/airlock-node-"+node.Spec.NodeName, &l); err != nil {
				return err
			}
			if !strings.Contains(l.Metadata.Annotations["airlock.dev/stats"], `"draining":true`) {
				return fmt.Errorf("stats %s", l.Metadata.Annotations["airlock.dev/stats"])
			}
			return nil
		})
		t.Logf("the lease said draining %.1fs after the eviction", time.Since(start).Seconds())
		time.Sleep(time.Second)
		var routed int
		for end := time.Now().Add(3 * time.Second); time.Now().Before(end); routed++ {
			if n := c.runOn(t, svc.Spec.ClusterIP, token); n != other {
				t.Errorf("a run %.1fs after the eviction went to node %q, not %s", time.Since(start).Seconds(), n, other)
				break
			}
		}
		t.Logf("%d runs went to %s while the node pod drained", routed, other)
		if err := <-done; err != nil {
			t.Errorf("the run in flight at the eviction: %v", err)
		}
		old := node
		node = c.replacement(old)
		t.Logf("drained and replaced in %.0fs", time.Since(start).Seconds())
		// The second node goes (draining, its lease deleted): the rest of
		// the test has the node pod alone again.
		c.sh("systemctl stop airlock-" + other)
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

	t.Run("daemon killed", func(t *testing.T) {
		// The node's daemon dies at once (SIGKILL, as the OOM killer or a
		// crash would end it) with a session open: its sandboxes go with
		// its container, the kubelet starts the container again, and the
		// new daemon closes in the audit log (a hostPath) the session its
		// predecessor could not record the end of.
		_, err := front.CreateSession(ctx, api.SessionRequest{Tool: "sh"})
		must(t, err)
		podSlice := "kubepods-burstable-pod" + strings.ReplaceAll(node.Metadata.UID, "-", "_") + ".slice"
		daemon, scope := "", ""
		for pid, exe := range procs(t) {
			cg, _ := os.ReadFile("/proc/" + pid + "/cgroup")
			if filepath.Base(exe) == "airlockd" && strings.Contains(string(cg), "/"+podSlice+"/") {
				daemon, scope = pid, filepath.Dir(strings.TrimSpace(strings.TrimPrefix(string(cg), "0::")))
			}
		}
		if daemon == "" {
			t.Fatalf("no airlockd in the node pod's cgroups (%s)", podSlice)
		}
		c.sh("kill -KILL " + daemon)
		c.wait("the node pod's container to be started again and Ready", 3*time.Minute, func() error {
			var p struct {
				Status struct {
					Conditions        []condition
					ContainerStatuses []struct{ RestartCount int }
				}
			}
			if err := c.get("/api/v1/namespaces/airlock/pods/"+node.Metadata.Name, &p); err != nil {
				return err
			}
			if len(p.Status.ContainerStatuses) != 1 || p.Status.ContainerStatuses[0].RestartCount < 1 {
				return fmt.Errorf("not restarted yet: %+v", p.Status.ContainerStatuses)
			}
			return ready(p.Status.Conditions)
		})
		if _, err := os.Stat("/sys/fs/cgroup" + scope); err == nil {
			t.Errorf("the killed container's cgroup %s is still there", scope)
		}
		for pid, cg := range sandboxInits(t) {
			if strings.HasPrefix(cg, scope+"/") {
				t.Errorf("sandbox init %s of the killed daemon is left, in %s", pid, cg)
			}
		}
		c.checkLease(t, node)
		log, err := os.ReadFile(filepath.Join("/var/log/pods", "airlock_"+node.Metadata.Name+"_"+node.Metadata.UID, "airlock", "1.log"))
		if err != nil || !bytes.Contains(log, []byte("closed its open runs and sessions in the audit log")) {
			t.Errorf("the new daemon did not close its predecessor's open session in the audit log: %v\n%s", err, log)
		}
		c.wait("a run through the front after the kill", 2*time.Minute, func() error {
			_, err := front.Run(ctx, api.RunRequest{Tool: "sh", Argv: []string{"true"}})
			return err
		})
	})
}

// callClient is what the test calls the front's Service with: a front
// that stops answering fails the call, not the whole test's timeout.
var callClient = &http.Client{Timeout: time.Minute}

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

// hostNode starts a second airlock node on the host, outside the pods:
// airlock serve with the node's service account, advertised at the
// node's address, until the test ends. It returns its name once the
// front places runs on it.
func (c *nodeCluster) hostNode(t *testing.T, token string) string {
	t.Helper()
	const name = "host-node"
	dir := filepath.Join(c.dir, name)
	must(t, os.MkdirAll(dir, 0o700))
	c.write(filepath.Join(dir, "agents"), token)
	c.write(filepath.Join(dir, "sa.token"), c.cp.Tokens[nodeSA.Name])
	c.write(filepath.Join(dir, "airlock.yaml"), fmt.Sprintf(`server:
  tcp: %[1]s:7410
  tokens: [{name: agents, secret: agents, tools: ['*']}]
secrets:
  agents: {file: %[2]s/agents}
tools:
  sh: {pool: {warm: 1}, limits: {memory: 512MiB, time: 5m}}
cluster:
  node: %[3]s
  advertise: http://%[1]s:7410
  kubernetes: {server: %[4]q, token_file: %[2]s/sa.token, ca_file: %[5]q, namespace: airlock}
`, nodeIP, dir, name, c.cp.URL, filepath.Join(c.dir, "certs/apiserver.crt")))
	c.unit("airlock-"+name, filepath.Join(os.Getenv("AIRLOCK_TEST_SYSTEMD_SRC"), "bin/airlock"), "-p", "Delegate=yes", "serve",
		"--config", filepath.Join(dir, "airlock.yaml"), "--state-dir", "/run/airlock-"+name, "--cgroup-parent", "/airlock-"+name,
		"--socket", "/run/airlock-"+name+"/airlock.sock", "--audit", filepath.Join(dir, "audit.db"))
	c.wait("the front to place a run on "+name, 2*time.Minute, func() error {
		for range 10 {
			if n := c.runOn(t, "", token); n == name {
				return nil
			}
		}
		return fmt.Errorf("10 runs went elsewhere")
	})
	return name
}

// runOn runs true through the front's Service (its ClusterIP, or looked
// up when "") and returns the node that ran it (X-Airlock-Node), "" when
// the run failed.
func (c *nodeCluster) runOn(t *testing.T, ip, token string) string {
	t.Helper()
	if ip == "" {
		var svc struct{ Spec struct{ ClusterIP string } }
		must(t, c.get("/api/v1/namespaces/airlock/services/airlock", &svc))
		ip = svc.Spec.ClusterIP
	}
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, "http://"+ip+"/v1/runs", strings.NewReader(`{"tool":"sh","argv":["true"]}`))
	must(t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := callClient.Do(req)
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode != http.StatusOK || !bytes.Contains(b, []byte(`"outcome":"exited"`)) {
		return ""
	}
	return resp.Header.Get("X-Airlock-Node")
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
		resp, err := callClient.Do(req)
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

// procs maps every process's pid to its executable.
func procs(t *testing.T) map[string]string {
	t.Helper()
	ents, err := os.ReadDir("/proc")
	must(t, err)
	m := map[string]string{}
	for _, e := range ents {
		if exe, err := os.Readlink("/proc/" + e.Name() + "/exe"); err == nil {
			m[e.Name()] = exe
		}
	}
	return m
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
