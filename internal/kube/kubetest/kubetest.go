// Package kubetest runs a real Kubernetes control plane on loopback for
// tests: Debian's etcd and a kube-apiserver that scripts/kube-apiserver
// builds ($AIRLOCK_TEST_KUBE_APISERVER). There is no kubelet: a test
// creates the objects one would have made.
package kubetest

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/airlockhq/airlock/internal/kube"
)

// User is a token the API server accepts: a user name, and its groups.
type User struct {
	Name   string
	Groups []string
}

// ControlPlane is a running etcd and kube-apiserver.
type ControlPlane struct {
	// URL is the API server's.
	URL string
	// CA is the PEM its certificate verifies against.
	CA []byte
	// Tokens holds each user's token, by user name; "admin" is in
	// system:masters.
	Tokens map[string]string
	dir    string
}

// Namespace is the namespace Start creates.
const Namespace = "airlock"

// Start runs a control plane for t, with the admin and the given users,
// and the namespace Namespace; it skips t when no kube-apiserver is
// built.
func Start(t testing.TB, users ...User) *ControlPlane {
	t.Helper()
	apiserver := os.Getenv("AIRLOCK_TEST_KUBE_APISERVER")
	if apiserver == "" {
		t.Skip("AIRLOCK_TEST_KUBE_APISERVER is not set (scripts/test builds kube-apiserver)")
	}
	cp, stop, err := Run(apiserver, t.TempDir(), users...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	return cp
}

// Run is Start outside a test: the control plane's files go in dir, and
// stop ends its processes.
func Run(apiserver, dir string, users ...User) (_ *ControlPlane, stop func(), err error) {
	return RunWith(apiserver, dir, Options{}, users...)
}

// Options change where the API server listens, for a cluster with nodes.
type Options struct {
	// Advertise is the address the API server listens on (all of the
	// host's, with this one in its certificate) and that the kubernetes
	// Service's endpoints name, which a kubelet's pods reach it at; Port
	// is its port. Without Advertise it listens on 127.0.0.1, on a free
	// port, and keeps no endpoints (no pod reaches it).
	Advertise, Port string
}

// RunWith is Run with options.
func RunWith(apiserver, dir string, o Options, users ...User) (_ *ControlPlane, stop func(), err error) {
	etcd, err := exec.LookPath("etcd")
	if err != nil {
		return nil, nil, fmt.Errorf("kube-apiserver is built but etcd is not installed (Debian's etcd-server): %w", err)
	}
	// stopAll, not the named result: a failed return sets that to nil
	// before the deferred undo runs.
	var stops []func()
	stopAll := func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
	}
	defer func() {
		if err != nil {
			stopAll()
		}
	}()
	cp := &ControlPlane{dir: dir, Tokens: map[string]string{}}
	users = append([]User{{Name: "admin", Groups: []string{"system:masters"}}}, users...)
	var csv bytes.Buffer
	for i, u := range users {
		tok := randomHex(16)
		cp.Tokens[u.Name] = tok
		fmt.Fprintf(&csv, "%s,%s,uid%d,%q\n", tok, u.Name, i, strings.Join(u.Groups, ","))
	}
	if err := os.WriteFile(filepath.Join(dir, "tokens.csv"), csv.Bytes(), 0o600); err != nil {
		return nil, nil, err
	}
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "sa.key"), pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}), 0o600); err != nil {
		return nil, nil, err
	}
	ports := make([]string, 3)
	for i := range ports {
		if ports[i], err = freePort(); err != nil {
			return nil, nil, err
		}
	}
	clientPort, peerPort, apiPort := ports[0], ports[1], ports[2]
	host, bind, reconciler := "127.0.0.1", "127.0.0.1", "none"
	if o.Advertise != "" {
		host, bind, reconciler, apiPort = o.Advertise, "0.0.0.0", "lease", o.Port
	}
	s, err := start(dir, "etcd", etcd,
		"--name=default", "--data-dir="+filepath.Join(dir, "etcd"),
		"--listen-client-urls=http://127.0.0.1:"+clientPort, "--advertise-client-urls=http://127.0.0.1:"+clientPort,
		"--listen-peer-urls=http://127.0.0.1:"+peerPort, "--initial-advertise-peer-urls=http://127.0.0.1:"+peerPort,
		"--initial-cluster=default=http://127.0.0.1:"+peerPort, "--log-level=error")
	if err != nil {
		return nil, nil, err
	}
	stops = append(stops, s)
	s, err = start(dir, "kube-apiserver", apiserver,
		"--etcd-servers=http://127.0.0.1:"+clientPort,
		"--bind-address="+bind, "--advertise-address="+host, "--secure-port="+apiPort,
		"--cert-dir="+filepath.Join(dir, "certs"),
		"--token-auth-file="+filepath.Join(dir, "tokens.csv"),
		"--authorization-mode=RBAC",
		"--service-account-key-file="+filepath.Join(dir, "sa.key"),
		"--service-account-signing-key-file="+filepath.Join(dir, "sa.key"),
		"--service-account-issuer=https://kubernetes.default.svc",
		"--service-cluster-ip-range=10.96.0.0/16",
		"--endpoint-reconciler-type="+reconciler, "--allow-privileged=true")
	if err != nil {
		return nil, nil, err
	}
	stops = append(stops, s)
	cp.URL = "https://" + net.JoinHostPort(host, apiPort)
	// 90 s was not enough once, in the cluster guest (emulated) beside
	// the host's tests.
	const ready = 3 * time.Minute
	deadline := time.Now().Add(ready)
	for {
		if ca, err := os.ReadFile(filepath.Join(dir, "certs", "apiserver.crt")); err == nil {
			cp.CA = ca
			if c, err := cp.client("admin", Namespace); err == nil && c.Ready(context.Background()) == nil {
				break
			}
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(filepath.Join(dir, "kube-apiserver.log"))
			return nil, nil, fmt.Errorf("kube-apiserver not ready in %s; its log ends:\n%s", ready, tail(log, 3000))
		}
		time.Sleep(200 * time.Millisecond)
	}
	admin, err := cp.client("admin", Namespace)
	if err != nil {
		return nil, nil, err
	}
	ns := fmt.Sprintf(`{"apiVersion":"v1","kind":"Namespace","metadata":{"name":%q}}`, Namespace)
	if err := admin.Apply(context.Background(), "/api/v1/namespaces/"+Namespace, []byte(ns), "kubetest", false); err != nil {
		return nil, nil, fmt.Errorf("create the namespace: %w", err)
	}
	return cp, stopAll, nil
}

// Client is a client of the API server as user, in Namespace.
func (cp *ControlPlane) Client(t testing.TB, user string) *kube.Client {
	t.Helper()
	c, err := cp.client(user, Namespace)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func (cp *ControlPlane) client(user, ns string) (*kube.Client, error) {
	return kube.New(kube.Config{Server: cp.URL, Token: cp.Tokens[user], CA: cp.CA, Namespace: ns})
}

// Dir is the directory of the control plane's files: its service
// account signing key (sa.key) and the API server's certificate
// (certs/apiserver.crt) among them.
func (cp *ControlPlane) Dir() string { return cp.dir }

// TokenFile writes user's token to a file and returns its path.
func (cp *ControlPlane) TokenFile(t testing.TB, user string) string {
	p := filepath.Join(cp.dir, user+".token")
	write(t, p, []byte(cp.Tokens[user]))
	return p
}

// CAFile writes the CA to a file and returns its path.
func (cp *ControlPlane) CAFile(t testing.TB) string {
	p := filepath.Join(cp.dir, "ca.crt")
	write(t, p, cp.CA)
	return p
}

// start runs a process of the control plane, its output in dir; the
// returned func ends it.
func start(dir, name, bin string, args ...string) (func(), error) {
	log, err := os.Create(filepath.Join(dir, name+".log"))
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = log, log
	// Gone with the process that started it, even when that is killed.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		log.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	return func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		log.Close()
	}, nil
}

// write puts b at p whole, through a rename: the token and CA files are
// written again for every process a test starts, and a process started
// before read them while the next one's truncated them (an empty token:
// a node refused as system:anonymous).
func write(t testing.TB, p string, b []byte) {
	t.Helper()
	f, err := os.CreateTemp(filepath.Dir(p), "."+filepath.Base(p)+".*")
	if err != nil {
		t.Fatal(err)
	}
	_, err = f.Write(b)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil { // CreateTemp's mode is 0600
		err = os.Rename(f.Name(), p)
	}
	if err != nil {
		os.Remove(f.Name())
		t.Fatal(err)
	}
}

func freePort() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return strconv.Itoa(ln.Addr().(*net.TCPAddr).Port), nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}

// resources maps a kind to its API group-version path and plural, and
// whether it lives in a namespace: the kinds airlock's manifests use.
var resources = map[string]struct {
	plural     string
	namespaced bool
}{
	"Namespace": {"namespaces", false}, "ServiceAccount": {"serviceaccounts", true},
	"Role": {"roles", true}, "RoleBinding": {"rolebindings", true},
	"ClusterRole": {"clusterroles", false}, "ClusterRoleBinding": {"clusterrolebindings", false},
	"ConfigMap": {"configmaps", true}, "Secret": {"secrets", true}, "Service": {"services", true},
	"DaemonSet": {"daemonsets", true}, "Deployment": {"deployments", true},
	"PodDisruptionBudget": {"poddisruptionbudgets", true}, "Lease": {"leases", true},
}

// Apply applies every object of a YAML file (documents separated by
// ---) with server-side apply as user, or only checks them (dryRun): the
// server validates each against its schema. It returns the objects'
// kinds and names.
func (cp *ControlPlane) Apply(t testing.TB, user string, manifest []byte, dryRun bool) ([]string, error) {
	t.Helper()
	c := cp.Client(t, user)
	dec := yaml.NewDecoder(bytes.NewReader(manifest))
	var applied []string
	for {
		var obj map[string]any
		if err := dec.Decode(&obj); err != nil {
			if errors.Is(err, io.EOF) {
				return applied, nil
			}
			return applied, fmt.Errorf("a manifest: %w", err)
		}
		if obj == nil {
			continue
		}
		apiVersion, _ := obj["apiVersion"].(string)
		kind, _ := obj["kind"].(string)
		meta, _ := obj["metadata"].(map[string]any)
		name, _ := meta["name"].(string)
		ns, _ := meta["namespace"].(string)
		r, ok := resources[kind]
		if !ok || apiVersion == "" || name == "" {
			return applied, fmt.Errorf("an object of kind %q (%s) named %q: not one the test knows", kind, apiVersion, name)
		}
		path := "/apis/" + apiVersion
		if !strings.Contains(apiVersion, "/") {
			path = "/api/" + apiVersion
		}
		if r.namespaced {
			if ns == "" {
				ns = Namespace
			}
			path += "/namespaces/" + ns
		}
		path += "/" + r.plural + "/" + name
		body, err := json.Marshal(obj)
		if err != nil {
			return applied, err
		}
		if err := c.Apply(context.Background(), path, body, "airlock-test", dryRun); err != nil {
			return applied, fmt.Errorf("%s %s: %w", kind, name, err)
		}
		applied = append(applied, kind+"/"+name)
	}
}

// ServiceAccount is the user a pod of service account name in Namespace
// authenticates as.
func ServiceAccount(name string) User {
	return User{Name: "system:serviceaccount:" + Namespace + ":" + name,
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + Namespace, "system:authenticated"}}
}
