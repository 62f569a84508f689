// Package broker is the credential broker: the only way code in a sandbox
// reaches an authenticated service. It listens inside the sandbox's network
// namespace, forwards only calls that match an operation the tool's
// services declare, strips every credential the caller sent, attaches the
// real one on the host, dials the upstream through the same address checks
// as egress, never follows a redirect, and redacts the secret from
// everything it returns. Every call, allowed or refused, is an event. The
// secret is read from its host-side source for each call and is never
// logged, never in an error, and never in the sandbox.
package broker

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/airlockhq/airlock/internal/broker/brokerspec"
	"github.com/airlockhq/airlock/internal/broker/redact"
	"github.com/airlockhq/airlock/internal/egress"
	"github.com/airlockhq/airlock/internal/httpx"
	"github.com/airlockhq/airlock/internal/linux/netns"
	"github.com/airlockhq/airlock/internal/netlimit"
	"github.com/airlockhq/airlock/result"
)

// Addr is where the broker listens inside every sandbox; URL is what
// AIRLOCK_BROKER_URL holds. Port 80 is below 1024, so code in the sandbox
// can never bind it first.
const (
	Addr = "127.0.0.3:80"
	URL  = "http://127.0.0.3"
)

// maxInbound bounds concurrent calls from one sandbox.
const maxInbound = 64

// Config describes one sandbox's broker.
type Config struct {
	// Tool and SandboxID label every event; the listener is the sandbox's
	// own, so they need no token to prove.
	Tool, SandboxID string
	// Services are the services the tool may use.
	Services []*brokerspec.Service
	// Secrets holds every secret the services name.
	Secrets map[string]Secret
	// Rates, when set, holds the operations' rate limiters, shared with
	// the brokers of the tool's other sandboxes; nil gives this broker
	// limiters of its own.
	Rates *Rates
	// OnEvent receives every call. Nil discards events.
	OnEvent func(result.BrokerEvent)
	// Dialer makes the upstream connections; nil is a default one.
	Dialer *egress.Dialer
	// Logger receives airlock's own diagnostics; nil discards them.
	Logger *slog.Logger
}

// Secret is where a service's credential comes from (config.Secret is
// one). Read returns its current value and is called for every call, so a
// rotated credential is taken up at once; its errors are logged, so they
// must name the secret and its source and never hold the value.
type Secret interface {
	Read() (string, error)
}

// Broker serves one sandbox's calls. Close it when the sandbox is done.
type Broker struct {
	cfg      Config
	ctx      context.Context
	cancel   context.CancelFunc
	srv      *http.Server
	services map[string]*service
	names    []string // sorted, for refusals that list them

	// mu guards closed. A call is added to wg under it, once closed is
	// checked, so that Close's wait counts every call.
	mu     sync.Mutex
	closed bool
	wg     sync.WaitGroup
}

// service is a configured service ready to serve calls.
type service struct {
	cfg       *brokerspec.Service
	secret    Secret
	transport *http.Transport
	ops       []*operation
}

// Attach opens the broker's listener inside the network namespace ns and
// serves it until Close.
func Attach(ctx context.Context, ns *os.File, cfg Config) (_ *Broker, err error) {
	if cfg.Dialer == nil {
		cfg.Dialer = &egress.Dialer{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	b := &Broker{cfg: cfg, services: make(map[string]*service)}
	b.ctx, b.cancel = context.WithCancel(context.WithoutCancel(ctx))
	defer func() {
		if err != nil {
			b.cancel()
			for _, s := range b.services {
				s.transport.CloseIdleConnections()
			}
		}
	}()
	for _, sc := range cfg.Services {
		s, err := b.newService(sc)
		if err != nil {
			return nil, fmt.Errorf("broker: service %q: %w", sc.Name, err)
		}
		b.services[sc.Name] = s
		b.names = append(b.names, sc.Name)
	}
	sort.Strings(b.names)
	var ln net.Listener
	if err := netns.Do(ns, func() error {
		var err error
		// Plain TCP: Multipath TCP (Go's default for listeners) is
		// pointless on the sandbox's loopback, see egress's listenConfig.
		lc := net.ListenConfig{KeepAlive: -1}
		lc.SetMultipathTCP(false)
		ln, err = lc.Listen(context.Background(), "tcp4", Addr)
		return err
	}); err != nil {
		return nil, fmt.Errorf("broker: open listener in the sandbox: %w", err)
	}
	b.srv = httpx.New(http.HandlerFunc(b.serve), httpx.Options{Logger: cfg.Logger})
	b.srv.BaseContext = func(net.Listener) context.Context { return b.ctx }
	lim := netlimit.Listener(ln, make(chan struct{}, maxInbound), b.ctx.Done())
	go func() {
		if err := b.srv.Serve(lim); err != nil && !errors.Is(err, http.ErrServerClosed) {
			cfg.Logger.Warn("broker listener stopped", "sandbox", cfg.SandboxID, "err", err)
		}
	}()
	return b, nil
}

// newService prepares one service: its secret, its operations and a
// transport that can only ever connect to the service's upstream.
func (b *Broker) newService(sc *brokerspec.Service) (*service, error) {
	sec, ok := b.cfg.Secrets[sc.Credential.Secret]
	if !ok {
		return nil, fmt.Errorf("secret %q is not defined", sc.Credential.Secret)
	}
	s := &service{cfg: sc, secret: sec}
	for i := range sc.Operations {
		s.ops = append(s.ops, newOperation(sc.Name, &sc.Operations[i], b.cfg.Rates))
	}
	tlsConf := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: sc.Upstream.Hostname()}
	if sc.CA != "" {
		pem, err := os.ReadFile(sc.CA)
		if err != nil {
			return nil, fmt.Errorf("read CA file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("CA file %s holds no PEM certificate", sc.CA)
		}
		tlsConf.RootCAs = pool
	}
	host := sc.Upstream.Hostname()
	port := upstreamPort(sc)
	dest := sc.Destination
	s.transport = &http.Transport{
		// Whatever address the request names, the transport connects to
		// the service's upstream only, after the egress address checks:
		// the credential cannot be carried anywhere else.
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			c, _, dec, err := b.cfg.Dialer.Dial(ctx, &dest, host, port)
			if !dec.Allow {
				return nil, &deniedError{dec.Reason}
			}
			return c, err
		},
		TLSClientConfig:       tlsConf,
		ForceAttemptHTTP2:     true,
		DisableCompression:    true,
		MaxIdleConnsPerHost:   4,
		IdleConnTimeout:       30 * time.Second,
		ResponseHeaderTimeout: 60 * time.Second,
		Proxy:                 nil,
	}
	return s, nil
}

// deniedError is a dial refused by the address checks.
type deniedError struct{ reason string }

func (e *deniedError) Error() string { return e.reason }

// upstreamPort is the upstream URL's port, or its scheme's default.
func upstreamPort(sc *brokerspec.Service) uint16 {
	if len(sc.Destination.Ports) > 0 {
		return sc.Destination.Ports[0]
	}
	if sc.Upstream.Scheme == "http" {
		return 80
	}
	return 443
}

// Env is what a command's environment gets: AIRLOCK_BROKER_URL and each
// service's placeholder variables. It refuses a placeholder that holds the
// secret itself, so a misconfiguration cannot carry it into the sandbox.
func (b *Broker) Env() ([]string, error) {
	env := []string{"AIRLOCK_BROKER_URL=" + URL}
	for _, name := range b.names {
		s := b.services[name]
		var red *redact.Redactor
		if v, err := s.secret.Read(); err == nil {
			red = redact.New(v)
		}
		for _, e := range s.cfg.Env {
			v := strings.ReplaceAll(e.Value, brokerspec.URLPlaceholder, URL+"/"+name)
			if red != nil && red.Contains([]byte(v)) {
				return nil, fmt.Errorf("broker: service %q: placeholder %s holds the secret; placeholders must never be the credential", name, e.Name)
			}
			env = append(env, e.Name+"="+v)
		}
	}
	return env, nil
}

// Close stops the listener, ends every call and waits for them.
func (b *Broker) Close(ctx context.Context) error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	b.closed = true
	b.mu.Unlock()
	b.cancel()
	if b.srv != nil {
		b.srv.Close()
	}
	done := make(chan struct{})
	go func() {
		b.wg.Wait()
		close(done)
	}()
	var err error
	select {
	case <-done:
	case <-ctx.Done():
		err = fmt.Errorf("broker: close: %w", ctx.Err())
	}
	for _, s := range b.services {
		s.transport.CloseIdleConnections()
	}
	return err
}

// enter registers a call so Close waits for it; false once closing.
func (b *Broker) enter() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return false
	}
	b.wg.Add(1)
	return true
}

func (b *Broker) emit(ev result.BrokerEvent) {
	if b.cfg.OnEvent == nil {
		return
	}
	ev.Tool = b.cfg.Tool
	ev.Sandbox = b.cfg.SandboxID
	b.cfg.OnEvent(ev)
}
