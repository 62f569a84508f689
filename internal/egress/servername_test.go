package egress

import (
	"bufio"
	"crypto/ecdh"
	"crypto/rand"
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

// TestHostOnTheTransparentPath: plain HTTP to an allowed name's address
// must name that host in every request: a Host for another site served at
// the same address is refused (421), on a fresh connection and on one that
// already carried an allowed request (a refusal closes the connection),
// and a connection that is neither TLS
// nor HTTP/1 goes nowhere. The upstream's own log shows which hosts it
// was asked for.
func TestHostOnTheTransparentPath(t *testing.T) {
	var mu sync.Mutex
	var hosts []string
	var conns int
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		hosts = append(hosts, r.Host)
		mu.Unlock()
		io.WriteString(w, "hello")
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			mu.Lock()
			conns++
			mu.Unlock()
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	_, p, _ := net.SplitHostPort(srv.Listener.Addr().String())
	pn, _ := strconv.Atoi(p)
	port := uint16(pn)
	f := gateway(t, []policy.Spec{pinned("web.test", port)}, func(c *Config) { c.HelloWait = 2 * time.Second })
	addrs, err := f.lookup(t.Context(), "web.test")
	if err != nil {
		t.Fatal(err)
	}
	open := func() (net.Conn, *bufio.Reader) {
		c, err := f.dialIn(t.Context(), "tcp", netip.AddrPortFrom(addrs[0], port).String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		c.SetDeadline(time.Now().Add(10 * time.Second))
		return c, bufio.NewReader(c)
	}
	get := func(c net.Conn, br *bufio.Reader, host string) int {
		fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: %s\r\n\r\n", host)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			return 0
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	own := net.JoinHostPort("web.test", p)
	c, br := open()
	if st := get(c, br, own); st != 200 {
		t.Fatalf("GET with Host %s: %d", own, st)
	}
	// The same connection, kept alive, then another host.
	if st := get(c, br, "evil.test"); st != http.StatusMisdirectedRequest {
		t.Fatalf("a second request for evil.test on the connection: %d, want 421", st)
	}
	c, br = open()
	if st := get(c, br, "evil.test:"+p); st != http.StatusMisdirectedRequest {
		t.Fatalf("GET with Host evil.test: %d, want 421", st)
	}
	if _, err := br.ReadByte(); err == nil {
		t.Fatal("the connection stayed open after a refusal")
	}
	c, br = open()
	if st := get(c, br, "web.test"); st != 200 {
		t.Fatalf("GET with Host web.test (no port): %d", st)
	}
	f.evs.wait(t, "the Host refusal", func(e result.EgressEvent) bool {
		return e.Kind == result.EgressTransparent && !e.Allow && e.Status == http.StatusMisdirectedRequest && strings.Contains(e.Reason, `"evil.test`)
	})
	for _, tt := range []struct{ send, reason string }{
		{"SSH-2.0-client\r\n", "neither TLS nor HTTP/1"},
		{"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", "h2c"},
	} {
		c, br := open()
		io.WriteString(c, tt.send)
		if _, err := br.ReadByte(); err == nil {
			t.Fatalf("%q: the gateway answered", tt.send)
		}
		f.evs.wait(t, "refusal of "+tt.send, func(e result.EgressEvent) bool { return !e.Allow && strings.Contains(e.Reason, tt.reason) })
	}
	mu.Lock()
	defer mu.Unlock()
	for _, h := range hosts {
		if strings.HasPrefix(h, "evil.test") {
			t.Fatalf("the upstream was asked for %q (all: %q)", h, hosts)
		}
	}
	if len(hosts) != 2 {
		t.Fatalf("the upstream served %q, want the two allowed requests", hosts)
	}
}

func TestNotHTTP1(t *testing.T) {
	for _, tt := range []struct {
		line string
		ok   bool
	}{
		{"GET / HTTP/1.1", true},
		{"POST /a?b HTTP/1.0\r", true},
		{"OPTIONS * HTTP/1.1", true},
		{"get / HTTP/1.1", false},
		{"GET / HTTP/2.0", false},
		{"PRI * HTTP/2.0", false},
		{"GET  / HTTP/1.1", false},
		{"GET /", false},
		{"SSH-2.0-OpenSSH_9.6", false},
		{"", false},
	} {
		if got := notHTTP1([]byte(tt.line)) == ""; got != tt.ok {
			t.Errorf("notHTTP1(%q) ok = %v, want %v", tt.line, got, tt.ok)
		}
	}
}

func TestSameHost(t *testing.T) {
	for _, tt := range []struct {
		authority string
		ok        bool
	}{
		{"web.test", true},
		{"WEB.test:8080", true},
		{"web.test.:8080", true},
		{"web.test:80", false},
		{"evil.test:8080", false},
		{"web.test.evil.test", false},
		{"[::1]:8080", false},
		{"", false},
	} {
		if got := sameHost(tt.authority, "web.test", 8080); got != tt.ok {
			t.Errorf("sameHost(%q) = %v, want %v", tt.authority, got, tt.ok)
		}
	}
}

// echConfigList builds an ECHConfigList (RFC 9849) with one config for
// publicName and a fresh X25519 key: enough for Go's TLS client to offer
// Encrypted Client Hello.
func echConfigList(t *testing.T, publicName string) []byte {
	t.Helper()
	key, err := ecdh.X25519().GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	var c []byte
	c = append(c, 7)          // config_id
	c = append(c, 0x00, 0x20) // kem_id: DHKEM(X25519, HKDF-SHA256)
	pub := key.PublicKey().Bytes()
	c = append(c, byte(len(pub)>>8), byte(len(pub)))
	c = append(c, pub...)
	c = append(c, 0, 4, 0x00, 0x01, 0x00, 0x01) // HKDF-SHA256, AES-128-GCM
	c = append(c, 64)                           // maximum_name_length
	c = append(c, byte(len(publicName)))
	c = append(c, publicName...)
	c = append(c, 0, 0) // no extensions
	cfg := append([]byte{0xfe, 0x0d, byte(len(c) >> 8), byte(len(c))}, c...)
	return append([]byte{byte(len(cfg) >> 8), byte(len(cfg))}, cfg...)
}

// TestECHRefused: a real TLS client offering Encrypted Client Hello shows
// an outer name and hides the one it wants served. Its ClientHello is
// refused on both paths, named as such, and the upstream never sees it.
func TestECHRefused(t *testing.T) {
	log, port := namedUpstream(t)
	f := gateway(t, []policy.Spec{pinned("allowed.test", port)}, nil)
	ctx := t.Context()
	addrs, err := f.lookup(ctx, "allowed.test")
	if err != nil {
		t.Fatal(err)
	}
	c, err := f.dialIn(ctx, "tcp", netip.AddrPortFrom(addrs[0], port).String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	tc := tls.Client(c, &tls.Config{ServerName: "hidden.test", MinVersion: tls.VersionTLS13,
		EncryptedClientHelloConfigList: echConfigList(t, "allowed.test"), InsecureSkipVerify: true})
	if err := tc.Handshake(); err == nil {
		t.Fatal("a handshake offering ECH got through")
	}
	f.evs.wait(t, "the ECH refusal", func(e result.EgressEvent) bool {
		return !e.Allow && strings.Contains(e.Reason, "Encrypted Client Hello")
	})
	if log.has("allowed.test") || log.has("hidden.test") {
		t.Fatalf("the upstream saw a ClientHello: %q", log.names)
	}
}
