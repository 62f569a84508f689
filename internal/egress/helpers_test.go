package egress

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/egress/policy"
	"github.com/airlockhq/airlock/internal/linux/netns"
	"github.com/airlockhq/airlock/internal/testutil/isolatednet"
	"github.com/airlockhq/airlock/result"
)

// Every test of this package runs in a network namespace with only lo:
// they try metadata and outside addresses, and nothing may leave the
// machine even if the gateway is wrong.
func TestMain(m *testing.M) { os.Exit(isolatednet.Main(m)) }

// events collects a gateway's events.
type events struct {
	mu  sync.Mutex
	evs []result.EgressEvent
	ch  chan struct{}
}

func (e *events) add(ev result.EgressEvent) {
	e.mu.Lock()
	e.evs = append(e.evs, ev)
	e.mu.Unlock()
	select {
	case e.ch <- struct{}{}:
	default:
	}
}

// wait returns the first event for which match is true, waiting up to 5s.
func (e *events) wait(t *testing.T, what string, match func(result.EgressEvent) bool) result.EgressEvent {
	t.Helper()
	return e.waitFrom(t, 0, what, match)
}

// count is how many events there are so far, for waitFrom.
func (e *events) count() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.evs)
}

// waitFrom is wait for an event after the first from.
func (e *events) waitFrom(t *testing.T, from int, what string, match func(result.EgressEvent) bool) result.EgressEvent {
	t.Helper()
	deadline := time.After(5 * time.Second)
	for {
		e.mu.Lock()
		for _, ev := range e.evs[from:] {
			if match(ev) {
				e.mu.Unlock()
				return ev
			}
		}
		e.mu.Unlock()
		select {
		case <-e.ch:
		case <-time.After(20 * time.Millisecond):
		case <-deadline:
			e.mu.Lock()
			defer e.mu.Unlock()
			t.Fatalf("no event %s; got %+v", what, e.evs)
		}
	}
}

type fixture struct {
	ns  *os.File
	gw  *Gateway
	evs *events
}

// gateway attaches a gateway with the given destinations to a fresh
// namespace standing in for a sandbox's.
func gateway(t *testing.T, specs []policy.Spec, mod func(*Config)) *fixture {
	t.Helper()
	isolatednet.Require(t)
	ns, err := netns.New()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ns.Close() })
	var dests []policy.Destination
	for _, s := range specs {
		d, err := policy.Compile(s)
		if err != nil {
			t.Fatalf("compile %+v: %v", s, err)
		}
		dests = append(dests, d)
	}
	evs := &events{ch: make(chan struct{}, 1)}
	cfg := Config{Tool: "test", SandboxID: "sb1", Policy: policy.New(dests), OnEvent: evs.add, DialTimeout: 2 * time.Second}
	if mod != nil {
		mod(&cfg)
	}
	gw, err := Attach(t.Context(), ns, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := gw.Close(context.Background()); err != nil {
			t.Error(err)
		}
	})
	return &fixture{ns: ns, gw: gw, evs: evs}
}

// dialIn dials addr from inside the fixture's namespace, as code in the
// sandbox would.
func (f *fixture) dialIn(ctx context.Context, network, addr string) (net.Conn, error) {
	var c net.Conn
	err := netns.Do(f.ns, func() error {
		var err error
		var d net.Dialer
		c, err = d.DialContext(ctx, network, addr)
		return err
	})
	return c, err
}

// client is an HTTP client inside the sandbox that uses the proxy.
func (f *fixture) client(roots *x509.CertPool) *http.Client {
	proxy, _ := url.Parse("http://" + ProxyAddr)
	return &http.Client{
		Timeout: 5 * time.Second,
		Transport: &http.Transport{
			Proxy:             http.ProxyURL(proxy),
			DialContext:       f.dialIn,
			TLSClientConfig:   &tls.Config{RootCAs: roots},
			DisableKeepAlives: true,
		},
	}
}

// lookup resolves name through the sandbox's resolver.
func (f *fixture) lookup(ctx context.Context, name string) ([]netip.Addr, error) {
	r := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		return f.dialIn(ctx, network, ResolverAddr)
	}}
	return r.LookupNetIP(ctx, "ip4", name)
}

// upstream is an HTTP server on the test namespace's loopback, standing in
// for an outside service.
func upstream(t *testing.T, h http.HandlerFunc, tlsOn bool) (*httptest.Server, uint16) {
	t.Helper()
	var s *httptest.Server
	if tlsOn {
		s = httptest.NewTLSServer(h)
	} else {
		s = httptest.NewServer(h)
	}
	t.Cleanup(s.Close)
	ap := netip.MustParseAddrPort(s.Listener.Addr().String())
	return s, ap.Port()
}

func roots(s *httptest.Server) *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(s.Certificate())
	return p
}
