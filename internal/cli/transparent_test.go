package cli

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/cgi"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/testutil/isolatednet"
	"github.com/airlockhq/airlock/result"
)

// TestTransparentBrokering runs real sandboxes whose tool uses a service
// marked transparent: curl and Python's urllib call the service's real
// URL (https://example.com:PORT/api/..., the upstream's own name and
// certificate) unchanged, through the egress proxy; airlock terminates
// that TLS with the sandbox's own authority, the broker's menu holds
// (an undeclared call is refused, upstream untouched), the credential
// is attached on the host and is nowhere inside; a plain-HTTP call to
// the brokered name is refused.
func TestTransparentBrokering(t *testing.T) {
	isolatednet.Require(t)
	secret := randomSecret()
	var authorized, hits atomic.Int64
	up := httptest.NewTLSServer(credentialed(secret, &hits, &authorized, func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "path=%s host=%s auth=%s\n", r.URL.Path, r.Host, r.Header.Get("Authorization"))
	}))
	defer up.Close()
	caFile := filepath.Join(t.TempDir(), "upstream-ca.pem")
	if err := os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: up.Certificate().Raw}), 0o644); err != nil {
		t.Fatal(err)
	}
	u, _ := url.Parse(up.URL)
	// httptest's certificate is for example.com.
	real := "https://example.com:" + u.Port()
	cfg := writeConfig(t, fmt.Sprintf(`
secrets:
  tok:
    env: AIRLOCK_TEST_BROKER_TOKEN
services:
  gh:
    upstream: %s/api
    addresses: [127.0.0.1]
    private: true
    ca: %s
    transparent: true
    credential: {secret: tok, template: "Bearer {secret}"}
    operations:
      - GET /repos/{owner}/{repo}/issues
tools:
  gh:
    services: [gh]
`, real, caFile))
	script := strings.Join([]string{
		`echo "curl: $(curl -sS ` + real + `/api/repos/octo/hello/issues)"`,
		`echo "refused: $(curl -sS -X DELETE ` + real + `/api/repos/octo/hello)"`,
		`echo "python: $(python3 -c 'import urllib.request,sys; print(urllib.request.urlopen(sys.argv[1]).read().decode().strip())' ` + real + `/api/repos/octo/py/issues)"`,
		`echo "plain: $(curl -sS -o /dev/null -w '%{http_code}' http://example.com:` + u.Port() + `/api/repos/octo/hello/issues 2>&1)"`,
		// A client that ignores HTTPS_PROXY: the name resolves to its
		// transparent address, where the gateway terminates TLS too.
		`echo "direct: $(curl -sS --noproxy '*' ` + real + `/api/repos/octo/direct/issues)"`,
		// Node's fetch ignores HTTPS_PROXY, and reads NODE_EXTRA_CA_CERTS.
		`echo "node: $(node -e 'fetch(process.argv[1]).then(r => r.text()).then(t => console.log(t.trim()))' ` + real + `/api/repos/octo/node/issues 2>&1)"`,
		`echo "h2: $(curl -sS --http2 -o /dev/null -w '%{http_version} %{http_code}' ` + real + `/api/repos/octo/h2/issues)"`,
		// A client that trusts other roots than the bundle (as one that
		// pins certificates does) fails closed; the event says why.
		`printf '%s' '` + string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: up.Certificate().Raw})) + `' > /tmp/pinned.pem`,
		`echo "pinned: $(curl -sS --cacert /tmp/pinned.pem ` + real + `/api/repos/octo/pinned/issues 2>&1 | head -c 200)"`,
		`env`,
		`for f in /proc/[0-9]*/environ /proc/[0-9]*/cmdline; do tr '\0' '\n' < $f; done 2>/dev/null`,
		`grep -r . /workspace /tmp /dev/shm 2>/dev/null | grep -v -- '-----\|^/tmp/airlock-ca.pem:[A-Za-z0-9+/=]*$'`,
		`true`,
	}, "\n")
	o, r, out := brokeredRun(t, secret, cfg, script)
	for _, want := range []string{
		"curl: path=/api/repos/octo/hello/issues host=example.com:" + u.Port() + " auth=[REDACTED]",
		`refused: airlock broker (service "gh"): no operation matches DELETE /repos/octo/hello`,
		"python: path=/api/repos/octo/py/issues",
		"direct: path=/api/repos/octo/direct/issues host=example.com:" + u.Port() + " auth=[REDACTED]",
		"h2: 2 200",
		"node: path=/api/repos/octo/node/issues host=example.com:" + u.Port() + " auth=[REDACTED]",
		"pinned: curl: (60)",
		"SSL_CERT_FILE=/tmp/airlock-ca.pem",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	if strings.Contains(out, "plain: 200") {
		t.Error("plain HTTP to the brokered name was answered")
	}
	if authorized.Load() != 5 || hits.Load() != 5 {
		t.Errorf("upstream: %d calls, %d authorized; want the five declared ones", hits.Load(), authorized.Load())
	}
	pinned := false
	for _, ev := range r.Egress {
		pinned = pinned || ev.Code == result.EgressCertRefused && strings.Contains(ev.Reason, "SSL_CERT_FILE")
	}
	if !pinned {
		t.Errorf("no %s event naming the setting among %+v", result.EgressCertRefused, r.Egress)
	}
	noSecret(t, o, out, secret, secret[4:20])
	allowed, refused := 0, 0
	for _, ev := range r.Broker {
		if ev.Allow {
			allowed++
		} else if ev.Code == result.BrokerNoOperation {
			refused++
		}
	}
	if allowed != 5 || refused != 1 {
		t.Errorf("broker events %+v; want 5 allowed, 1 refused", r.Broker)
	}
	if t.Failed() {
		t.Logf("output:\n%s", out)
	}
}

// TestTransparentGit: git, unchanged, clones and fetches over HTTPS from
// a real smart-HTTP server (git http-backend behind a TLS front that
// demands the token) at its real name, through transparent brokering;
// a push, which the service's menu does not declare, is refused with a
// readable reason, and the repository is as it was.
func TestTransparentGit(t *testing.T) {
	isolatednet.Require(t)
	backend := "/usr/lib/git-core/git-http-backend"
	if _, err := os.Stat(backend); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("git's http-backend is missing in CI: %v", err)
		}
		t.Skip("needs git's http-backend")
	}
	root := t.TempDir()
	repo := filepath.Join(root, "repo.git")
	work := filepath.Join(root, "work")
	for _, args := range [][]string{
		{"init", "-q", "--bare", "-b", "main", repo},
		// Pushes served (no user needed): the menu is what refuses one.
		{"-C", repo, "config", "http.receivepack", "true"},
		{"init", "-q", "-b", "main", work},
		{"-C", work, "-c", "user.email=t@test", "-c", "user.name=t", "commit", "-q", "--allow-empty", "-m", "first from the host"},
		{"-C", work, "push", "-q", repo, "main"},
	} {
		if out, err := exec.Command("git", args...).CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v %s", args, err, out)
		}
	}
	head := func() string {
		out, _ := exec.Command("git", "-C", repo, "rev-parse", "main").Output()
		return strings.TrimSpace(string(out))
	}
	before := head()
	secret := randomSecret()
	var hits, authorized atomic.Int64
	git := &cgi.Handler{Path: backend, Env: []string{"GIT_PROJECT_ROOT=" + root, "GIT_HTTP_EXPORT_ALL=1"}}
	up := httptest.NewTLSServer(credentialed(secret, &hits, &authorized, git.ServeHTTP))
	defer up.Close()
	caFile := filepath.Join(t.TempDir(), "upstream-ca.pem")
	if err := os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: up.Certificate().Raw}), 0o644); err != nil {
		t.Fatal(err)
	}
	u, _ := url.Parse(up.URL)
	real := "https://example.com:" + u.Port()
	cfg := writeConfig(t, fmt.Sprintf(`
secrets:
  tok:
    env: AIRLOCK_TEST_BROKER_TOKEN
services:
  gh:
    upstream: %s
    addresses: [127.0.0.1]
    private: true
    ca: %s
    transparent: true
    credential: {secret: tok, template: "Bearer {secret}"}
    operations:
      - {method: GET, path: "/{repo}/info/refs", query: [service]}
      - {method: POST, path: "/{repo}/git-upload-pack", content_types: [application/x-git-upload-pack-request]}
tools:
  gh:
    services: [gh]
    env: {GIT_TERMINAL_PROMPT: "0", HOME: /tmp}
`, real, caFile))
	script := strings.Join([]string{
		`cd /tmp && git clone -q ` + real + `/repo.git c 2>&1 && echo "cloned: $(git -C c log -1 --format=%s)"`,
		`git -C c fetch -q origin 2>&1 && echo fetched`,
		`git -C c -c user.email=s@test -c user.name=s commit -q --allow-empty -m "from the sandbox" && echo "push: $(git -C c push -q origin HEAD:main 2>&1 | tr '\n' ' ')"`,
		`true`,
	}, "\n")
	o, r, out := brokeredRun(t, secret, cfg, script)
	for _, want := range []string{
		"cloned: first from the host",
		"fetched",
		"push: error: RPC failed; HTTP 403",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	if head() != before {
		t.Error("the push reached the repository")
	}
	// The push's refusal, with its reason, is the run's (and so the
	// audit log's) broker event.
	refused := false
	for _, ev := range r.Broker {
		refused = refused || !ev.Allow && ev.Code == result.BrokerNoOperation && strings.Contains(ev.Reason, "no operation matches POST /repo.git/git-receive-pack")
	}
	if !refused {
		t.Errorf("no refusal of the push among the broker events %+v", r.Broker)
	}
	noSecret(t, o, out, secret, secret[4:20])
	if t.Failed() {
		t.Logf("output:\n%s", out)
	}
}

// TestTransparentSDK runs an official SDK with its default endpoint in a
// sandbox: OpenAI's Python SDK (from the OpenAI Agents SDK's
// virtualenv, AIRLOCK_TEST_PY_AGENTS, mounted read-only) calls
// https://api.openai.com/v1 as it always does, with a placeholder key
// (and Python's requests, from the same virtualenv, the same URL);
// airlock terminates that name, holds the calls to the service's menu
// and attaches the operator's key. The upstream is a server on this
// namespace's 127.0.0.1:443 with a certificate for api.openai.com, the
// service's pinned address: nothing leaves the machine.
func TestTransparentSDK(t *testing.T) {
	isolatednet.Require(t)
	py := os.Getenv("AIRLOCK_TEST_PY_AGENTS")
	if py == "" {
		if os.Getenv("CI") != "" {
			t.Fatal("AIRLOCK_TEST_PY_AGENTS is not set (the test script makes the OpenAI Agents SDK's virtualenv)")
		}
		t.Skip("AIRLOCK_TEST_PY_AGENTS is not set (scripts/test makes the OpenAI Agents SDK's virtualenv)")
	}
	site, err := exec.Command(py, "-c", "import openai, os; print(os.path.dirname(os.path.dirname(openai.__file__)))").Output()
	if err != nil {
		t.Fatalf("the OpenAI SDK: %v", err)
	}
	secret := randomSecret()
	var hits, authorized atomic.Int64
	cert, certPEM := selfSigned(t, "api.openai.com")
	srv := httptest.NewUnstartedServer(credentialed(secret, &hits, &authorized, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/v1/models":
			io.WriteString(w, `{"object":"list","data":[{"id":"brokered-model","object":"model","created":1,"owned_by":"airlock"}]}`)
		case "/v1/chat/completions":
			io.WriteString(w, `{"id":"c1","object":"chat.completion","created":1,"model":"brokered-model","choices":[{"index":0,"finish_reason":"stop","message":{"role":"assistant","content":"hello from upstream"}}]}`)
		default:
			http.NotFound(w, r)
		}
	}))
	ln, err := net.Listen("tcp", "127.0.0.1:443")
	if err != nil {
		t.Fatal(err)
	}
	srv.Listener = ln
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	srv.StartTLS()
	defer srv.Close()
	caFile := filepath.Join(t.TempDir(), "upstream-ca.pem")
	if err := os.WriteFile(caFile, certPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := writeConfig(t, fmt.Sprintf(`
secrets:
  tok:
    env: AIRLOCK_TEST_BROKER_TOKEN
services:
  openai:
    upstream: https://api.openai.com/v1
    addresses: [127.0.0.1]
    private: true
    ca: %s
    transparent: true
    credential: {secret: tok, template: "Bearer {secret}"}
    operations:
      - GET /models
      - {method: POST, path: /chat/completions, content_types: [application/json]}
tools:
  gh:
    services: [openai]
    mounts: [{source: %s, target: /srv/py}]
    env: {PYTHONPATH: /srv/py, OPENAI_API_KEY: airlock-brokered, HOME: /tmp}
`, caFile, strings.TrimSpace(string(site))))
	script := `python3 - <<'PY'
from openai import OpenAI
c = OpenAI()
print("models:", [m.id for m in c.models.list()])
r = c.chat.completions.create(model="brokered-model", messages=[{"role": "user", "content": "hi"}])
print("chat:", r.choices[0].message.content)
import requests
print("requests:", requests.get("https://api.openai.com/v1/models").json()["data"][0]["id"])
try:
    c.files.list()
    print("files: listed")
except Exception as e:
    print("files:", type(e).__name__, getattr(e, "status_code", ""))
PY
env
for f in /proc/[0-9]*/environ; do tr '\0' '\n' < $f; done 2>/dev/null
true`
	o, r, out := brokeredRun(t, secret, cfg, script)
	for _, want := range []string{
		"models: ['brokered-model']",
		"chat: hello from upstream",
		"requests: brokered-model",
		"files: PermissionDeniedError 403",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	if hits.Load() != 3 || authorized.Load() != 3 {
		t.Errorf("upstream: %d calls, %d authorized; want the three declared ones", hits.Load(), authorized.Load())
	}
	noSecret(t, o, out, secret, secret[4:20])
	refused := false
	for _, ev := range r.Broker {
		refused = refused || !ev.Allow && ev.Code == result.BrokerNoOperation && strings.Contains(ev.Reason, "GET /files")
	}
	if !refused {
		t.Errorf("no refusal of GET /files among %+v", r.Broker)
	}
	if t.Failed() {
		t.Logf("output:\n%s", out)
	}
}

// selfSigned is a certificate (and its PEM) for name, its own authority.
func selfSigned(t *testing.T, name string) (tls.Certificate, []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name}, DNSNames: []string{name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true,
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}
