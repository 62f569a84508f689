package cli

import (
	"encoding/pem"
	"fmt"
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
		"SSL_CERT_FILE=/tmp/airlock-ca.pem",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	if strings.Contains(out, "plain: 200") {
		t.Error("plain HTTP to the brokered name was answered")
	}
	if authorized.Load() != 2 || hits.Load() != 2 {
		t.Errorf("upstream: %d calls, %d authorized; want the two declared ones", hits.Load(), authorized.Load())
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
	if allowed != 2 || refused != 1 {
		t.Errorf("broker events %+v; want 2 allowed, 1 refused", r.Broker)
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
