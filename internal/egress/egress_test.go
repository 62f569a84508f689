package egress

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/egress/policy"
	"github.com/airlockhq/airlock/internal/linux/netns"
	"github.com/airlockhq/airlock/internal/refusal"
	"github.com/airlockhq/airlock/internal/testutil/isolatednet"
	"github.com/airlockhq/airlock/result"
	"github.com/airlockhq/airlock/sandbox"
)

func hello(w http.ResponseWriter, r *http.Request) { fmt.Fprintf(w, "hello %s", r.Host) }

func pinned(host string, port uint16) policy.Spec {
	return policy.Spec{Host: host + ":" + strconv.Itoa(int(port)), Addresses: []string{"127.0.0.1"}, Private: true}
}

func TestResolverAddressMatchesSandbox(t *testing.T) {
	if got := netip.MustParseAddrPort(ResolverAddr).Addr().String(); got != sandbox.ResolverIP {
		t.Fatalf("egress serves DNS on %s but sandboxes' resolv.conf names %s", got, sandbox.ResolverIP)
	}
}

func TestProxyForwardAllowed(t *testing.T) {
	_, port := upstream(t, hello, false)
	f := gateway(t, []policy.Spec{pinned("up.test", port)}, nil)
	resp, err := f.client(nil).Get(fmt.Sprintf("http://up.test:%d/x", port))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(body) != fmt.Sprintf("hello up.test:%d", port) {
		t.Fatalf("got %d %q", resp.StatusCode, body)
	}
	ev := f.evs.wait(t, "allowed GET", func(e result.EgressEvent) bool { return e.Method == "GET" })
	want := fmt.Sprintf("127.0.0.1:%d", port)
	if !ev.Allow || ev.Kind != result.EgressProxy || ev.Address != want || ev.Status != 200 || ev.BytesIn == 0 || ev.BytesOut == 0 || ev.Sandbox != "sb1" || ev.Tool != "test" {
		t.Fatalf("event %+v; want allowed proxy GET to %s with bytes both ways", ev, want)
	}
}

func TestProxyConnectTLS(t *testing.T) {
	srv, port := upstream(t, hello, true)
	// httptest's certificate is for example.com.
	f := gateway(t, []policy.Spec{pinned("example.com", port)}, nil)
	resp, err := f.client(roots(srv)).Get(fmt.Sprintf("https://example.com:%d/", port))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.HasPrefix(string(body), "hello example.com") {
		t.Fatalf("got %d %q", resp.StatusCode, body)
	}
	ev := f.evs.wait(t, "CONNECT", func(e result.EgressEvent) bool { return e.Method == "CONNECT" })
	if !ev.Allow || ev.BytesIn == 0 || ev.BytesOut == 0 || ev.Status != 200 {
		t.Fatalf("event %+v", ev)
	}
}

// rawProxy sends one request line to the proxy and returns the status and
// body.
func rawProxy(t *testing.T, f *fixture, req string) (int, string) {
	t.Helper()
	status, _, body := rawProxyStatus(t, f, req)
	return status, body
}

// rawProxyStatus is rawProxy with the status line's text too.
func rawProxyStatus(t *testing.T, f *fixture, req string) (int, string, string) {
	t.Helper()
	c, err := f.dialIn(t.Context(), "tcp", ProxyAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, req); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Status, string(body)
}

func TestProxyRefusals(t *testing.T) {
	_, port := upstream(t, hello, false)
	f := gateway(t, []policy.Spec{
		pinned("up.test", port),
		{Host: "localhost:" + strconv.Itoa(int(port))}, // listed, but resolves to loopback without private
		{Host: "*.google.internal:80"},                 // must not cover metadata.google.internal
	}, nil)
	tests := []struct {
		name, req string
		status    int
		reason    string // in the answer's body
		code      string // of the refusal's event
	}{
		{"unlisted name", "GET http://evil.test/ HTTP/1.1\r\nHost: evil.test\r\n\r\n", 403, "not an allowed destination", result.EgressNotAllowed},
		{"unlisted name connect", "CONNECT evil.test:443 HTTP/1.1\r\nHost: evil.test:443\r\n\r\n", 403, "not an allowed destination", result.EgressNotAllowed},
		{"unlisted port", fmt.Sprintf("CONNECT up.test:%d HTTP/1.1\r\nHost: up.test\r\n\r\n", port+1), 403, "port", result.EgressNotAllowed},
		{"metadata ip", "GET http://169.254.169.254/latest/meta-data/ HTTP/1.1\r\nHost: 169.254.169.254\r\n\r\n", 403, "", result.EgressMetadata},
		{"metadata decimal", "GET http://2852039166/ HTTP/1.1\r\nHost: 2852039166\r\n\r\n", 403, "", result.EgressMetadata},
		{"metadata hex connect", "CONNECT 0xA9FEA9FE:80 HTTP/1.1\r\nHost: x\r\n\r\n", 403, "", result.EgressMetadata},
		{"metadata name under wildcard", "GET http://metadata.google.internal/ HTTP/1.1\r\nHost: metadata.google.internal\r\n\r\n", 403, "metadata", result.EgressMetadata},
		{"internal address connect", fmt.Sprintf("CONNECT 127.0.0.1:%d HTTP/1.1\r\nHost: x\r\n\r\n", port), 403, "", result.EgressNotAllowed},
		{"short loopback", fmt.Sprintf("CONNECT 127.1:%d HTTP/1.1\r\nHost: x\r\n\r\n", port), 403, "", result.EgressNotAllowed},
		{"ipv6 loopback", fmt.Sprintf("CONNECT [::1]:%d HTTP/1.1\r\nHost: x\r\n\r\n", port), 403, "", result.EgressNotAllowed},
		{"mapped metadata", "CONNECT [::ffff:169.254.169.254]:80 HTTP/1.1\r\nHost: x\r\n\r\n", 403, "", result.EgressMetadata},
		{"listed name resolving to loopback", fmt.Sprintf("GET http://localhost:%d/ HTTP/1.1\r\nHost: localhost\r\n\r\n", port), 403, "loopback", result.EgressPrivate},
		{"connect without port", "CONNECT up.test HTTP/1.1\r\nHost: up.test\r\n\r\n", 400, "", result.EgressMalformed},
		{"origin form", "GET / HTTP/1.1\r\nHost: up.test\r\n\r\n", 400, "not a proxy request", result.EgressMalformed},
		{"https absolute form", "GET https://up.test/ HTTP/1.1\r\nHost: up.test\r\n\r\n", 400, "CONNECT", result.EgressMalformed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := f.evs.count()
			status, line, body := rawProxyStatus(t, f, tt.req)
			if status != tt.status || !strings.Contains(body, tt.reason) || !strings.HasPrefix(body, "airlock ") {
				t.Fatalf("got %d %q, want %d mentioning %q", status, body, tt.status, tt.reason)
			}
			// A refused tunnel says so in its status line, which is all
			// most clients show of it.
			if connect := strings.HasPrefix(tt.req, "CONNECT"); connect && status == 403 && line != "403 "+refusal.ConnectPhrase || !connect && line != fmt.Sprintf("%d %s", status, http.StatusText(status)) {
				t.Errorf("status line %q", line)
			}
			// The refusal is logged, with its code and a reason, before
			// it is answered.
			f.evs.mu.Lock()
			defer f.evs.mu.Unlock()
			if len(f.evs.evs) != n+1 {
				t.Fatalf("got %d events for one refusal: %+v", len(f.evs.evs)-n, f.evs.evs[n:])
			}
			if ev := f.evs.evs[n]; ev.Allow || ev.Code != tt.code || ev.Reason == "" || ev.Address != "" {
				t.Errorf("refusal logged as %+v, want code %s", ev, tt.code)
			}
		})
	}
}

func TestProxyDoesNotFollowRedirectToMetadata(t *testing.T) {
	_, port := upstream(t, func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "http://169.254.169.254/latest/meta-data/iam", http.StatusFound)
	}, false)
	f := gateway(t, []policy.Spec{pinned("up.test", port)}, nil)
	// The proxy hands the redirect back as is.
	status, _ := rawProxy(t, f, fmt.Sprintf("GET http://up.test:%d/ HTTP/1.1\r\nHost: up.test\r\n\r\n", port))
	if status != http.StatusFound {
		t.Fatalf("got %d, want the 302 itself", status)
	}
	// A client that follows it asks the proxy again, and is refused.
	resp, err := f.client(nil).Get(fmt.Sprintf("http://up.test:%d/", port))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("following the redirect got %d, want 403", resp.StatusCode)
	}
	f.evs.wait(t, "metadata refusal", func(e result.EgressEvent) bool {
		return !e.Allow && strings.HasPrefix(e.Destination, "169.254.169.254")
	})
}

func TestDNS(t *testing.T) {
	f := gateway(t, []policy.Spec{
		{Host: "api.example.com"},
		{Host: "*.cdn.example.com"},
		{Host: "*.google.internal"},
	}, nil)
	ctx := t.Context()
	a, err := f.lookup(ctx, "api.example.com")
	if err != nil || len(a) != 1 || !a[0].Is4() || a[0].As4()[0] != 127 || a[0].As4()[1] != 1 {
		t.Fatalf("allowed name: got %v, %v; want one 127.1.x.y address", a, err)
	}
	again, err := f.lookup(ctx, "API.example.com.")
	if err != nil || len(again) != 1 || again[0] != a[0] {
		t.Fatalf("same name again: got %v, %v; want %v", again, err, a[0])
	}
	b, err := f.lookup(ctx, "img.cdn.example.com")
	if err != nil || len(b) != 1 || b[0] == a[0] {
		t.Fatalf("wildcard name: got %v, %v; want an address of its own", b, err)
	}
	refused := []string{
		"example.com",     // apex not covered by a wildcard of a subdomain
		"cdn.example.com", // wildcard's own apex
		"evil.test",       // unlisted
		"metadata.google.internal",
		"mfrggzdfmztwq2lknnwg23tpobyxe43uov3ho6dzpjqwezdfmztwq2lknnwg23tpobyxe.evil.test", // exfiltration-shaped
	}
	for _, n := range refused {
		if got, err := f.lookup(ctx, n); err == nil {
			t.Errorf("lookup %q: got %v, want refused", n, got)
		}
	}
	f.evs.wait(t, "refused lookup logged", func(e result.EgressEvent) bool {
		return e.Kind == result.EgressDNS && !e.Allow && e.Destination == "evil.test" && e.Code == result.EgressNotAllowed
	})
	f.evs.wait(t, "allowed lookup logged", func(e result.EgressEvent) bool {
		return e.Kind == result.EgressDNS && e.Allow && e.Destination == "api.example.com" && e.Address == a[0].String()
	})
}

func TestTransparent(t *testing.T) {
	plain, pport := upstream(t, hello, false)
	_ = plain
	srv, tport := upstream(t, hello, true)
	f := gateway(t, []policy.Spec{
		pinned("plain.test", pport),
		pinned("example.com", tport),
	}, nil)
	ctx := t.Context()
	addrs, err := f.lookup(ctx, "plain.test")
	if err != nil {
		t.Fatal(err)
	}
	// Plain HTTP, no proxy: the client connects to the address the
	// resolver handed out.
	noProxy := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			_, p, _ := net.SplitHostPort(addr)
			return f.dialIn(ctx, network, net.JoinHostPort(addrs[0].String(), p))
		},
		DisableKeepAlives: true,
	}}
	resp, err := noProxy.Get(fmt.Sprintf("http://plain.test:%d/", pport))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != fmt.Sprintf("hello plain.test:%d", pport) {
		t.Fatalf("got %q", body)
	}
	ev := f.evs.wait(t, "transparent plain", func(e result.EgressEvent) bool { return e.Kind == result.EgressTransparent })
	if !ev.Allow || ev.Method != "GET" || ev.Status != 200 || ev.Address != fmt.Sprintf("127.0.0.1:%d", pport) || ev.BytesIn == 0 {
		t.Fatalf("event %+v", ev)
	}

	taddrs, err := f.lookup(ctx, "example.com")
	if err != nil {
		t.Fatal(err)
	}
	tlsTo := func(serverName string) error {
		c, err := f.dialIn(ctx, "tcp", net.JoinHostPort(taddrs[0].String(), strconv.Itoa(int(tport))))
		if err != nil {
			return err
		}
		defer c.Close()
		tc := tls.Client(c, &tls.Config{ServerName: serverName, RootCAs: roots(srv), InsecureSkipVerify: serverName != "example.com"})
		tc.SetDeadline(time.Now().Add(5 * time.Second))
		return tc.Handshake()
	}
	if err := tlsTo("example.com"); err != nil {
		t.Fatalf("TLS with the right server name: %v", err)
	}
	if err := tlsTo("other.example.net"); err == nil {
		t.Fatal("TLS with another server name got through")
	}
	f.evs.wait(t, "SNI mismatch refusal", func(e result.EgressEvent) bool {
		return e.Kind == result.EgressTransparent && !e.Allow && e.Code == result.EgressSNIMismatch
	})
	// A port the destination does not list has no listener at all.
	if c, err := f.dialIn(ctx, "tcp", net.JoinHostPort(taddrs[0].String(), "22")); err == nil {
		c.Close()
		t.Fatal("connected to an unlisted port of a transparent address")
	}
}

func TestConnectionCap(t *testing.T) {
	_, port := upstream(t, hello, false)
	f := gateway(t, []policy.Spec{pinned("up.test", port)}, func(c *Config) { c.Limits.Connections = 2 })
	var held []net.Conn
	for range 2 {
		c, err := f.dialIn(t.Context(), "tcp", ProxyAddr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		fmt.Fprintf(c, "CONNECT up.test:%d HTTP/1.1\r\nHost: up.test\r\n\r\n", port)
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("CONNECT: %v %v", resp, err)
		}
		held = append(held, c)
	}
	status, body := rawProxy(t, f, fmt.Sprintf("CONNECT up.test:%d HTTP/1.1\r\nHost: up.test\r\n\r\n", port))
	if status != http.StatusTooManyRequests || !strings.Contains(body, "connection limit") {
		t.Fatalf("third connection got %d %q, want 429", status, body)
	}
	held[0].Close()
	f.evs.wait(t, "closed tunnel logged", func(e result.EgressEvent) bool { return e.Allow && e.Method == "CONNECT" && e.Status == 200 })
	f.evs.wait(t, "capped connection logged as denied", func(e result.EgressEvent) bool {
		return !e.Allow && e.Status == http.StatusTooManyRequests && e.Code == result.EgressCapped
	})
	if status, _ := rawProxy(t, f, fmt.Sprintf("GET http://up.test:%d/ HTTP/1.1\r\nHost: up.test\r\n\r\n", port)); status != 200 {
		t.Fatalf("after one closed, got %d", status)
	}
}

func TestByteCap(t *testing.T) {
	big := strings.Repeat("x", 8<<20)
	_, port := upstream(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, big) }, false)
	// Opaque, so that the tunnel is spliced (plain HTTP in a tunnel to a
	// checked destination is relayed request by request, each counted
	// as an absolute-form request is, below).
	spec := pinned("up.test", port)
	spec.Opaque = true
	f := gateway(t, []policy.Spec{spec}, func(c *Config) { c.Limits.Bytes = 3 << 20 })
	c, err := f.dialIn(t.Context(), "tcp", ProxyAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "CONNECT up.test:%d HTTP/1.1\r\nHost: up.test\r\n\r\n", port)
	br := bufio.NewReader(c)
	if resp, err := http.ReadResponse(br, nil); err != nil || resp.StatusCode != 200 {
		t.Fatalf("CONNECT: %v", err)
	}
	fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: up.test\r\n\r\n")
	n, _ := io.Copy(io.Discard, br)
	if n >= 8<<20 || n < 2<<20 {
		t.Fatalf("read %d bytes through a 3 MiB cap", n)
	}
	ev := f.evs.wait(t, "cut tunnel", func(e result.EgressEvent) bool { return e.Method == "CONNECT" })
	if !ev.Allow || ev.Code != result.EgressCapped || ev.BytesIn > 4<<20 {
		t.Fatalf("event %+v", ev)
	}
	// Once spent, nothing more is dialed.
	if status, body := rawProxy(t, f, fmt.Sprintf("GET http://up.test:%d/ HTTP/1.1\r\nHost: up.test\r\n\r\n", port)); status != http.StatusTooManyRequests {
		t.Fatalf("after the cap got %d %q", status, body)
	}
}

// fakeResolver answers from a map, standing in for the host's resolver.
type fakeResolver map[string][]netip.Addr

func (f fakeResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if a, ok := f[host]; ok {
		return a, nil
	}
	return nil, errors.New("no such host")
}

func TestResolvedAddressesClassified(t *testing.T) {
	res := fakeResolver{
		"rebind.test":  {netip.MustParseAddr("169.254.169.254")},
		"mixed.test":   {netip.MustParseAddr("10.1.2.3"), netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("8.8.8.8")},
		"v6.test":      {netip.MustParseAddr("::ffff:127.0.0.1"), netip.MustParseAddr("64:ff9b::a9fe:a9fe")},
		"private.test": {netip.MustParseAddr("10.1.2.3")},
	}
	f := gateway(t, []policy.Spec{{Host: "rebind.test:80"}, {Host: "mixed.test:80"}, {Host: "v6.test:80"}, {Host: "gone.test:80"}, {Host: "private.test:80"}},
		func(c *Config) { c.Resolver = res; c.DialTimeout = 500 * time.Millisecond })
	tests := []struct {
		host   string
		status int
		reason string // in the answer's body
		code   string // of the event
	}{
		{"rebind.test", 403, "metadata", result.EgressMetadata},
		// A private address says what would allow it, as the config's
		// error does (and metadata, which nothing allows, does not).
		{"private.test", 403, "address 10.1.2.3 is private; set private: true to allow it", result.EgressPrivate},
		{"v6.test", 403, "", result.EgressPrivate},
		{"gone.test", 403, "could not resolve", result.EgressLookupFailed},
		// Only the public address is dialed; this namespace has no route
		// to it, so the dial fails here instead of leaving the machine.
		{"mixed.test", 502, "", result.EgressUpstreamFailed},
	}
	for _, tt := range tests {
		status, body := rawProxy(t, f, fmt.Sprintf("GET http://%s/ HTTP/1.1\r\nHost: %s\r\n\r\n", tt.host, tt.host))
		if status != tt.status || !strings.Contains(body, tt.reason) || tt.code == result.EgressMetadata && strings.Contains(body, "private: true") {
			t.Errorf("%s: got %d %q, want %d %q", tt.host, status, body, tt.status, tt.reason)
		}
		ev := f.evs.wait(t, tt.host, func(e result.EgressEvent) bool { return strings.HasPrefix(e.Destination, tt.host) })
		if ev.Code != tt.code || ev.Allow != (tt.status == 502) {
			t.Errorf("%s: event %+v, want code %s", tt.host, ev, tt.code)
		}
	}
}

func TestCloseCutsConnections(t *testing.T) {
	_, port := upstream(t, func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() }, false)
	f := gateway(t, []policy.Spec{pinned("up.test", port)}, nil)
	c, err := f.dialIn(t.Context(), "tcp", ProxyAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "CONNECT up.test:%d HTTP/1.1\r\nHost: up.test\r\n\r\n", port)
	if resp, err := http.ReadResponse(bufio.NewReader(c), nil); err != nil || resp.StatusCode != 200 {
		t.Fatalf("CONNECT: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := f.gw.Close(ctx); err != nil {
		t.Fatal(err)
	}
	f.evs.wait(t, "tunnel logged at close", func(e result.EgressEvent) bool { return e.Method == "CONNECT" && e.Allow })
	if _, err := f.dialIn(t.Context(), "tcp", ProxyAddr); err == nil {
		t.Fatal("proxy still listening after Close")
	}
}

func TestInboundConnectionsBounded(t *testing.T) {
	_, port := upstream(t, hello, false)
	f := gateway(t, []policy.Spec{pinned("up.test", port)}, func(c *Config) { c.Limits.Connections = 1 })
	// Idle connections to the proxy hold every inbound slot...
	var idle []net.Conn
	for range 1 + inboundSlack {
		c, err := f.dialIn(t.Context(), "tcp", ProxyAddr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		idle = append(idle, c)
	}
	// ...so the next one is accepted by the kernel but not served.
	c, err := f.dialIn(t.Context(), "tcp", ProxyAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "GET http://up.test:%d/ HTTP/1.1\r\nHost: up.test\r\n\r\n", port)
	c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Fatal("a connection beyond the inbound bound was served")
	}
	// Freeing one slot lets it through.
	idle[0].Close()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("after a slot freed: %v %v", resp, err)
	}
}

// TestTransparentServerSpeaksFirst: a protocol whose server speaks first
// (SSH) carries nothing to check, so it goes through only to a destination
// marked opaque. Elsewhere a client that sends nothing is refused once the
// gateway's wait is over: silence used to be taken for such a protocol
// after 250 ms and let through unchecked, and a ClientHello sent after
// that, for any name, went upstream with it.
func TestTransparentServerSpeaksFirst(t *testing.T) {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var upstream atomic.Int64
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			upstream.Add(1)
			io.WriteString(c, "SSH-2.0-test\r\n")
			c.Close()
		}
	}()
	port := uint16(ln.Addr().(*net.TCPAddr).Port)
	opaque := pinned("ssh.test", port)
	opaque.Opaque = true
	f := gateway(t, []policy.Spec{opaque, pinned("strict.test", port)}, func(c *Config) { c.HelloWait = 300 * time.Millisecond })
	banner := func(name string) (string, error) {
		addrs, err := f.lookup(t.Context(), name)
		if err != nil {
			t.Fatal(err)
		}
		c, err := f.dialIn(t.Context(), "tcp", netip.AddrPortFrom(addrs[0], port).String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		return bufio.NewReader(c).ReadString('\n')
	}
	if b, err := banner("ssh.test"); err != nil || b != "SSH-2.0-test\r\n" {
		t.Fatalf("opaque destination: got %q, %v; want the server's banner", b, err)
	}
	if b, err := banner("strict.test"); err == nil || b != "" {
		t.Fatalf("a silent client of a strict destination got %q, %v", b, err)
	}
	ev := f.evs.wait(t, "silent client refused", func(e result.EgressEvent) bool {
		return strings.HasPrefix(e.Destination, "strict.test") && e.Code == result.EgressSilent
	})
	if ev.Allow || upstream.Load() != 1 {
		t.Fatalf("the silent client's connection: %+v, upstream saw %d connections (want only the opaque one's)", ev, upstream.Load())
	}
}

// A sandbox chooses the destination string; the log keeps a bounded
// piece of it.
func TestLongDestinationBounded(t *testing.T) {
	f := gateway(t, nil, nil)
	host := strings.Repeat("a", 60) + "." + strings.Repeat("b", 8000) + ".test"
	status, _ := rawProxy(t, f, "CONNECT "+host+":443 HTTP/1.1\r\nHost: x\r\n\r\n")
	if status != http.StatusForbidden {
		t.Fatalf("got %d", status)
	}
	ev := f.evs.wait(t, "refusal", func(result.EgressEvent) bool { return true })
	if len(ev.Destination) > maxLogged+3 || len(ev.Reason) > 1024 {
		t.Fatalf("event holds %d bytes of destination and %d of reason", len(ev.Destination), len(ev.Reason))
	}
}

// TestQuiet: a gateway is quiet until something reaches it from the
// sandbox (a resolver query, a connection to the proxy, even one that
// sends nothing), and never quiet again.
func TestQuiet(t *testing.T) {
	ctx := t.Context()
	for _, tc := range []struct {
		name string
		poke func(*fixture) error
	}{
		{"a lookup", func(f *fixture) error { _, _ = f.lookup(ctx, "evil.test"); return nil }},
		{"a connection that sends nothing", func(f *fixture) error {
			c, err := f.dialIn(ctx, "tcp4", ProxyAddr)
			if err != nil {
				return err
			}
			return c.Close()
		}},
		{"a proxy request", func(f *fixture) error {
			resp, err := f.client(nil).Get("http://evil.test/")
			if err == nil {
				resp.Body.Close()
			}
			return nil
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := gateway(t, nil, nil)
			if !f.gw.Quiet() {
				t.Fatal("a fresh gateway is not quiet")
			}
			if err := tc.poke(f); err != nil {
				t.Fatal(err)
			}
			deadline := time.Now().Add(2 * time.Second)
			for f.gw.Quiet() {
				if time.Now().After(deadline) {
					t.Fatalf("still quiet after %s", tc.name)
				}
				time.Sleep(5 * time.Millisecond)
			}
		})
	}
}

// TestCloseWhileStarting: a gateway closed while its first use starts
// its proxy and resolver never serves after Close returns, and its
// sockets are closed by one of the two, never while the other copies
// them (the race detector saw Close close them under the copy, a
// descriptor that could have been reused for another file meanwhile).
func TestCloseWhileStarting(t *testing.T) {
	for i := range 30 {
		f := gateway(t, nil, nil)
		c, err := f.dialIn(t.Context(), "tcp4", ProxyAddr)
		if err != nil {
			t.Fatal(err)
		}
		c.Close()
		if i%2 == 1 {
			time.Sleep(time.Duration(i) * 20 * time.Microsecond)
		}
		if err := f.gw.Close(t.Context()); err != nil {
			t.Fatal(err)
		}
		if c, err := f.dialIn(t.Context(), "tcp4", ProxyAddr); err == nil {
			c.Close()
			t.Fatalf("round %d: the proxy still accepts after Close", i)
		}
	}
}

// serving reports whether the gateway has made its proxy and resolver.
func (g *Gateway) serving() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.proxy != nil
}

// TestStartedOnFirstUse: a gateway holds its three sockets from Attach
// on but makes its proxy and resolver only when something arrives on one
// of them, and whatever arrives first (a UDP query, a TCP query, a proxy
// request) is served and decided as by a gateway serving from the start.
// One never used closes without having served, and frees its addresses
// and goroutines.
func TestStartedOnFirstUse(t *testing.T) {
	ctx := t.Context()
	tcpLookup := func(f *fixture, name string) error {
		r := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return f.dialIn(ctx, "tcp4", ResolverAddr)
		}}
		_, err := r.LookupNetIP(ctx, "ip4", name)
		return err
	}
	for _, tc := range []struct {
		name string
		poke func(*fixture) error
		want func(result.EgressEvent) bool
	}{
		{"a query over UDP", func(f *fixture) error { _, err := f.lookup(ctx, "udp.evil.test"); return err },
			func(e result.EgressEvent) bool {
				return e.Kind == result.EgressDNS && e.Destination == "udp.evil.test" && !e.Allow
			}},
		{"a query over TCP", func(f *fixture) error { return tcpLookup(f, "tcp.evil.test") },
			func(e result.EgressEvent) bool {
				return e.Kind == result.EgressDNS && e.Destination == "tcp.evil.test" && !e.Allow
			}},
		{"a proxy request", func(f *fixture) error {
			resp, err := f.client(nil).Get("http://proxy.evil.test/")
			if err != nil {
				return err
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusForbidden {
				return fmt.Errorf("status %d, want 403", resp.StatusCode)
			}
			return nil
		}, func(e result.EgressEvent) bool { return e.Method == "GET" && !e.Allow }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := gateway(t, nil, nil)
			time.Sleep(20 * time.Millisecond)
			if f.gw.serving() {
				t.Fatal("the gateway made its proxy and resolver before anything arrived")
			}
			err := tc.poke(f)
			var dnsErr *net.DNSError
			if errors.As(err, &dnsErr) && !dnsErr.IsTimeout {
				err = nil // refused, as it should be: answered
			}
			if err != nil {
				t.Fatalf("%s: %v", tc.name, err)
			}
			f.evs.wait(t, tc.name+" decided", tc.want)
			if !f.gw.serving() {
				t.Fatal("answered, but not serving")
			}
			if f.gw.Quiet() {
				t.Fatal("quiet after serving")
			}
		})
	}
	t.Run("never used", func(t *testing.T) {
		isolatednet.Require(t)
		ns, err := netns.New()
		if err != nil {
			t.Fatal(err)
		}
		defer ns.Close()
		before := runtime.NumGoroutine()
		gw, err := Attach(ctx, ns, Config{Tool: "test", SandboxID: "sb1"})
		if err != nil {
			t.Fatal(err)
		}
		// At most one goroutine of its own (the watch); the count is the
		// whole process's, so what other code has just ended (the thread
		// that entered the namespace, say) is let finish.
		for deadline := time.Now().Add(2 * time.Second); runtime.NumGoroutine()-before > 1; time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("an unused gateway runs %d goroutines, want at most 1", runtime.NumGoroutine()-before)
			}
		}
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		if err := gw.Close(cctx); err != nil {
			t.Fatal(err)
		}
		if gw.serving() {
			t.Error("closed unused, yet serving")
		}
		for deadline := time.Now().Add(2 * time.Second); runtime.NumGoroutine() > before; time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%d goroutines after Close, %d before Attach", runtime.NumGoroutine(), before)
			}
		}
		// The addresses are free: nothing listens, and a new gateway
		// (a session's next binding) can take them.
		f := &fixture{ns: ns}
		if c, err := f.dialIn(ctx, "tcp4", ProxyAddr); err == nil {
			c.Close()
			t.Fatal("the proxy's address still accepts after Close")
		}
		again, err := Attach(ctx, ns, Config{Tool: "test", SandboxID: "sb1"})
		if err != nil {
			t.Fatalf("attach again: %v", err)
		}
		if err := again.Close(cctx); err != nil {
			t.Fatal(err)
		}
	})
}
