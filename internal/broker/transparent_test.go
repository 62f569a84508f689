package broker

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/broker/sandboxca"
	"github.com/airlockhq/airlock/result"
)

// TestTransparent serves a brokered name the way the gateway will: TLS
// terminated with a sandbox authority's leaf for the service's real host
// (example.com, the upstream's certificate), each request handed to
// Broker.Transparent. A client that trusts that authority alone calls
// the real URL unchanged, over HTTP/2 and HTTP/1.1, and gets the
// upstream's answer with the credential attached on this side and out of
// the answer; what the menu does not declare, another Host, a path
// outside the service and an upgrade are refused, upstream untouched.
func TestTransparent(t *testing.T) {
	u := newUpstream(t, true)
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(caFile, pemOf(u.srv), 0o600); err != nil {
		t.Fatal(err)
	}
	yaml := strings.Replace(svcYAML(u, ""), "    private: true\n", "    private: true\n    ca: "+caFile+"\n", 1)
	yaml = strings.Replace(yaml, "https://upstream.test", "https://example.com", 1)
	f := attach(t, yaml)
	if f.b.Transparent("other.test") != nil {
		t.Error("a handler for a name no service has")
	}
	h := f.b.Transparent("Example.COM.")
	if h == nil {
		t.Fatal("no handler for the service's host")
	}
	ca, err := sandboxca.New([]string{"example.com"})
	if err != nil {
		t.Fatal(err)
	}
	front := httptest.NewUnstartedServer(h)
	front.TLS = &tls.Config{GetCertificate: ca.GetCertificate, MinVersion: tls.VersionTLS12}
	front.EnableHTTP2 = true
	front.StartTLS()
	t.Cleanup(front.Close)
	upURL, _ := url.Parse(u.srv.URL)
	real := "https://example.com:" + upURL.Port()
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(ca.CertPEM())
	client := func(h2 bool) *http.Client {
		tr := &http.Transport{
			TLSClientConfig:   &tls.Config{RootCAs: roots},
			ForceAttemptHTTP2: h2,
			DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
				return (&net.Dialer{}).DialContext(ctx, network, front.Listener.Addr().String())
			},
		}
		if !h2 {
			tr.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
		}
		return &http.Client{Transport: tr, Timeout: 5 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	}
	do := func(c *http.Client, method, target string, hdr map[string]string) (*http.Response, string) {
		t.Helper()
		req, _ := http.NewRequest(method, target, nil)
		for k, v := range hdr {
			if k == "Host" {
				req.Host = v
				continue
			}
			req.Header.Set(k, v)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}
	for _, h2 := range []bool{true, false} {
		resp, body := do(client(h2), "GET", real+"/api/repos/o/r/issues", map[string]string{"Authorization": "Bearer from-the-sandbox"})
		if resp.StatusCode != 200 || u.last().Header.Get("Authorization") != "Bearer "+secret || u.last().Path != "/api/repos/o/r/issues" {
			t.Fatalf("h2 %v: %d %q; upstream saw %+v", h2, resp.StatusCode, body, u.last())
		}
		if want := map[bool]int{true: 2, false: 1}[h2]; resp.ProtoMajor != want {
			t.Errorf("h2 %v: the client spoke HTTP/%d", h2, resp.ProtoMajor)
		}
	}
	if _, body := do(client(true), "GET", real+"/api/leak", nil); strings.Contains(body, secret) {
		t.Errorf("the secret is in the answer: %q", body)
	}
	hits := u.hits.Load()
	for _, tt := range []struct {
		name, method, target string
		hdr                  map[string]string
		status               int
		code                 string
	}{
		{"undeclared method", "DELETE", real + "/api/repos/o/r", nil, 403, result.BrokerNoOperation},
		{"undeclared path", "GET", real + "/api/admin", nil, 403, result.BrokerNoOperation},
		{"outside the service", "GET", real + "/repos/o/r/issues", nil, 403, result.BrokerNoOperation},
		{"another host", "GET", real + "/api/repos/o/r/issues", map[string]string{"Host": "other.test"}, 421, result.BrokerMisdirected},
		{"another port", "GET", real + "/api/repos/o/r/issues", map[string]string{"Host": "example.com:8443"}, 421, result.BrokerMisdirected},
		{"an upgrade", "GET", real + "/api/repos/o/r/issues", map[string]string{"Upgrade": "websocket", "Connection": "Upgrade"}, 403, result.BrokerNoOperation},
		{"a method override", "GET", real + "/api/repos/o/r/issues", map[string]string{"X-HTTP-Method-Override": "DELETE"}, 400, result.BrokerOverride},
	} {
		t.Run(tt.name, func(t *testing.T) {
			n := len(f.events())
			resp, body := do(client(false), tt.method, tt.target, tt.hdr)
			if resp.StatusCode != tt.status {
				t.Errorf("got %d %q, want %d", resp.StatusCode, body, tt.status)
			}
			if ev := f.lastEvent(t, n+1); ev.Allow || ev.Code != tt.code {
				t.Errorf("event %+v, want a refusal %s", ev, tt.code)
			}
		})
	}
	if u.hits.Load() != hits {
		t.Errorf("refused calls reached the upstream (%d more)", u.hits.Load()-hits)
	}
}
