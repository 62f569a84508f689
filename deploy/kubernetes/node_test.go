package kubernetes

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/kube/kubetest"
)

// FilesEnv names the directory the cluster test takes its programs and
// images from (scripts/test-cluster assembles it; the guest of
// scripts/test-vm --systemd has it as /vm/files): bin/ with Kubernetes'
// programs, containerd's and ctr, airlock.tar (airlock's image, as
// scripts/container-image builds it, named airlock:test) and pause.tar.
const FilesEnv = "AIRLOCK_TEST_VM_FILES"

// The node's network: a dummy device with the node's address (the
// guest has no other), pods on a bridge, Services on their own range.
const (
	nodeIP      = "192.168.250.1"
	podCIDR     = "10.244.0.0/24"
	clusterCIDR = "10.244.0.0/16"
	apiPort     = "6443"
	// image is what the kustomization's `images` would set airlock:latest
	// to (kustomize edit set image airlock=airlock:test); a tag other
	// than latest, so that the kubelet uses the imported image and pulls
	// nothing.
	image      = "airlock:test"
	pauseImage = "localhost/airlock-test/pause:1"
)

// nodeCluster is a one-node Kubernetes cluster: etcd and kube-apiserver
// (kubetest), kube-controller-manager, kube-scheduler, containerd with
// runc, the kubelet and kube-proxy, each but the first two a systemd
// service of its own (systemd-run), as a node's are.
type nodeCluster struct {
	t     *testing.T
	cp    *kubetest.ControlPlane
	files string
	dir   string
	http  *http.Client
	units []string
}

func startCluster(t *testing.T, files string) *nodeCluster {
	c := &nodeCluster{t: t, files: files, dir: "/var/lib/airlock-cluster-test"}
	must(t, os.MkdirAll(c.dir, 0o700))
	// The node's default route is its device, as on any node: without a
	// route the host's own connections to a Service's address fail
	// before kube-proxy's rules can rewrite them.
	c.sh("ip link add airlock-node type dummy && ip addr add " + nodeIP + "/24 dev airlock-node && ip link set airlock-node up && ip route add default dev airlock-node")
	// Bridged pod traffic through iptables (kube-proxy's Services), and
	// forwarding between the bridge and the node; connection tracking,
	// whose settings kube-proxy writes first thing.
	c.sh("modprobe br_netfilter && modprobe overlay && modprobe nf_conntrack && sysctl -qw net.ipv4.ip_forward=1 net.bridge.bridge-nf-call-iptables=1")
	c.sh("test -s /etc/resolv.conf || echo 'nameserver " + nodeIP + "' >/etc/resolv.conf")
	c.sh("install -m 0755 " + files + "/bin/* /usr/local/bin/")

	cp, stop, err := kubetest.RunWith("/usr/local/bin/kube-apiserver", c.dir, kubetest.Options{Advertise: nodeIP, Port: apiPort}, nodeSA)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	c.cp = cp
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(cp.CA)
	c.http = &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	kubeconfig := filepath.Join(c.dir, "admin.kubeconfig")
	c.write(kubeconfig, fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: test, cluster: {server: %q, certificate-authority: %q}}]
users: [{name: admin, user: {token: %q}}]
contexts: [{name: test, context: {cluster: test, user: admin}}]
current-context: test
`, cp.URL, filepath.Join(c.dir, "certs/apiserver.crt"), cp.Tokens["admin"]))

	c.unit("kube-controller-manager", "/usr/local/bin/kube-controller-manager", "--kubeconfig="+kubeconfig,
		"--service-account-private-key-file="+filepath.Join(c.dir, "sa.key"), "--root-ca-file="+filepath.Join(c.dir, "certs/apiserver.crt"),
		"--use-service-account-credentials=false", "--leader-elect=false", "--cluster-cidr="+clusterCIDR, "--bind-address=127.0.0.1")
	c.unit("kube-scheduler", "/usr/local/bin/kube-scheduler", "--kubeconfig="+kubeconfig, "--leader-elect=false", "--bind-address=127.0.0.1")

	c.write("/etc/containerd/config.toml", `version = 3
root = "/var/lib/containerd"
state = "/run/containerd"
[grpc]
  address = "/run/containerd/containerd.sock"
[plugins.'io.containerd.cri.v1.images'.pinned_images]
  sandbox = "`+pauseImage+`"
[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"
[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
  SystemdCgroup = true
  BinaryName = "/usr/sbin/runc"
[plugins.'io.containerd.cri.v1.runtime'.cni]
  bin_dirs = ["/usr/lib/cni"]
  conf_dir = "/etc/cni/net.d"
`)
	c.write("/etc/cni/net.d/10-airlock-test.conflist", `{"cniVersion": "1.0.0", "name": "airlock-test", "plugins": [
  {"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": true, "hairpinMode": true,
   "ipam": {"type": "host-local", "ranges": [[{"subnet": "`+podCIDR+`"}]], "routes": [{"dst": "0.0.0.0/0"}]}},
  {"type": "portmap", "capabilities": {"portMappings": true}}]}
`)
	// containerd's own unit's settings: its shims outlive a restart of it
	// (KillMode=process), and it places containers in the cgroups the
	// kubelet names (Delegate=yes).
	c.unit("containerd", "/usr/local/bin/containerd", "-p", "Delegate=yes", "-p", "KillMode=process", "-p", "LimitNOFILE=1048576")
	c.wait("containerd's socket", time.Minute, func() error {
		return exec.Command("ctr", "version").Run()
	})
	for _, img := range []string{"pause.tar", "airlock.tar"} {
		c.sh("ctr -n k8s.io images import " + filepath.Join(files, img))
	}

	c.write("/var/lib/kubelet/config.yaml", `apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupDriver: systemd
containerRuntimeEndpoint: unix:///run/containerd/containerd.sock
authentication: {anonymous: {enabled: true}, webhook: {enabled: false}}
authorization: {mode: AlwaysAllow}
failSwapOn: false
resolvConf: /etc/resolv.conf
podCIDR: `+podCIDR+`
# The guest's disk is small and thrown away: no evictions for it.
evictionHard: {memory.available: 100Mi, nodefs.available: 1%, imagefs.available: 1%, nodefs.inodesFree: 1%}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
`)
	c.unit("kubelet", "/usr/local/bin/kubelet", "--config=/var/lib/kubelet/config.yaml", "--kubeconfig="+kubeconfig, "--node-ip="+nodeIP)
	c.unit("kube-proxy", "/usr/local/bin/kube-proxy", "--kubeconfig="+kubeconfig, "--cluster-cidr="+clusterCIDR,
		"--proxy-mode=iptables", "--hostname-override="+hostname(t))
	c.wait("the node to be Ready", 3*time.Minute, func() error {
		var node struct {
			Status struct{ Conditions []condition }
		}
		if err := c.get("/api/v1/nodes/"+hostname(t), &node); err != nil {
			return err
		}
		return ready(node.Status.Conditions)
	})
	return c
}

type condition struct{ Type, Status, Reason, Message string }

func ready(cs []condition) error {
	for _, c := range cs {
		if c.Type == "Ready" {
			if c.Status == "True" {
				return nil
			}
			return fmt.Errorf("not ready: %s %s", c.Reason, c.Message)
		}
	}
	return fmt.Errorf("no Ready condition yet")
}

func hostname(t *testing.T) string {
	h, err := os.Hostname()
	must(t, err)
	return h
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// unit runs a program as a transient systemd service; props are
// systemd-run's flags (-p PROPERTY=VALUE), put before the command.
func (c *nodeCluster) unit(name, bin string, args ...string) {
	c.t.Helper()
	var props []string
	for len(args) >= 2 && args[0] == "-p" {
		props = append(props, args[0], args[1])
		args = args[2:]
	}
	// Restarted when they fail, as their packaged units are.
	cmd := append([]string{"--unit=" + name, "--collect", "--quiet", "-p", "Restart=on-failure", "-p", "RestartSec=2"}, props...)
	cmd = append(append(cmd, "--", bin), args...)
	if out, err := exec.Command("systemd-run", cmd...).CombinedOutput(); err != nil {
		c.t.Fatalf("systemd-run %s: %v\n%s", name, err, out)
	}
	c.units = append(c.units, name)
	c.t.Cleanup(func() { exec.Command("systemctl", "stop", name).Run() })
}

func (c *nodeCluster) sh(script string) string {
	c.t.Helper()
	out, err := exec.Command("sh", "-ec", script).CombinedOutput()
	if err != nil {
		c.t.Fatalf("%s: %v\n%s", script, err, out)
	}
	return string(out)
}

func (c *nodeCluster) write(p, s string) {
	c.t.Helper()
	must(c.t, os.MkdirAll(filepath.Dir(p), 0o755))
	must(c.t, os.WriteFile(p, []byte(s), 0o600))
}

// wait polls f until it succeeds, and fails the test with f's last error
// and the units' logs when it does not within d.
func (c *nodeCluster) wait(what string, d time.Duration, f func() error) {
	c.t.Helper()
	deadline := time.Now().Add(d)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("waited %v for %s: %v\n%s", d, what, err, c.diagnose())
		}
		time.Sleep(time.Second)
	}
}

// diagnose is what a failure shows: the pods, and the end of every
// unit's log.
func (c *nodeCluster) diagnose() string {
	var b strings.Builder
	var pods podList
	if err := c.get("/api/v1/namespaces/airlock/pods", &pods); err == nil {
		for _, p := range pods.Items {
			js, _ := json.Marshal(p.Status)
			fmt.Fprintf(&b, "pod %s: %s\n", p.Metadata.Name, js)
		}
	}
	for _, u := range c.units {
		out, _ := exec.Command("journalctl", "--no-pager", "-o", "cat", "-n", "25", "-u", u).CombinedOutput()
		fmt.Fprintf(&b, "--- %s:\n%s", u, out)
	}
	logs, _ := exec.Command("sh", "-c", "tail -n 40 /var/log/pods/airlock_*/*/*.log 2>/dev/null").CombinedOutput()
	fmt.Fprintf(&b, "--- the pods' logs:\n%s", logs)
	return b.String()
}

// api calls the API server as its admin.
func (c *nodeCluster) api(method, path string, body any, out any) (int, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, err
		}
		rd = bytes.NewReader(b)
	}
	ctx, cancel := context.WithTimeout(c.t.Context(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, c.cp.URL+path, rd)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+c.cp.Tokens["admin"])
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if err != nil {
		return resp.StatusCode, err
	}
	if resp.StatusCode >= 300 {
		return resp.StatusCode, fmt.Errorf("%s %s: %s: %s", method, path, resp.Status, b)
	}
	if out != nil {
		return resp.StatusCode, json.Unmarshal(b, out)
	}
	return resp.StatusCode, nil
}

func (c *nodeCluster) get(path string, out any) error {
	_, err := c.api(http.MethodGet, path, nil, out)
	return err
}

type pod struct {
	Metadata struct {
		Name, UID         string
		DeletionTimestamp string
	}
	Spec   struct{ NodeName string }
	Status struct {
		Phase, PodIP string
		Conditions   []condition
	}
}

type podList struct{ Items []pod }

// readyPods lists the pods of a component that are Ready and not going.
func (c *nodeCluster) readyPods(component string) ([]pod, error) {
	var l podList
	if err := c.get("/api/v1/namespaces/airlock/pods?labelSelector=app.kubernetes.io%2Fcomponent%3D"+component, &l); err != nil {
		return nil, err
	}
	var out []pod
	for _, p := range l.Items {
		if p.Metadata.DeletionTimestamp == "" && ready(p.Status.Conditions) == nil {
			out = append(out, p)
		}
	}
	return out, nil
}
