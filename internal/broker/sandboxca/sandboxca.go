// Package sandboxca is the certificate authority of one sandbox's
// transparent brokering (issue 39; docs/decisions/0035): made for that
// sandbox alone, constrained to the host names its tool brokers, its
// key and its leaves' keys only ever in the daemon's memory. The
// sandbox's trust store holds its certificate (CertPEM), never a key: a
// connection to a brokered name can then be terminated outside the
// sandbox, and no other name can be, by this authority or any copy of
// its certificate.
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
	"fmt"
	"math/big"
	"net"
	"slices"
	"strings"
	"sync"
	"time"
)

// Life is how long the authority's and its leaves' certificates are
// valid: a sandbox's longest life, and a margin for clocks.
const Life = 8 * 24 * time.Hour

// maxNames bounds the names one authority covers.
const maxNames = 64

// ErrName: a leaf was asked for a name the authority does not cover.
var ErrName = errors.New("not a brokered name")

// CA is one sandbox's authority. Its methods are safe for concurrent
// use.
type CA struct {
	names []string
	cert  *x509.Certificate
	der   []byte
	key   *ecdsa.PrivateKey

	mu     sync.Mutex // guards leaves
	leaves map[string]*tls.Certificate
}

// New makes an authority for names (exact DNS names, lower case): its
// certificate permits those names alone (X.509 name constraints, marked
// critical), so that no verifier that checks them accepts it for any
// other name or for an IP address.
func New(names []string) (*CA, error) {
	if len(names) == 0 || len(names) > maxNames {
		return nil, fmt.Errorf("sandboxca: 1 to %d names, not %d", maxNames, len(names))
	}
	clean := make([]string, 0, len(names))
	for _, n := range names {
		if !validName(n) {
			return nil, fmt.Errorf("sandboxca: %q is not a DNS name", n)
		}
		if !slices.Contains(clean, n) {
			clean = append(clean, n)
		}
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "airlock sandbox CA", Organization: []string{"airlock"}},
		NotBefore:             now.Add(-5 * time.Minute),
		NotAfter:              now.Add(Life),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
		// These names (and, as X.509 reads a DNS constraint, names
		// below them) and no IP address: no certificate for any other
		// name chains to it in a verifier that checks constraints.
		// Leaves are made for the exact names alone (Leaf), and only
		// this process holds the key.
		PermittedDNSDomainsCritical: true,
		PermittedDNSDomains:         clean,
		ExcludedIPRanges:            []*net.IPNet{{IP: net.IPv4zero.To4(), Mask: net.CIDRMask(0, 32)}, {IP: net.IPv6zero, Mask: net.CIDRMask(0, 128)}},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &CA{names: clean, cert: cert, der: der, key: key, leaves: map[string]*tls.Certificate{}}, nil
}

// Names are the names the authority covers.
func (c *CA) Names() []string { return slices.Clone(c.names) }

// Certificate is the authority's certificate, for a verifier's roots.
func (c *CA) Certificate() *x509.Certificate { return c.cert }

// CertPEM is the authority's certificate in PEM, what the sandbox's
// trust store gets. There is no way to export the key.
func (c *CA) CertPEM() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.der})
}

// Covers reports whether name is one the authority terminates.
func (c *CA) Covers(name string) bool {
	return slices.Contains(c.names, strings.ToLower(strings.TrimSuffix(name, ".")))
}

// Leaf is the serving certificate for name, made on first use and kept:
// a fresh key, the name alone, server authentication alone.
func (c *CA) Leaf(name string) (*tls.Certificate, error) {
	name = strings.ToLower(strings.TrimSuffix(name, "."))
	if !c.Covers(name) {
		return nil, fmt.Errorf("%w: %q", ErrName, name)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if l, ok := c.leaves[name]; ok {
		return l, nil
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: name},
		DNSNames:     []string{name},
		NotBefore:    now.Add(-5 * time.Minute),
		NotAfter:     c.cert.NotAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.cert, &key.PublicKey, c.key)
	if err != nil {
		return nil, err
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	l := &tls.Certificate{Certificate: [][]byte{der, c.der}, PrivateKey: key, Leaf: leaf}
	c.leaves[name] = l
	return l, nil
}

// GetCertificate serves a TLS handshake's name (tls.Config's hook): a
// client that sends no name, or one not covered, is refused.
func (c *CA) GetCertificate(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
	if hello.ServerName == "" {
		return nil, fmt.Errorf("%w: the client sent no server name", ErrName)
	}
	return c.Leaf(hello.ServerName)
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	return n
}

// validName is a DNS host name: labels of letters, digits and hyphens,
// lower case, no wildcard, not an address.
func validName(n string) bool {
	if n == "" || len(n) > 253 || net.ParseIP(n) != nil {
		return false
	}
	for _, l := range strings.Split(n, ".") {
		if l == "" || len(l) > 63 || l[0] == '-' || l[len(l)-1] == '-' {
			return false
		}
		for _, r := range l {
			if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-') {
				return false
			}
		}
	}
	return true
}
