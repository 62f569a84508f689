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
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/egress/policy"
	"github.com/airlockhq/airlock/result"
)

// TestBypassCorpus is the regression corpus of ways a sandbox allowed one
// name tried to reach another over an allowed connection: each row is an
// attack, the refusal it must meet and the code its event must give,
// against upstreams that log every TLS server name and HTTP Host they
// are asked for; after each, nothing the attack named is in their logs.
// The proxy's refusals of destinations are TestProxyRefusals; the
// broker's are in internal/broker.
func TestBypassCorpus(t *testing.T) {
	names, tport := namedUpstream(t)
	var mu sync.Mutex
	var hosts []string
	plain := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		hosts = append(hosts, r.Host)
		mu.Unlock()
		io.WriteString(w, "hello")
	}))
	t.Cleanup(plain.Close)
	pport := uint16(netip.MustParseAddrPort(plain.Listener.Addr().String()).Port())
	f := gateway(t, []policy.Spec{pinned("allowed.test", tport), pinned("web.test", pport)}, func(c *Config) { c.HelloWait = time.Second })
	ctx := t.Context()

	// The ways in.
	connect := func(name string, port uint16) func(*testing.T) net.Conn {
		return func(t *testing.T) net.Conn {
			c, err := f.dialIn(ctx, "tcp", ProxyAddr)
			if err != nil {
				t.Fatal(err)
			}
			c.SetDeadline(time.Now().Add(10 * time.Second))
			target := net.JoinHostPort(name, strconv.Itoa(int(port)))
			fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
			// One byte at a time: what follows the answer is the
			// far side's, read by the attack.
			resp, err := http.ReadResponse(bufio.NewReaderSize(oneByte{c}, 16), nil)
			if err != nil || resp.StatusCode != 200 {
				t.Fatalf("CONNECT: %v %v", resp, err)
			}
			return c
		}
	}
	tunnel, tunnelWeb := connect("allowed.test", tport), connect("web.test", pport)
	direct := func(name string, port uint16) func(*testing.T) net.Conn {
		return func(t *testing.T) net.Conn {
			addrs, err := f.lookup(ctx, name)
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
	}
	transparentTLS, transparentWeb := direct("allowed.test", tport), direct("web.test", pport)

	// What is sent.
	hello := func(server string, ech bool) func(net.Conn) {
		return func(c net.Conn) {
			cfg := &tls.Config{ServerName: server, InsecureSkipVerify: true}
			if ech {
				cfg.MinVersion = tls.VersionTLS13
				cfg.EncryptedClientHelloConfigList = echConfigList(t, "allowed.test")
			}
			_ = tls.Client(c, cfg).Handshake()
		}
	}
	late := func(send func(net.Conn)) func(net.Conn) {
		return func(c net.Conn) { time.Sleep(600 * time.Millisecond); send(c) }
	}
	raw := func(s string) func(net.Conn) {
		return func(c net.Conn) {
			io.WriteString(c, s)
			io.Copy(io.Discard, c)
		}
	}
	requests := func(hs ...string) func(net.Conn) {
		return func(c net.Conn) {
			br := bufio.NewReader(c)
			for _, h := range hs {
				fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: %s\r\n\r\n", h)
				resp, err := http.ReadResponse(br, nil)
				if err != nil {
					return
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		}
	}
	ownWeb := net.JoinHostPort("web.test", strconv.Itoa(int(pport)))

	proxy, trans := result.EgressProxy, result.EgressTransparent
	tests := []struct {
		name string
		conn func(*testing.T) net.Conn
		send func(net.Conn)
		kind string // of the refusal's event
		code string // of the refusal's event
		evil string // what no upstream may have been asked for
	}{
		{"CONNECT, then TLS for another name", tunnel, hello("evil1.test", false), proxy, result.EgressSNIMismatch, "evil1.test"},
		{"CONNECT, then TLS without a name", tunnel, hello("127.0.0.1", false), proxy, result.EgressNoSNI, ""},
		{"CONNECT, then a ClientHello after a pause", tunnel, late(hello("evil2.test", false)), proxy, result.EgressSNIMismatch, "evil2.test"},
		{"CONNECT, then Encrypted Client Hello", tunnel, hello("hidden1.test", true), proxy, result.EgressECH, "hidden1.test"},
		{"CONNECT, then nothing", tunnel, raw(""), proxy, result.EgressSilent, ""},
		{"transparent, TLS for another name", transparentTLS, hello("evil3.test", false), trans, result.EgressSNIMismatch, "evil3.test"},
		{"transparent, a ClientHello after a pause", transparentTLS, late(hello("evil4.test", false)), trans, result.EgressSNIMismatch, "evil4.test"},
		{"transparent, Encrypted Client Hello", transparentTLS, hello("hidden2.test", true), trans, result.EgressECH, "hidden2.test"},
		{"transparent, nothing (a server-first protocol)", transparentTLS, raw(""), trans, result.EgressSilent, ""},
		{"transparent, HTTP for another host", transparentWeb, requests("evil5.test"), trans, result.EgressHostMismatch, "evil5.test"},
		{"transparent, HTTP for another host after an allowed request", transparentWeb, requests(ownWeb, "evil6.test:"+strconv.Itoa(int(pport))), trans, result.EgressHostMismatch, "evil6.test"},
		{"transparent, HTTP/2 without TLS", transparentWeb, raw("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"), trans, result.EgressNotHTTP1, ""},
		{"transparent, another protocol", transparentWeb, raw("SSH-2.0-client\r\n"), trans, result.EgressNotHTTP1, ""},
		{"CONNECT, then HTTP for another host", tunnelWeb, requests("evil7.test"), proxy, result.EgressHostMismatch, "evil7.test"},
		{"CONNECT, then HTTP for another host after an allowed request", tunnelWeb, requests(ownWeb, "evil8.test:"+strconv.Itoa(int(pport))), proxy, result.EgressHostMismatch, "evil8.test"},
		{"CONNECT, then an absolute-form request for another host", tunnelWeb, raw("GET http://evil9.test/ HTTP/1.1\r\nHost: " + ownWeb + "\r\n\r\n"), proxy, result.EgressHostMismatch, "evil9.test"},
		{"CONNECT, then HTTP/2 without TLS", tunnelWeb, raw("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"), proxy, result.EgressNotHTTP1, ""},
		{"CONNECT, then another protocol", tunnelWeb, raw("SSH-2.0-client\r\n"), proxy, result.EgressNotHTTP1, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := f.evs.count()
			c := tt.conn(t)
			defer c.Close()
			tt.send(c)
			ev := f.evs.waitFrom(t, n, "the refusal", func(e result.EgressEvent) bool {
				return !e.Allow && e.Kind == tt.kind && e.Code == tt.code
			})
			if ev.Reason == "" {
				t.Errorf("refusal %+v has no reason", ev)
			}
			if tt.evil == "" {
				return
			}
			mu.Lock()
			defer mu.Unlock()
			for _, h := range hosts {
				if strings.HasPrefix(h, tt.evil) {
					t.Fatalf("the plain upstream was asked for %q", h)
				}
			}
			if names.has(tt.evil) {
				t.Fatalf("the TLS upstream was asked for %q", tt.evil)
			}
		})
	}
	// The allowed requests went through, and nothing else did.
	names.mu.Lock()
	asked := names.names
	names.mu.Unlock()
	if len(asked) != 0 {
		t.Fatalf("the TLS upstream was asked for %q", asked)
	}
	mu.Lock()
	defer mu.Unlock()
	if want := []string{ownWeb, ownWeb}; !slices.Equal(hosts, want) {
		t.Fatalf("the plain upstream served %q, want only the allowed requests %q", hosts, want)
	}
}

// oneByte reads one byte at a time, so that a bufio.Reader over it takes
// no more of a connection than it is asked to parse.
type oneByte struct{ r io.Reader }

func (o oneByte) Read(b []byte) (int, error) { return o.r.Read(b[:min(len(b), 1)]) }
