package sandboxca

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

func roots(c *CA) *x509.CertPool {
	p := x509.NewCertPool()
	if !p.AppendCertsFromPEM(c.CertPEM()) {
		panic("the authority's PEM does not parse")
	}
	return p
}

// TestLeaves: a leaf for a covered name verifies against the authority
// alone, for that name and server authentication; a name not covered
// gets no leaf.
func TestLeaves(t *testing.T) {
	c, err := New([]string{"api.github.com", "github.com"})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"api.github.com", "GitHub.com."} {
		l, err := c.Leaf(n)
		if err != nil {
			t.Fatalf("Leaf(%q): %v", n, err)
		}
		name := strings.ToLower(strings.TrimSuffix(n, "."))
		if _, err := l.Leaf.Verify(x509.VerifyOptions{Roots: roots(c), DNSName: name, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
			t.Errorf("%s's leaf does not verify: %v", n, err)
		}
		if _, err := l.Leaf.Verify(x509.VerifyOptions{Roots: roots(c), DNSName: "example.com"}); err == nil {
			t.Errorf("%s's leaf verifies for example.com", n)
		}
		again, _ := c.Leaf(n)
		if again != l {
			t.Errorf("%s: a second leaf was made", n)
		}
	}
	for _, n := range []string{"example.com", "x.api.github.com", "", "127.0.0.1"} {
		if _, err := c.Leaf(n); !errors.Is(err, ErrName) {
			t.Errorf("Leaf(%q) = %v, want ErrName", n, err)
		}
	}
	if !strings.Contains(string(c.CertPEM()), "BEGIN CERTIFICATE") || strings.Contains(string(c.CertPEM()), "PRIVATE") {
		t.Error("CertPEM is not the certificate alone")
	}
}

// TestConstraints: a certificate the authority's key signs for a name
// it does not cover, or for an IP address, does not verify: the
// constraints are in its certificate, not only in Leaf.
func TestConstraints(t *testing.T) {
	c, err := New([]string{"api.github.com"})
	if err != nil {
		t.Fatal(err)
	}
	forge := func(dns []string, ips []net.IP) *x509.Certificate {
		key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		tmpl := &x509.Certificate{SerialNumber: serial(), Subject: pkix.Name{CommonName: "forged"}, DNSNames: dns, IPAddresses: ips,
			NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(time.Hour), ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, c.cert, &key.PublicKey, c.key)
		if err != nil {
			t.Fatal(err)
		}
		cert, _ := x509.ParseCertificate(der)
		return cert
	}
	// The control: the same forging for a covered name verifies, so the
	// refusals below are the constraints'.
	if _, err := forge([]string{"api.github.com"}, nil).Verify(x509.VerifyOptions{Roots: roots(c), DNSName: "api.github.com"}); err != nil {
		t.Fatalf("a certificate the key signed for a covered name: %v", err)
	}
	for _, tt := range []struct {
		name string
		cert *x509.Certificate
		dns  string
	}{
		{"another name", forge([]string{"evil.example"}, nil), "evil.example"},
		{"a sibling", forge([]string{"github.com"}, nil), "github.com"},
		{"an address", forge(nil, []net.IP{net.ParseIP("10.0.0.1")}), "10.0.0.1"},
		{"an address among names", forge([]string{"api.github.com"}, []net.IP{net.ParseIP("10.0.0.1")}), "api.github.com"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := tt.cert.Verify(x509.VerifyOptions{Roots: roots(c), DNSName: tt.dns}); err == nil {
				t.Errorf("a certificate the key signed for %s verifies", tt.name)
			}
		})
	}
	if len(c.cert.PermittedDNSDomains) != 1 || !c.cert.PermittedDNSDomainsCritical || !c.cert.IsCA || !c.cert.MaxPathLenZero {
		t.Errorf("the authority's certificate: %+v", c.cert)
	}
}

// TestHandshake serves TLS with GetCertificate: a client trusting the
// authority alone completes the handshake for a covered name, and one
// for another name is refused by the server.
func TestHandshake(t *testing.T) {
	c, err := New([]string{"git.test"})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{GetCertificate: c.GetCertificate, MinVersion: tls.VersionTLS12})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				if conn.(*tls.Conn).Handshake() == nil {
					io.WriteString(conn, "ok")
				}
			}()
		}
	}()
	dial := func(name string) (string, error) {
		conn, err := tls.Dial("tcp", ln.Addr().String(), &tls.Config{RootCAs: roots(c), ServerName: name})
		if err != nil {
			return "", err
		}
		defer conn.Close()
		b, err := io.ReadAll(conn)
		return string(b), err
	}
	if got, err := dial("git.test"); err != nil || got != "ok" {
		t.Errorf("a covered name: %q %v", got, err)
	}
	if _, err := dial("other.test"); err == nil {
		t.Error("a name not covered completed a handshake")
	}
}

func TestNew(t *testing.T) {
	for _, bad := range [][]string{nil, {""}, {"*.github.com"}, {"10.0.0.1"}, {"Upper.Case"}, {"a..b"}, {"-a.b"}, make([]string, 65)} {
		if _, err := New(bad); err == nil {
			t.Errorf("New(%q) made an authority", bad)
		}
	}
	c, err := New([]string{"a.test", "a.test"})
	if err != nil || len(c.Names()) != 1 {
		t.Errorf("a repeated name: %v %v", c.Names(), err)
	}
	if b, _ := pem.Decode(c.CertPEM()); b == nil || b.Type != "CERTIFICATE" {
		t.Error("CertPEM")
	}
}
