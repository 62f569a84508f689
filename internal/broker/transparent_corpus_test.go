package broker

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/broker/sandboxca"
	"github.com/airlockhq/airlock/internal/egress"
	"github.com/airlockhq/airlock/internal/egress/policy"
	"github.com/airlockhq/airlock/result"
)

// TestTransparentBypassCorpus is the bypass corpus of transparent brokering,
// through the real path: a sandbox's egress gateway that terminates TLS
// for the brokered name (example.com, reached by CONNECT through the
// proxy and at the name's transparent address) with the sandbox's own
// authority, and the broker behind it. Each row is an attack, the
// answer it must meet and the events it must leave; what the upstream
// (the far side) logged is checked after each: an attack that must not
// reach it did not, and nothing it saw was the attack's.
func TestTransparentBypassCorpus(t *testing.T) {
	u := newUpstream(t, true)
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(caFile, pemOf(u.srv), 0o600); err != nil {
		t.Fatal(err)
	}
	yaml := strings.Replace(svcYAML(u, ""), "    private: true\n", "    private: true\n    ca: "+caFile+"\n    transparent: true\n", 1)
	yaml = strings.Replace(yaml, "https://upstream.test", "https://example.com", 1)
	f := attach(t, yaml)
	upURL, _ := url.Parse(u.srv.URL)
	p, _ := strconv.ParseUint(upURL.Port(), 10, 16)
	port := uint16(p)
	authority := "example.com:" + upURL.Port()
	ca, err := sandboxca.New([]string{"example.com"})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var egs []result.EgressEvent
	gw, err := egress.Attach(t.Context(), f.ns, egress.Config{
		Tool: "t", SandboxID: "sb1", Policy: policy.New(nil), DialTimeout: 2 * time.Second, HelloWait: 2 * time.Second,
		OnEvent: func(ev result.EgressEvent) {
			mu.Lock()
			egs = append(egs, ev)
			mu.Unlock()
		},
		Intercept: &egress.Interception{
			Ports:   map[string]uint16{"example.com": port},
			Handler: func(n string) http.Handler { return f.b.Transparent(n) },
			TLS:     &tls.Config{GetCertificate: ca.GetCertificate, MinVersion: tls.VersionTLS12, NextProtos: []string{"h2", "http/1.1"}},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { gw.Close(context.Background()) })
	// egressEvent waits for an event of the gateway after the first n.
	egressEvent := func(t *testing.T, n int, match func(result.EgressEvent) bool) result.EgressEvent {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			mu.Lock()
			for _, ev := range egs[n:] {
				if match(ev) {
					mu.Unlock()
					return ev
				}
			}
			mu.Unlock()
		}
		mu.Lock()
		defer mu.Unlock()
		t.Fatalf("no such egress event among %+v", egs[n:])
		return result.EgressEvent{}
	}
	trusted := x509.NewCertPool()
	trusted.AppendCertsFromPEM(ca.CertPEM())
	ctx := t.Context()

	// The ways in: a CONNECT through the proxy, and the name's
	// transparent address (a client that ignores HTTPS_PROXY).
	connect := func(t *testing.T) net.Conn {
		c, err := f.dialIn(ctx, "tcp", egress.ProxyAddr)
		if err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(10 * time.Second))
		fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", authority, authority)
		// The gateway sends nothing after its answer until the client
		// speaks: nothing is left in the reader.
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("CONNECT: %v %v", resp, err)
		}
		return c
	}
	direct := func(t *testing.T) net.Conn {
		r := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return f.dialIn(ctx, network, egress.ResolverAddr)
		}}
		addrs, err := r.LookupNetIP(ctx, "ip4", "example.com")
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
	handshake := func(t *testing.T, c net.Conn, server string, roots *x509.CertPool, protos ...string) (*tls.Conn, error) {
		if len(protos) == 0 {
			protos = []string{"http/1.1"}
		}
		tc := tls.Client(c, &tls.Config{ServerName: server, RootCAs: roots, NextProtos: protos})
		return tc, tc.Handshake()
	}
	// h1 sends raw requests (byte for byte) over TLS naming example.com
	// and reads every answer.
	h1 := func(raw string) func(*testing.T, net.Conn) []string {
		return func(t *testing.T, c net.Conn) []string {
			tc, err := handshake(t, c, "example.com", trusted)
			if err != nil {
				t.Fatalf("handshake: %v", err)
			}
			io.WriteString(tc, raw)
			br := bufio.NewReader(tc)
			var answers []string
			for {
				resp, err := http.ReadResponse(br, nil)
				if err != nil {
					return answers
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				answers = append(answers, fmt.Sprintf("%d %s %s", resp.StatusCode, resp.Header, b))
				// The connection stays open: an answer to what was
				// sent follows at once, or none is coming.
				tc.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
			}
		}
	}
	// h2 sends one request over HTTP/2 with the given :authority.
	h2 := func(method, path, host string) func(*testing.T, net.Conn) []string {
		return func(t *testing.T, c net.Conn) []string {
			tc, err := handshake(t, c, "example.com", trusted, "h2")
			if err != nil || tc.ConnectionState().NegotiatedProtocol != "h2" {
				t.Fatalf("handshake: %v, protocol %q", err, tc.ConnectionState().NegotiatedProtocol)
			}
			tr := &http.Transport{ForceAttemptHTTP2: true, DialTLSContext: func(context.Context, string, string) (net.Conn, error) { return tc, nil }}
			defer tr.CloseIdleConnections()
			req, _ := http.NewRequest(method, "https://"+authority+path, nil)
			req.Host = host
			resp, err := (&http.Client{Transport: tr, Timeout: 5 * time.Second}).Do(req)
			if err != nil {
				t.Fatalf("HTTP/2: %v", err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			return []string{fmt.Sprintf("%d %s", resp.StatusCode, b)}
		}
	}
	// plain sends a request with no TLS at all.
	plain := func(t *testing.T, c net.Conn) []string {
		fmt.Fprintf(c, "GET /api/repos/o/r/issues HTTP/1.1\r\nHost: %s\r\n\r\n", authority)
		b, _ := io.ReadAll(c)
		return []string{string(b)}
	}
	// tlsOnly makes a handshake and nothing more.
	tlsOnly := func(server string, roots *x509.CertPool) func(*testing.T, net.Conn) []string {
		return func(t *testing.T, c net.Conn) []string {
			if _, err := handshake(t, c, server, roots); err == nil {
				t.Fatal("the handshake succeeded")
			}
			return nil
		}
	}
	get := "GET /api/repos/o/r/issues HTTP/1.1\r\nHost: " + authority + "\r\n"
	deleteReq := "DELETE /api/repos/o/r HTTP/1.1\r\nHost: " + authority + "\r\n\r\n"
	big := strings.Repeat("x", 2048)

	type row struct {
		name string
		send func(*testing.T, net.Conn) []string
		// want is in every answer, in order (a prefix: the status).
		want []string
		// broker is the codes of the broker's events, in order ("" for
		// an allowed call); egress the code of the connection's event
		// when it is a refusal.
		broker []string
		egress string
		// reached: how many calls the upstream got.
		reached int
	}
	rows := []row{
		{name: "undeclared method", send: h1(deleteReq), want: []string{"403"}, broker: []string{result.BrokerNoOperation}},
		{name: "undeclared path", send: h1("GET /api/admin HTTP/1.1\r\nHost: " + authority + "\r\n\r\n"), want: []string{"403"}, broker: []string{result.BrokerNoOperation}},
		{name: "path outside the service", send: h1("GET /repos/o/r/issues HTTP/1.1\r\nHost: " + authority + "\r\n\r\n"), want: []string{"403"}, broker: []string{result.BrokerNoOperation}},
		{name: "Host other than the server name", send: h1("GET /api/repos/o/r/issues HTTP/1.1\r\nHost: other.test\r\n\r\n"), want: []string{"421"}, broker: []string{result.BrokerMisdirected}},
		{name: "absolute form for another host", send: h1("GET https://other.test/api/repos/o/r/issues HTTP/1.1\r\nHost: " + authority + "\r\n\r\n"), want: []string{"400"}, broker: []string{result.BrokerBadPath}},
		{name: ":authority other than the server name", send: h2("GET", "/api/repos/o/r/issues", "other.test"), want: []string{"421"}, broker: []string{result.BrokerMisdirected}},
		{name: "HTTP/2, allowed", send: h2("GET", "/api/repos/o/r/issues", authority), want: []string{"200"}, broker: []string{""}, reached: 1},
		{name: "HTTP/2, undeclared", send: h2("DELETE", "/api/repos/o/r", authority), want: []string{"403"}, broker: []string{result.BrokerNoOperation}},
		{name: "pipelined after an allowed call", send: h1(get + "\r\n" + deleteReq), want: []string{"200", "403"}, broker: []string{"", result.BrokerNoOperation}, reached: 1},
		// The chunked body ends at once; what follows is a request of
		// its own, held to the menu.
		{name: "smuggled after a body (CL and TE)", send: h1("POST /api/repos/o/r/issues HTTP/1.1\r\nHost: " + authority + "\r\nContent-Type: application/json\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n" + deleteReq),
			want: []string{"200", "403"}, broker: []string{"", result.BrokerNoOperation}, reached: 1},
		{name: "another host pipelined", send: h1(get + "\r\nGET /api/repos/o/r/issues HTTP/1.1\r\nHost: other.test\r\n\r\n"), want: []string{"200", "421"}, broker: []string{"", result.BrokerMisdirected}, reached: 1},
		{name: "websocket upgrade", send: h1(get + "Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"), want: []string{"403"}, broker: []string{result.BrokerNoOperation}},
		{name: "request over its cap", send: h1("POST /api/repos/o/r/issues HTTP/1.1\r\nHost: " + authority + "\r\nContent-Type: application/json\r\nContent-Length: 2048\r\n\r\n" + big), want: []string{"413"}, broker: []string{result.BrokerTooLarge}},
		{name: "answer over its cap", send: h1("GET /api/big HTTP/1.1\r\nHost: " + authority + "\r\n\r\n"), broker: []string{result.BrokerResponseTooLarge}, reached: 1},
		{name: "secret reflected in every form", send: h1("GET /api/leak HTTP/1.1\r\nHost: " + authority + "\r\n\r\n"), want: []string{"200"}, broker: []string{""}, reached: 1},
		{name: "downgrade to plain HTTP", send: plain, egress: result.EgressMalformed},
		{name: "TLS for another name", send: tlsOnly("other.test", trusted), egress: result.EgressSNIMismatch},
		{name: "a client that trusts other roots", send: tlsOnly("example.com", x509.NewCertPool()), egress: result.EgressCertRefused},
	}
	for _, way := range []struct {
		name string
		dial func(*testing.T) net.Conn
	}{{"connect", connect}, {"address", direct}} {
		for _, tt := range rows {
			t.Run(way.name+"/"+tt.name, func(t *testing.T) {
				hits, nb := u.hits.Load(), len(f.events())
				mu.Lock()
				ne := len(egs)
				mu.Unlock()
				c := way.dial(t)
				answers := tt.send(t, c)
				c.Close()
				if len(answers) < len(tt.want) {
					t.Fatalf("answers %q, want %d", answers, len(tt.want))
				}
				for i, w := range tt.want {
					if !strings.HasPrefix(answers[i], w) {
						t.Errorf("answer %d is %.200q, want %q", i, answers[i], w)
					}
				}
				for _, a := range answers {
					for _, form := range append(hostileForms(secret), [2]string{"plain", secret}, [2]string{"query", queryEscape(secret)}, [2]string{"base64", b64(secret)}) {
						if strings.Contains(a, form[1]) {
							t.Errorf("an answer holds the secret in its %s form", form[0])
						}
					}
				}
				if tt.name == "secret reflected in every form" && !strings.Contains(answers[0], "plain=[REDACTED]") {
					t.Errorf("the echo was not redacted but dropped: %q", answers[0])
				}
				// The connection's own event, once it ended.
				ev := egressEvent(t, ne, func(ev result.EgressEvent) bool { return ev.Destination == authority })
				if ev.Code != tt.egress || ev.Allow != (tt.egress == "") {
					t.Errorf("egress event %+v, want code %q", ev, tt.egress)
				}
				if tt.egress == result.EgressCertRefused && !strings.Contains(ev.Reason, "SSL_CERT_FILE") {
					t.Errorf("the refusal does not name the setting: %q", ev.Reason)
				}
				var codes []string
				for _, ev := range f.events()[nb:] {
					codes = append(codes, ev.Code)
				}
				if fmt.Sprint(codes) != fmt.Sprint(tt.broker) && !(len(codes) == 0 && len(tt.broker) == 0) {
					t.Errorf("broker events %+v, want codes %q", f.events()[nb:], tt.broker)
				}
				if got := u.hits.Load() - hits; got != int64(tt.reached) {
					t.Errorf("the upstream got %d calls, want %d", got, tt.reached)
				}
			})
		}
	}
	// Plain HTTP to the brokered name through the proxy, without a
	// CONNECT (absolute form): the name is no egress destination, so
	// the proxy refuses it; nothing reaches the broker or the upstream.
	t.Run("proxy/absolute form, plain HTTP", func(t *testing.T) {
		hits, nb := u.hits.Load(), len(f.events())
		mu.Lock()
		ne := len(egs)
		mu.Unlock()
		c, err := f.dialIn(ctx, "tcp", egress.ProxyAddr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		fmt.Fprintf(c, "GET http://%s/api/repos/o/r/issues HTTP/1.1\r\nHost: %s\r\n\r\n", authority, authority)
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil || resp.StatusCode != http.StatusForbidden {
			t.Fatalf("%v %v, want 403", resp, err)
		}
		egressEvent(t, ne, func(ev result.EgressEvent) bool { return !ev.Allow && ev.Code == result.EgressNotAllowed })
		if u.hits.Load() != hits || len(f.events()) != nb {
			t.Error("the request reached the broker or the upstream")
		}
	})
	// The far side's whole log: only what the menu declares, each with
	// the credential attached here.
	u.mu.Lock()
	defer u.mu.Unlock()
	for _, c := range u.calls {
		declared := c.Method == "GET" && (c.Path == "/api/repos/o/r/issues" || c.Path == "/api/big" || c.Path == "/api/leak") ||
			c.Method == "POST" && c.Path == "/api/repos/o/r/issues" && c.Body == ""
		if !declared || c.Header.Get("Authorization") != "Bearer "+secret {
			t.Errorf("the upstream saw %s %s (Authorization %q)", c.Method, c.Path, c.Header.Get("Authorization"))
		}
	}
}
