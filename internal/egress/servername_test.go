package egress

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/egress/policy"
	"github.com/airlockhq/airlock/result"
)

// nameLog is an upstream's own record of the TLS server names it was
// asked for.
type nameLog struct {
	mu    sync.Mutex
	names []string
}

func (l *nameLog) add(n string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.names = append(l.names, n)
}

func (l *nameLog) has(n string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, got := range l.names {
		if got == n {
			return true
		}
	}
	return false
}

// namedUpstream is a TLS server that logs every ClientHello's server name.
func namedUpstream(t *testing.T) (*nameLog, uint16) {
	t.Helper()
	log := &nameLog{}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "hello") }))
	srv.TLS = &tls.Config{GetConfigForClient: func(h *tls.ClientHelloInfo) (*tls.Config, error) {
		log.add(h.ServerName)
		return nil, nil
	}}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	_, p, _ := net.SplitHostPort(srv.Listener.Addr().String())
	port, _ := strconv.Atoi(p)
	return log, uint16(port)
}

// TestServerNameOnBothPaths: a sandbox allowed one name, pinned to an
// address that serves others too, tries to reach another name there. The
// upstream's own log shows which names reached it.
func TestServerNameOnBothPaths(t *testing.T) {
	log, port := namedUpstream(t)
	f := gateway(t, []policy.Spec{pinned("allowed.test", port)}, func(c *Config) { c.HelloWait = 2 * time.Second })
	ctx := t.Context()
	target := net.JoinHostPort("allowed.test", strconv.Itoa(int(port)))

	// tunnel opens a CONNECT tunnel for the allowed name.
	tunnel := func() net.Conn {
		c, err := f.dialIn(ctx, "tcp", ProxyAddr)
		if err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(10 * time.Second))
		fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, nil)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("CONNECT %s: %v %v", target, resp, err)
		}
		if br.Buffered() > 0 {
			t.Fatal("the proxy sent more than its answer")
		}
		return c
	}
	// transparent connects to the address the resolver gave the name.
	transparent := func() net.Conn {
		addrs, err := f.lookup(ctx, "allowed.test")
		if err != nil {
			t.Fatal(err)
		}
		c, err := f.dialIn(ctx, "tcp", netip.AddrPortFrom(addrs[0], port).String())
		if err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(10 * time.Second))
		return c
	}
	handshake := func(c net.Conn, name string) error {
		defer c.Close()
		return tls.Client(c, &tls.Config{ServerName: name, InsecureSkipVerify: true}).Handshake()
	}

	if err := handshake(tunnel(), "allowed.test"); err != nil {
		t.Fatalf("CONNECT, then TLS for the allowed name: %v", err)
	}
	if !log.has("allowed.test") {
		t.Fatal("the upstream never saw the allowed name")
	}
	tests := []struct {
		name   string
		conn   func() net.Conn
		delay  time.Duration
		server string
		reason string
	}{
		// CONNECT for the allowed name, then a ClientHello for another.
		{"CONNECT then another name", tunnel, 0, "evil.test", "does not match"},
		// The same without any name (an IP address as ServerName sends
		// no SNI).
		{"CONNECT then no name", tunnel, 0, "127.0.0.1", "without a server name"},
		// Silence first: the transparent path once took a quiet client
		// for a protocol whose server speaks first after 250 ms, and let
		// the ClientHello that followed through unchecked.
		{"transparent, a slow ClientHello for another name", transparent, 600 * time.Millisecond, "evil.test", "does not match"},
		{"CONNECT, a slow ClientHello for another name", tunnel, 600 * time.Millisecond, "evil.test", "does not match"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := tt.conn()
			time.Sleep(tt.delay)
			if err := handshake(c, tt.server); err == nil {
				t.Fatalf("a handshake for %q got through", tt.server)
			}
			f.evs.wait(t, "the refusal", func(e result.EgressEvent) bool {
				return !e.Allow && strings.Contains(e.Reason, tt.reason)
			})
			if tt.server != "127.0.0.1" && log.has(tt.server) {
				t.Fatalf("the upstream saw a ClientHello for %q", tt.server)
			}
		})
	}
	if log.has("") {
		t.Fatal("the upstream saw a ClientHello without a name")
	}
}
