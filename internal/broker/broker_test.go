package broker

import (
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlockhq/airlock/result"
)

func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

// svcYAML is a config with one service "gh" on upstream u.
func svcYAML(u *upstream, extra string) string {
	return fmt.Sprintf(`
secrets:
  tok:
    env: TEST_BROKER_SECRET
services:
  gh:
    upstream: %s/api
    addresses: [127.0.0.1]
    private: true
    credential: {secret: tok, template: "Bearer {secret}"}
    env:
      GH_URL: "{url}"
      GH_TOKEN: airlock-brokered
    operations:
      - method: GET
        path: /repos/{owner}/{repo}/issues
        headers: [X-GitHub-Api-Version]
      - method: GET
        path: /repos/{owner}/{repo}
        query: [state]
      - method: POST
        path: /repos/{owner}/{repo}/issues
        max_request: 1KiB
      - method: GET
        path: /limited
        rate: 3
      - GET /leak
      - method: GET
        path: /redirect
        query: [to]
      - method: GET
        path: /big
        max_response: 1MiB
      - GET /gzip
      - GET /gzip2
      - {method: GET, path: /ranged, rate: 1000}
%s
tools:
  t:
    services: [gh]
`, strings.Replace(u.srv.URL, "127.0.0.1", "upstream.test", 1), extra)
}

func TestAllowedCallGetsCredential(t *testing.T) {
	u := newUpstream(t, false)
	f := attach(t, svcYAML(u, ""))
	req, _ := http.NewRequest("GET", URL+"/gh/repos/octo/hello/issues", nil)
	// Whatever the caller sends as a credential never goes upstream.
	req.Header.Set("Authorization", "Bearer stolen")
	req.Header.Set("Cookie", "session=stolen")
	req.Header.Set("X-Api-Key", "stolen")
	req.Header.Set("X-GitHub-Api-Version", "2022-11-28")
	// Headers a framework upstream may route by, and a slice of the
	// answer: none is declared, none goes.
	req.Header.Set("X-Original-URL", "/admin")
	req.Header.Set("X-Rewrite-URL", "/admin")
	req.Header.Set("X-Original-Host", "admin.internal")
	req.Header.Set("Range", "bytes=0-11")
	req.Header.Set("Accept", "application/json")
	resp, err := f.client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("got %d %s", resp.StatusCode, body)
	}
	got := u.last()
	if got.Path != "/api/repos/octo/hello/issues" || got.Header.Get("Authorization") != "Bearer "+secret {
		t.Fatalf("upstream saw %s %q", got.Path, got.Header.Get("Authorization"))
	}
	if got.Header.Get("Accept") != "application/json" {
		t.Errorf("Accept dropped")
	}
	for _, h := range []string{"Cookie", "X-Api-Key", "X-Original-Url", "X-Rewrite-Url", "X-Original-Host", "Range"} {
		if v := got.Header.Get(h); v != "" {
			t.Errorf("caller's %s reached the upstream: %q", h, v)
		}
	}
	if got.Header.Get("X-Github-Api-Version") != "2022-11-28" {
		t.Errorf("ordinary header dropped")
	}
	if resp.Header.Get("Set-Cookie") != "" {
		t.Errorf("upstream cookie reached the sandbox")
	}
	if strings.Contains(string(body), secret) {
		t.Fatalf("response holds the secret: %s", body)
	}
	ev := f.lastEvent(t, 1)
	if !ev.Allow || ev.Service != "gh" || ev.Operation != "GET /repos/{owner}/{repo}/issues" || ev.Path != "/repos/octo/hello/issues" || ev.Status != 200 || !ev.Upstream || ev.BytesIn == 0 || ev.Sandbox != "sb1" || ev.Tool != "t" {
		t.Fatalf("event %+v", ev)
	}
}

func TestEnv(t *testing.T) {
	u := newUpstream(t, false)
	f := attach(t, svcYAML(u, ""))
	env, err := f.b.Env()
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"AIRLOCK_BROKER_URL=" + URL, "GH_URL=" + URL + "/gh", "GH_TOKEN=airlock-brokered"}
	if strings.Join(env, " ") != strings.Join(want, " ") {
		t.Fatalf("got %q, want %q", env, want)
	}
}

func TestRate(t *testing.T) {
	u := newUpstream(t, false)
	f := attach(t, svcYAML(u, ""))
	var codes []int
	for range 5 {
		resp, _ := f.raw(t, "GET /gh/limited HTTP/1.1\r\nHost: b\r\n\r\n")
		codes = append(codes, resp.StatusCode)
	}
	want := []int{200, 200, 200, 429, 429}
	if fmt.Sprint(codes) != fmt.Sprint(want) {
		t.Fatalf("got %v, want %v", codes, want)
	}
	if ev := f.lastEvent(t, 5); ev.Allow || ev.Code != result.BrokerRate || ev.Status != 429 {
		t.Fatalf("event %+v", ev)
	}
}

// TestRateSharedAcrossSandboxes: the brokers of one tool's sandboxes
// share their operations' limiters, so more sandboxes make no more calls
// on the credential; a broker with limiters of its own is not held by
// theirs.
func TestRateSharedAcrossSandboxes(t *testing.T) {
	u := newUpstream(t, false)
	rates := NewRates()
	a, b := attachWith(t, svcYAML(u, ""), rates), attachWith(t, svcYAML(u, ""), rates)
	var codes []int
	for _, f := range []*fixture{a, b, a, b, b} {
		resp, _ := f.raw(t, "GET /gh/limited HTTP/1.1\r\nHost: b\r\n\r\n")
		codes = append(codes, resp.StatusCode)
	}
	if want := []int{200, 200, 200, 429, 429}; fmt.Sprint(codes) != fmt.Sprint(want) {
		t.Fatalf("calls through two sandboxes sharing a rate of 3: %v, want %v", codes, want)
	}
	// Another operation of the same service has its own limiter.
	if resp, _ := b.raw(t, "GET /gh/ranged HTTP/1.1\r\nHost: b\r\n\r\n"); resp.StatusCode == 429 {
		t.Fatalf("another operation was held by this one's rate")
	}
	c := attach(t, svcYAML(u, ""))
	if resp, _ := c.raw(t, "GET /gh/limited HTTP/1.1\r\nHost: b\r\n\r\n"); resp.StatusCode != 200 {
		t.Fatalf("a broker with limiters of its own: %d", resp.StatusCode)
	}
}

func TestRedirectNotFollowed(t *testing.T) {
	u := newUpstream(t, false)
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.Errorf("the other host was contacted: %s %s (Authorization %q)", r.Method, r.URL, r.Header.Get("Authorization"))
	}))
	defer other.Close()
	f := attach(t, svcYAML(u, ""))
	resp, err := f.client().Get(URL + "/gh/redirect?to=" + other.URL + "/steal")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusFound || resp.Header.Get("Location") != other.URL+"/steal" {
		t.Fatalf("got %d Location %q; want the redirect itself", resp.StatusCode, resp.Header.Get("Location"))
	}
	if ev := f.lastEvent(t, 1); !ev.Allow || ev.Status != http.StatusFound {
		t.Fatalf("event %+v", ev)
	}
}

func TestSecretRedacted(t *testing.T) {
	u := newUpstream(t, false)
	f := attach(t, svcYAML(u, ""))
	resp, err := f.client().Get(URL + "/gh/leak")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	all := string(body) + fmt.Sprint(resp.Header)
	for _, form := range []string{secret, queryEscape(secret), b64(secret)} {
		if strings.Contains(all, form) {
			t.Errorf("answer holds the secret as %q:\n%s", form, all)
		}
	}
	if !strings.Contains(string(body), "plain=[REDACTED]") || resp.Header.Get("X-Echo") != "[REDACTED]" {
		t.Fatalf("got %q, X-Echo %q", body, resp.Header.Get("X-Echo"))
	}
	// An upstream that echoes the secret hex-encoded, JSON-escaped
	// (slashes too, or every character as \u00XX) or base64 of its URL
	// encoding: each line is masked whole.
	for _, f := range hostileForms(secret) {
		if strings.Contains(all, f[1]) || !strings.Contains(string(body), f[0]+"=[REDACTED]\n") {
			t.Errorf("the %s form was not redacted:\n%s", f[0], body)
		}
	}
}

func TestResponseCut(t *testing.T) {
	u := newUpstream(t, false)
	f := attach(t, svcYAML(u, ""))
	resp, err := f.client().Get(URL + "/gh/big")
	if err != nil {
		t.Fatal(err)
	}
	n, rerr := io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if rerr == nil || n > 1<<20 {
		t.Fatalf("read %d bytes, error %v; want a cut at 1 MiB", n, rerr)
	}
	if ev := f.lastEvent(t, 1); ev.Code != result.BrokerResponseTooLarge || !ev.Upstream {
		t.Fatalf("event %+v", ev)
	}
}

func TestUpstreamAddressChecks(t *testing.T) {
	u := newUpstream(t, false)
	// Without private: true, a loopback upstream is refused at dial time.
	yaml := strings.Replace(svcYAML(u, ""), "    addresses: [127.0.0.1]\n    private: true\n", "", 1)
	yaml = strings.Replace(yaml, "upstream.test", "localhost", 1)
	f := attach(t, yaml)
	resp, body := f.raw(t, "GET /gh/repos/o/r/issues HTTP/1.1\r\nHost: b\r\n\r\n")
	if resp.StatusCode != 502 || !strings.Contains(body, "loopback") {
		t.Fatalf("got %d %q", resp.StatusCode, body)
	}
	if ev := f.lastEvent(t, 1); ev.Allow || ev.Code != result.BrokerAddress || ev.Upstream {
		t.Fatalf("event %+v", ev)
	}
	if u.hits.Load() != 0 {
		t.Fatal("upstream reached")
	}
}

func TestHTTPSUpstreamWithCA(t *testing.T) {
	u := newUpstream(t, true)
	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, pemOf(u.srv), 0o600); err != nil {
		t.Fatal(err)
	}
	yaml := strings.Replace(svcYAML(u, ""), "    private: true\n", "    private: true\n    ca: "+ca+"\n", 1)
	// httptest's certificate is for example.com.
	yaml = strings.Replace(yaml, "https://upstream.test", "https://example.com", 1)
	f := attach(t, yaml)
	resp, body := f.raw(t, "GET /gh/repos/o/r/issues HTTP/1.1\r\nHost: b\r\n\r\n")
	if resp.StatusCode != 200 || u.last().Header.Get("Authorization") != "Bearer "+secret {
		t.Fatalf("got %d %q", resp.StatusCode, body)
	}
}

// TestRangeCannotSliceTheSecret: the echo upstream serves ranges of its
// answer, which reflects the credential. Twelve bytes at a time, each
// slice was too short to hold the secret, so none was redacted, and
// together they gave it whole. Range is not forwarded unless an operation
// declares it: every call gets the whole, redacted answer, and no slice
// of the secret leaves.
func TestRangeCannotSliceTheSecret(t *testing.T) {
	u := newUpstream(t, false)
	f := attach(t, svcYAML(u, ""))
	var all strings.Builder
	for off := 0; off < 1200; off += 12 {
		req, _ := http.NewRequest("GET", URL+"/gh/ranged", nil)
		req.Header.Set("Range", fmt.Sprintf("bytes=%d-%d", off, off+11))
		resp, err := f.client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("Range %d: status %d %s", off, resp.StatusCode, body)
		}
		if got := u.last().Header.Get("Range"); got != "" {
			t.Fatalf("the upstream got Range %q", got)
		}
		all.Write(body)
	}
	if strings.Contains(all.String(), secret) || strings.Contains(all.String(), secret[:len(secret)/2]) {
		t.Fatal("the answers hold the secret, or half of it")
	}
}

// TestShortSecretRefused: a secret shorter than 8 bytes cannot be kept out
// of answers (its forms are a few bytes innocent data holds too), so the
// broker does not use it, and says why.
func TestShortSecretRefused(t *testing.T) {
	u := newUpstream(t, false)
	f := attach(t, svcYAML(u, ""))
	t.Setenv("TEST_BROKER_SECRET", "abc1234")
	before := u.hits.Load()
	resp, body := f.raw(t, "GET /gh/repos/o/r/issues HTTP/1.1\r\nHost: b\r\n\r\n")
	if resp.StatusCode != http.StatusBadGateway || !strings.Contains(body, "shorter than 8 bytes") {
		t.Fatalf("got %d %q", resp.StatusCode, body)
	}
	if u.hits.Load() != before {
		t.Fatal("the short secret went upstream")
	}
}

// TestHTTP2Upstream: against a real HTTP/2 upstream on loopback (the
// broker's transport speaks HTTP/2 to a TLS upstream that offers it), the
// credential is attached, the secret redacted in every echoed form, a
// compressed answer behind an empty Content-Encoding refused, and Range
// not forwarded.
func TestHTTP2Upstream(t *testing.T) {
	u := newUpstreamH2(t)
	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, pemOf(u.srv), 0o600); err != nil {
		t.Fatal(err)
	}
	yaml := strings.Replace(svcYAML(u, ""), "    private: true\n", "    private: true\n    ca: "+ca+"\n", 1)
	yaml = strings.Replace(yaml, "https://upstream.test", "https://example.com", 1)
	f := attach(t, yaml)
	resp, body := f.raw(t, "GET /gh/repos/o/r/issues HTTP/1.1\r\nHost: b\r\nRange: bytes=0-11\r\n\r\n")
	got := u.last()
	if resp.StatusCode != 200 || got.ProtoMajor != 2 || got.Header.Get("Authorization") != "Bearer "+secret || got.Header.Get("Range") != "" {
		t.Fatalf("got %d %q; upstream saw HTTP/%d, Authorization %q, Range %q", resp.StatusCode, body, got.ProtoMajor, got.Header.Get("Authorization"), got.Header.Get("Range"))
	}
	if strings.Contains(body, secret) {
		t.Fatal("the echo holds the secret")
	}
	_, body = f.raw(t, "GET /gh/leak HTTP/1.1\r\nHost: b\r\n\r\n")
	for _, form := range append(hostileForms(secret), [2]string{"plain", secret}) {
		if strings.Contains(body, form[1]) {
			t.Errorf("the %s form came back over HTTP/2:\n%s", form[0], body)
		}
	}
	if resp, body = f.raw(t, "GET /gh/gzip2 HTTP/1.1\r\nHost: b\r\n\r\n"); resp.StatusCode != 502 || !strings.Contains(body, "gzip") {
		t.Fatalf("an encoded answer over HTTP/2: %d %q", resp.StatusCode, body)
	}
}
