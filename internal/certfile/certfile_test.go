package certfile

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// writePair writes a self-signed certificate for name and its key.
func writePair(t *testing.T, dir, name string) (cert, key string) {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name}, DNSNames: []string{name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	if err != nil {
		t.Fatal(err)
	}
	kb, _ := x509.MarshalECPrivateKey(k)
	cert, key = filepath.Join(dir, "c.pem"), filepath.Join(dir, "k.pem")
	if err := os.WriteFile(cert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(key, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		t.Fatal(err)
	}
	return cert, key
}

func name(t *testing.T, s *Source) string {
	t.Helper()
	c, err := s.GetCertificate(&tls.ClientHelloInfo{})
	if err != nil {
		t.Fatal(err)
	}
	x, err := x509.ParseCertificate(c.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	return x.Subject.CommonName
}

// TestSource: the certificate is read at Load, a renewal is taken at the
// next look, and a renewal that does not load keeps the one in use.
func TestSource(t *testing.T) {
	old := CheckEvery
	CheckEvery = 0
	t.Cleanup(func() { CheckEvery = old })
	dir := t.TempDir()
	cert, key := writePair(t, dir, "one.test")
	s, err := Load(cert, key, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := name(t, s); got != "one.test" {
		t.Fatalf("first: %s", got)
	}
	// A renewal (a later mtime).
	time.Sleep(10 * time.Millisecond)
	writePair(t, dir, "two.test")
	if got := name(t, s); got != "two.test" {
		t.Errorf("after the renewal: %s, want two.test", got)
	}
	// A half-written renewal: the one in use stays.
	time.Sleep(10 * time.Millisecond)
	if err := os.WriteFile(cert, []byte("-----BEGIN CERT"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := name(t, s); got != "two.test" {
		t.Errorf("after a broken renewal: %s, want two.test kept", got)
	}
}

// TestLoadErrors name the file and what is wrong.
func TestLoadErrors(t *testing.T) {
	dir := t.TempDir()
	cert, key := writePair(t, dir, "one.test")
	other := t.TempDir()
	_, otherKey := writePair(t, other, "two.test")
	for _, tc := range []struct {
		name, cert, key, want string
	}{
		{"no cert", filepath.Join(dir, "none.pem"), key, "none.pem"},
		{"no key", cert, filepath.Join(dir, "none.key"), "none.key"},
		{"another's key", cert, otherKey, "private key does not match"},
	} {
		if _, err := Load(tc.cert, tc.key, nil); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
}
