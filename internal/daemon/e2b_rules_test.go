package daemon

import (
	"bytes"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/airlockhq/airlock/internal/audit"
	"github.com/airlockhq/airlock/internal/testutil/isolatednet"
	"github.com/airlockhq/airlock/result"
)

// TestE2BNetworkRulesJS drives E2B's network.rules header transforms
// through E2B's JavaScript SDK (testdata/e2b_rules.mjs) against a
// template that brokers example.com transparently: the transform the
// operator's config allows (a header the service's operations forward)
// goes with the sandbox's call to the real URL, beside the operator's
// credential, which is nowhere in the sandbox; an undeclared call is
// refused, and the refusal is in the audit log; a transform for a host no
// service brokers, one that carries a credential, one no operation
// forwards and one that names the connection are refused, each saying
// why; and so are rule fields airlock does not know.
func TestE2BNetworkRulesJS(t *testing.T) {
	sdk := e2bSDK(t)
	isolatednet.Require(t)
	const secret = "upstream-token-0123456789abcdefXYZ"
	var mu sync.Mutex
	var seen []http.Header
	up := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Header.Clone())
		mu.Unlock()
		if r.Header.Get("Authorization") != "Bearer "+secret {
			http.Error(w, "no credential", http.StatusUnauthorized)
			return
		}
		fmt.Fprintf(w, "path=%s version=%s\n", r.URL.Path, r.Header.Get("X-Github-Api-Version"))
	}))
	t.Cleanup(up.Close)
	caFile := filepath.Join(t.TempDir(), "upstream-ca.pem")
	if err := os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: up.Certificate().Raw}), 0o644); err != nil {
		t.Fatal(err)
	}
	u, _ := url.Parse(up.URL)
	real := "https://example.com:" + u.Port()
	t.Setenv("TEST_E2B_KEY", e2bKey)
	t.Setenv("TEST_UPSTREAM_TOKEN", secret)
	addr := freePort(t)
	d, _ := serveConfig(t, fmt.Sprintf(`
server:
  e2b: %s
  tokens:
    - {name: agent, secret: key, tools: ["*"]}
secrets:
  key: {env: TEST_E2B_KEY}
  tok: {env: TEST_UPSTREAM_TOKEN}
services:
  gh:
    upstream: %s/api
    addresses: [127.0.0.1]
    private: true
    ca: %s
    transparent: true
    credential: {secret: tok, template: "Bearer {secret}"}
    operations:
      - {method: GET, path: "/repos/{owner}/{repo}/issues", headers: [X-GitHub-Api-Version]}
tools:
  gh:
    services: [gh]
`, addr, real, caFile), nil)
	base := "http://" + addr
	cmd := exec.Command("node", "testdata/e2b_rules.mjs")
	cmd.Env = append(os.Environ(), "E2B_SDK="+sdk, "E2B_API_URL="+base, "E2B_SANDBOX_URL="+base, "E2B_API_KEY="+e2bKey, "REAL="+real)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	outb, err := cmd.Output()
	steps := scriptSteps(outb)
	if err != nil || steps["fatal"] != nil {
		t.Fatalf("the SDK's script: %v\n%s\n%s", err, outb, stderr.String())
	}
	if got, want := string(steps["call"]), `"path=/api/repos/octo/hello/issues version=2022-11-28\n"`; got != want {
		t.Errorf("the call: %s, want %s", got, want)
	}
	if bytes.Contains(steps["env"], []byte(secret)) || !bytes.Contains(steps["env"], []byte("SSL_CERT_FILE=")) {
		t.Errorf("the sandbox's environment:\n%s", steps["env"])
	}
	if got := string(steps["refused"]); !strings.Contains(got, `no operation matches DELETE /repos/octo/hello`) {
		t.Errorf("the undeclared call: %s", got)
	}
	// The refusal, with its reason, is in the audit log.
	if err := d.Audit().Append(t.Context()); err != nil {
		t.Fatal(err)
	}
	evs, err := d.Audit().Query(t.Context(), audit.Query{Kind: audit.KindBroker, Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	audited := false
	for _, e := range evs {
		var det result.BrokerEvent
		_ = json.Unmarshal(e.Detail, &det)
		audited = audited || !det.Allow && det.Code == result.BrokerNoOperation && strings.Contains(det.Reason, "DELETE /repos/octo/hello")
	}
	if !audited {
		t.Errorf("no refusal of the DELETE among the audit log's %d broker events", len(evs))
	}
	mu.Lock()
	if len(seen) != 1 || seen[0].Get("X-Github-Api-Version") != "2022-11-28" {
		t.Errorf("the upstream saw %v", seen)
	}
	mu.Unlock()
	for k, says := range map[string][]string{
		"otherhost":   {"400", `network.rules: \"api.other.test\"`, "brokers no service at that host", "example.com"},
		"credential":  {"400", "Authorization carries a credential", `service \"gh\"`},
		"apikey":      {"400", "X-Api-Key carries a credential"},
		"unforwarded": {"400", "X-Original-Url: no operation of service"},
		"host":        {"400", "Host describes the connection"},
	} {
		for _, s := range says {
			if !strings.Contains(string(steps[k]), s) {
				t.Errorf("%s: %s; want it to say %q", k, steps[k], s)
			}
		}
	}
	// What the SDK would never send, sent raw: fields of a rule airlock
	// does not know are refused, not dropped.
	for _, c := range []struct{ name, body, want string }{
		{"an unknown rule field", `{"templateID":"gh","network":{"rules":{"example.com":[{"iam":{"aws":{}}}]}}}`, `unknown field \"iam\"`},
		{"an unknown transform field", `{"templateID":"gh","network":{"rules":{"example.com":[{"transform":{"body":"x"}}]}}}`, `unknown field \"body\"`},
		{"rules not an object", `{"templateID":"gh","network":{"rules":[]}}`, "network.rules"},
		{"rules with no network", `{"templateID":"gh","allow_internet_access":false,"network":{"rules":{"example.com":[]}}}`, "takes the network away"},
	} {
		req, _ := http.NewRequest("POST", base+"/v2/sandboxes", strings.NewReader(c.body))
		req.Header.Set("X-API-KEY", e2bKey)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 400 || !strings.Contains(string(b), c.want) {
			t.Errorf("%s: %d %s, want 400 with %q", c.name, resp.StatusCode, b, c.want)
		}
	}
	if t.Failed() {
		t.Logf("the SDK said:\n%s\n%s", outb, stderr.String())
	}
}
