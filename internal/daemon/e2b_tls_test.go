package daemon

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/config"
	"github.com/airlockhq/airlock/internal/testutil/isolatednet"
)

// testCA makes a CA and a certificate it signs for 127.0.0.1, written
// into dir: ca.pem (for the clients), cert.pem and key.pem (for the
// listener).
func testCA(t *testing.T, dir string) (caPEM, cert, key string) {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "airlock test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: []string{"localhost"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &k.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	kb, _ := x509.MarshalECPrivateKey(k)
	caPEM, cert, key = filepath.Join(dir, "ca.pem"), filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	for p, b := range map[string]*pem.Block{caPEM: {Type: "CERTIFICATE", Bytes: caDER}, cert: {Type: "CERTIFICATE", Bytes: der}, key: {Type: "EC PRIVATE KEY", Bytes: kb}} {
		if err := os.WriteFile(p, pem.EncodeToMemory(b), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return caPEM, cert, key
}

// TestE2BTLS: with server.e2b_tls the E2B listener answers TLS, HTTP/2
// as well as HTTP/1.1. The official Python SDK, unchanged, trusting the
// test's CA, negotiates HTTP/2 and creates, runs (a streamed command
// too), writes, reads and kills over it; pinned to HTTP/1.1
// (E2B_HTTP_VERSION) it does the same over that. Plain HTTP on the TLS
// port is not answered as the API.
func TestE2BTLS(t *testing.T) {
	isolatednet.Require(t)
	clientsNotRaced(t)
	py := e2bPython(t)
	dir := t.TempDir()
	caPEM, cert, key := testCA(t, dir)
	base := strings.Replace(serveE2BWith(t, "", func(o *Options) {
		o.Config.Server.E2BTLS = &config.TLSFiles{Cert: cert, Key: key}
	}), "http://", "https://", 1)

	// A Go client: HTTP/2 offered and taken.
	pool := x509.NewCertPool()
	b, _ := os.ReadFile(caPEM)
	pool.AppendCertsFromPEM(b)
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, ForceAttemptHTTP2: true}}
	resp, err := c.Get(base + "/health")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.ProtoMajor != 2 {
		t.Errorf("a Go client that offers HTTP/2 got %s", resp.Proto)
	}
	// Plain HTTP to the TLS port: no answer of the API.
	if resp, err := http.Get(strings.Replace(base, "https://", "http://", 1) + "/health"); err == nil {
		resp.Body.Close()
		if resp.StatusCode < 400 {
			t.Errorf("plain HTTP on the TLS listener: %s", resp.Status)
		}
	}

	for _, tc := range []struct{ name, version, want string }{
		{"negotiated", "", "HTTP/2"},
		{"pinned to HTTP/1.1", "1.1", "HTTP/1.1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.CommandContext(t.Context(), py, "testdata/e2b_tls.py")
			cmd.Env = append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1", "SSL_CERT_FILE="+caPEM, "E2B_HTTP_VERSION="+tc.version,
				"E2B_API_URL="+base, "E2B_SANDBOX_URL="+base, "E2B_API_KEY="+e2bKey)
			cmd.WaitDelay = 5 * time.Second
			out, err := cmd.CombinedOutput()
			t.Logf("the SDK said:\n%s", out)
			steps := scriptSteps(out)
			if err != nil || steps["fatal"] != nil {
				t.Fatalf("the SDK over TLS: %v", err)
			}
			want := map[string]string{"run": `"over tls\n"`, "read": `"tls file"`, "stream": `true`, "kill": `true`}
			for k, w := range want {
				if string(steps[k]) != w {
					t.Errorf("%s: got %s, want %s", k, steps[k], w)
				}
			}
			if string(steps["version"]) != `"`+tc.want+`"` {
				t.Errorf("the SDK's pool spoke %s, want %s", steps["version"], tc.want)
			}
		})
	}
}
