package cli

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/airlockhq/airlock/internal/testutil/isolatednet"
	"github.com/airlockhq/airlock/result"
)

// TestBrokerSecretNeverInside runs a real sandbox whose tool uses a
// brokered service: the call succeeds with the credential attached on the
// host, and the secret is nowhere the sandbox can look — environment,
// /proc, files, or the answers, which echo it back.
func TestBrokerSecretNeverInside(t *testing.T) {
	isolatednet.Require(t)
	secret := randomSecret()
	var hits, authorized atomic.Int64
	up := httptest.NewServer(credentialed(secret, &hits, &authorized, func(w http.ResponseWriter, r *http.Request) {
		// Echo everything, the credential included.
		fmt.Fprintf(w, "path=%s auth=%s b64=%s q=%s\n", r.URL.Path, r.Header.Get("Authorization"),
			base64.StdEncoding.EncodeToString([]byte("x:"+secret)), url.QueryEscape(secret))
	}))
	defer up.Close()
	cfg := writeConfig(t, fmt.Sprintf(`
secrets:
  tok:
    env: AIRLOCK_TEST_BROKER_TOKEN
services:
  gh:
    upstream: %s
    addresses: [127.0.0.1]
    private: true
    credential: {secret: tok, template: "Bearer {secret}"}
    env:
      GH_URL: "{url}"
      GH_TOKEN: airlock-brokered
    operations:
      - GET /repos/{owner}/{repo}/issues
tools:
  gh:
    services: [gh]
`, strings.Replace(up.URL, "127.0.0.1", "api.test", 1)))
	script := strings.Join([]string{
		`echo "call: $(curl -sS "$GH_URL/repos/octo/hello/issues")"`,
		`echo "refused: $(curl -sS "$AIRLOCK_BROKER_URL/gh/admin")"`,
		`echo "token: $GH_TOKEN"`,
		`env`,
		`for f in /proc/[0-9]*/environ /proc/[0-9]*/cmdline; do tr '\0' '\n' < $f; done 2>/dev/null`,
		`cat /etc/* 2>/dev/null`,
		`grep -r . /workspace /tmp /dev/shm 2>/dev/null`,
		`true`,
	}, "\n")
	o, r, out := brokeredRun(t, secret, cfg, script)
	if authorized.Load() != 1 {
		t.Fatalf("upstream authorized %d calls, want 1:\n%s", authorized.Load(), out)
	}
	for _, want := range []string{
		"call: path=/repos/octo/hello/issues auth=[REDACTED]",
		`refused: airlock broker (service "gh"): no operation matches GET /admin`,
		"token: airlock-brokered",
		"AIRLOCK_BROKER_URL=http://127.0.0.3",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	noSecret(t, o, out, secret, secret[4:20], url.QueryEscape(secret), base64.StdEncoding.EncodeToString([]byte("x:"+secret)))
	if len(r.Broker) != 2 || !r.Broker[0].Allow || r.Broker[0].Status != 200 || r.Broker[1].Allow || r.Broker[1].Status != 403 {
		t.Fatalf("broker events %+v", r.Broker)
	}
	if t.Failed() {
		t.Logf("output:\n%s", out)
	}
}

// randomSecret is a credential for a test's upstream.
func randomSecret() string {
	var raw [24]byte
	rand.Read(raw[:])
	return "tok_" + hex.EncodeToString(raw[:])
}

// credentialed is an upstream's handler that counts every call (hits),
// refuses one without the credential, and counts (authorized) and
// answers the rest with answer.
func credentialed(secret string, hits, authorized *atomic.Int64, answer http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		if r.Header.Get("Authorization") != "Bearer "+secret {
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		authorized.Add(1)
		answer(w, r)
	})
}

// brokeredRun runs script with --json in a sandbox of tool gh of config
// cfg, the service's secret in the host's environment, and returns the
// outcome, its result and the command's output.
func brokeredRun(t *testing.T, secret, cfg, script string) (outcome, result.Result, string) {
	t.Helper()
	o := airlockEnv(t, []string{"AIRLOCK_TEST_BROKER_TOKEN=" + secret}, "", "--config", cfg, "--tool", "gh", "--json", "--", "sh", "-c", script)
	if o.code != 0 {
		t.Fatalf("exit %d: %s", o.code, o.stderr)
	}
	var r result.Result
	if err := json.Unmarshal([]byte(o.stdout), &r); err != nil {
		t.Fatal(err)
	}
	return o, r, string(r.Stdout) + string(r.Stderr)
}

// noSecret fails t when any of forms (of a secret) is in what the
// sandbox printed or in the run's result.
func noSecret(t *testing.T, o outcome, out string, forms ...string) {
	t.Helper()
	for _, form := range forms {
		if strings.Contains(out, form) || strings.Contains(o.stdout, form) || strings.Contains(o.stderr, form) {
			t.Fatalf("the secret (as %q) reached the sandbox or the result:\n%s", form, out)
		}
	}
}
