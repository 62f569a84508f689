package main

import (
	"context"
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
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/airlockhq/airlock/internal/broker"
	"github.com/airlockhq/airlock/internal/broker/brokerspec"
	"github.com/airlockhq/airlock/internal/broker/sandboxca"
	"github.com/airlockhq/airlock/internal/config"
	"github.com/airlockhq/airlock/internal/egress"
	"github.com/airlockhq/airlock/internal/egress/policy"
	"github.com/airlockhq/airlock/internal/linux/netns"
)

// transparentBench measures transparent brokering (issue 39): a GET to
// an HTTPS upstream by a kept-alive client, three ways, interleaved:
// direct from the host with the token over TLS; from a sandbox's
// namespace to the broker's endpoint; and from the namespace to the
// upstream's own name through the egress proxy, where the gateway
// terminates TLS with the sandbox's authority and hands each request to
// the broker. The broker keeps its own connection to the upstream.
func transparentBench(n int) error {
	const token = "bench-token-0123456789abcdef"
	const name = "api.bench"
	os.Setenv("AIRLOCK_BENCH_TOKEN", token)
	cert, certPEM, err := benchCert(name)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+token {
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		io.WriteString(w, `{"number":1,"title":"hello"}`)
	}), TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}}}
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		return err
	}
	defer srv.Close()
	go srv.ServeTLS(ln, "", "")
	port := ln.Addr().(*net.TCPAddr).Port
	dir, err := os.MkdirTemp("", "airlock-bench-transparent")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	caFile := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(caFile, certPEM, 0o600); err != nil {
		return err
	}
	cfg, err := config.Parse("bench.yaml", []byte(fmt.Sprintf(`
secrets:
  tok: {env: AIRLOCK_BENCH_TOKEN}
services:
  gh:
    upstream: https://%s:%d
    addresses: [127.0.0.1]
    private: true
    ca: %s
    transparent: true
    rate: 100000
    credential: {secret: tok, template: "Bearer {secret}"}
    operations:
      - GET /repos/{owner}/{repo}/issues/{number}
`, name, port, caFile)))
	if err != nil {
		return err
	}
	svc, _ := cfg.Service("gh")
	ns, err := netns.New()
	if err != nil {
		return err
	}
	defer ns.Close()
	ctx := context.Background()
	b, err := broker.Attach(ctx, ns, broker.Config{SandboxID: "bench", Services: []*brokerspec.Service{svc}, Secrets: map[string]broker.Secret{"tok": cfg.Secrets["tok"]}})
	if err != nil {
		return err
	}
	defer b.Close(ctx)
	ca, err := sandboxca.New([]string{name})
	if err != nil {
		return err
	}
	gw, err := egress.Attach(ctx, ns, egress.Config{Tool: "bench", SandboxID: "bench", Policy: policy.New(nil), Intercept: &egress.Interception{
		Ports:   map[string]uint16{name: uint16(port)},
		Handler: b.Transparent,
		TLS:     &tls.Config{GetCertificate: ca.GetCertificate, MinVersion: tls.VersionTLS12, NextProtos: []string{"h2", "http/1.1"}},
	}})
	if err != nil {
		return err
	}
	defer gw.Close(ctx)
	inside, err := newInsideWorker(ns)
	if err != nil {
		return err
	}
	defer inside.stop()
	upRoots := x509.NewCertPool()
	upRoots.AppendCertsFromPEM(certPEM)
	sbRoots := x509.NewCertPool()
	sbRoots.AppendCertsFromPEM(ca.CertPEM())
	proxy, _ := url.Parse("http://" + egress.ProxyAddr)
	direct := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: upRoots}, DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, network, ln.Addr().String())
	}}}
	endpoint := &http.Client{Transport: &http.Transport{DialContext: inside.dial}}
	transparent := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(proxy), DialContext: inside.dial, TLSClientConfig: &tls.Config{RootCAs: sbRoots}}}
	auth := http.Header{"Authorization": {"Bearer " + token}}
	path := "/repos/octo/hello/issues/1"
	real := "https://" + name + ":" + strconv.Itoa(port) + path
	d := series{name: "direct TLS from the host (credential in the caller)"}
	e := series{name: "the broker's endpoint from the sandbox's namespace"}
	p := series{name: "transparent: the real https URL from the sandbox's namespace"}
	for i := 0; i < n+n/10; i++ {
		t0 := time.Now()
		if err := fetch(direct, real, auth); err != nil {
			return err
		}
		t1 := time.Now()
		if err := fetch(endpoint, broker.URL+"/gh"+path, nil); err != nil {
			return err
		}
		t2 := time.Now()
		if err := fetch(transparent, real, nil); err != nil {
			return err
		}
		t3 := time.Now()
		if i >= n/10 {
			d.d = append(d.d, t1.Sub(t0))
			e.d = append(e.d, t2.Sub(t1))
			p.d = append(p.d, t3.Sub(t2))
		}
	}
	fmt.Printf("## Transparent brokering\n\nA GET answered with a small JSON body by a loopback HTTPS upstream that demands a bearer token, kept-alive clients, %d runs each, interleaved: direct from the host with the token over TLS; from a sandbox's namespace to the broker's endpoint; and from the namespace to the upstream's real https URL through the egress proxy, where the gateway terminates TLS with the sandbox's own authority and the broker matches the operation, adds the token and redacts the answer.\n\n", n)
	fmt.Println("| Path | p50 | p99 |\n| --- | --- | --- |")
	for _, s := range []*series{&d, &e, &p} {
		fmt.Printf("| %s | %s | %s |\n", s.name, ms(s.pct(0.5)), ms(s.pct(0.99)))
	}
	fmt.Printf("\nAdded latency over direct TLS (p50): **%s** (target ≤ 1.00 ms); over the broker's endpoint: %s\n\n", ms(p.pct(0.5)-d.pct(0.5)), ms(p.pct(0.5)-e.pct(0.5)))
	return nil
}

// benchCert is a self-signed certificate for name, and its PEM.
func benchCert(name string) (tls.Certificate, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name}, DNSNames: []string{name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true,
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), nil
}
