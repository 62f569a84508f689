package attach

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"os"
	"strconv"

	"github.com/airlockhq/airlock/internal/broker"
	"github.com/airlockhq/airlock/internal/broker/brokerspec"
	"github.com/airlockhq/airlock/internal/broker/sandboxca"
	"github.com/airlockhq/airlock/internal/egress"
	"github.com/airlockhq/airlock/internal/linux/inroot"
	"github.com/airlockhq/airlock/sandbox"
)

// Transparent brokering (docs/decisions/0035): the services marked
// transparent are served at their upstreams' own names. The sandbox gets
// an authority of its own for those names, its certificate in a trust
// bundle in the sandbox's /tmp (with the host's roots, for every other
// name), and the variables common clients read the bundle from.

// trustFile is the bundle, in the sandbox.
const trustFile = egress.TrustBundle

// trustVars are the variables that point the common clients at it: curl
// and OpenSSL, Python's requests, Git, Node.js (extra roots), the AWS
// CLI and SDKs.
var trustVars = []string{"SSL_CERT_FILE", "CURL_CA_BUNDLE", "REQUESTS_CA_BUNDLE", "GIT_SSL_CAINFO", "NODE_EXTRA_CA_CERTS", "AWS_CA_BUNDLE"}

// hostRoots are where the host's roots may be, the first found taken.
var hostRoots = []string{"/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt", "/etc/ssl/cert.pem"}

// maxRoots bounds the host's bundle read.
const maxRoots = 4 << 20

// transparent makes the sandbox's authority for the transparent
// services and returns the gateway's intercept, the variables and what
// writes the trust bundle once the sandbox has started (Prepare: a
// binding made while init starts finds no /tmp mounted yet); nothing
// when no service is transparent.
func transparent(sb *sandbox.Sandbox, services []*brokerspec.Service, br *broker.Broker) (*egress.Interception, []string, func(context.Context) error, error) {
	ports := map[string]uint16{}
	var names []string
	for _, s := range services {
		if !s.Transparent {
			continue
		}
		host := s.Upstream.Hostname()
		port := uint16(443)
		if p := s.Upstream.Port(); p != "" {
			n, _ := strconv.ParseUint(p, 10, 16)
			port = uint16(n)
		}
		if _, ok := ports[host]; !ok {
			names = append(names, host)
		}
		ports[host] = port
	}
	if len(names) == 0 {
		return nil, nil, nil, nil
	}
	ca, err := sandboxca.New(names)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("transparent brokering: %w", err)
	}
	var bundle bytes.Buffer
	for _, p := range hostRoots {
		if b, err := os.ReadFile(p); err == nil && len(b) <= maxRoots {
			bundle.Write(b)
			bundle.WriteByte('\n')
			break
		}
	}
	bundle.Write(ca.CertPEM())
	write := func(ctx context.Context) error {
		if err := sb.AwaitStart(ctx); err != nil {
			return err
		}
		dir, err := sb.OpenDir("/tmp")
		if err != nil {
			return fmt.Errorf("transparent brokering: the sandbox's /tmp: %w", err)
		}
		defer dir.Close()
		id := sb.UserHostID()
		if err := inroot.AsUser(id, id, func() error {
			_, err := inroot.WriteFileThen(dir, trustFile[len("/tmp/"):], bytes.NewReader(bundle.Bytes()), maxRoots+1<<16, id, id, func(f *os.File) error { return f.Chmod(0o444) })
			return err
		}); err != nil {
			return fmt.Errorf("transparent brokering: the trust bundle: %w", err)
		}
		return nil
	}
	handlers := map[string]http.Handler{}
	for _, n := range names {
		if h := br.Transparent(n); h != nil {
			handlers[n] = h
		}
	}
	for n := range ports {
		if handlers[n] == nil {
			delete(ports, n)
		}
	}
	intercept := &egress.Interception{
		Ports:   ports,
		Handler: func(name string) http.Handler { return handlers[name] },
		TLS:     &tls.Config{GetCertificate: ca.GetCertificate, MinVersion: tls.VersionTLS12, NextProtos: []string{"h2", "http/1.1"}},
	}
	env := make([]string, 0, len(trustVars))
	for _, v := range trustVars {
		env = append(env, v+"="+trustFile)
	}
	return intercept, env, write, nil
}
