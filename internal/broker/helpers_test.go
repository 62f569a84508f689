package broker

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/tls"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/broker/brokerspec"
	"github.com/airlockhq/airlock/internal/config"
	"github.com/airlockhq/airlock/internal/linux/netns"
	"github.com/airlockhq/airlock/internal/testutil/isolatednet"
	"github.com/airlockhq/airlock/result"
)

// The broker's tests run in a network namespace with only lo.
func TestMain(m *testing.M) { os.Exit(isolatednet.Main(m)) }

const secret = "s3cr3t-T0ken/value+42=="

// echo is what the upstream saw of a call.
type echo struct {
	Method, Path, Query string
	Header              http.Header
	Body                string
	ProtoMajor          int
}

// upstream is a real HTTP server on loopback that demands the credential
// and echoes each call.
type upstream struct {
	srv   *httptest.Server
	hits  atomic.Int64
	mu    sync.Mutex
	calls []echo
}

func newUpstream(t *testing.T, tlsOn bool) *upstream { return newUpstreamProto(t, tlsOn, false) }

func newUpstreamProto(t *testing.T, tlsOn, h2 bool) *upstream {
	u := &upstream{}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.hits.Add(1)
		body, _ := io.ReadAll(r.Body)
		e := echo{r.Method, r.URL.EscapedPath(), r.URL.RawQuery, r.Header.Clone(), string(body), r.ProtoMajor}
		u.mu.Lock()
		u.calls = append(u.calls, e)
		u.mu.Unlock()
		if r.Header.Get("Authorization") != "Bearer "+secret {
			http.Error(w, "no credential", http.StatusUnauthorized)
			return
		}
		switch r.URL.Path {
		case "/api/leak":
			// A careless upstream echoing the token back in every form.
			w.Header().Set("X-Echo", "Bearer "+secret)
			fmt.Fprintf(w, "plain=%s\nquery=%s\nb64=%s\n", secret, queryEscape(secret), b64(secret))
			for _, f := range hostileForms(secret) {
				fmt.Fprintf(w, "%s=%s\n", f[0], f[1])
			}
			return
		case "/api/redirect":
			http.Redirect(w, r, r.URL.Query().Get("to"), http.StatusFound)
			return
		case "/api/big":
			w.Header().Set("Content-Type", "text/plain")
			for range 64 {
				w.Write(make([]byte, 32<<10))
				w.(http.Flusher).Flush()
			}
			return
		case "/api/gzip":
			w.Header().Set("Content-Encoding", "gzip")
			w.Write([]byte{0x1f, 0x8b})
			return
		case "/api/gzip2":
			// An empty encoding first, the real one second: a check of
			// the first instance alone sees none.
			w.Header()["Content-Encoding"] = []string{"", "gzip"}
			w.Write(gzipped(t, "Bearer "+secret))
			return
		case "/api/ranged":
			// The echo (the credential in it), served in whatever slice
			// the caller's Range asks for.
			b, _ := json.Marshal(e)
			http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(b))
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Set-Cookie", "session=abc")
		json.NewEncoder(w).Encode(e)
	})
	switch {
	case h2:
		u.srv = httptest.NewUnstartedServer(h)
		u.srv.EnableHTTP2 = true
		u.srv.StartTLS()
	case tlsOn:
		u.srv = httptest.NewTLSServer(h)
	default:
		u.srv = httptest.NewServer(h)
	}
	t.Cleanup(u.srv.Close)
	return u
}

// newUpstreamH2 is newUpstream over TLS speaking HTTP/2.
func newUpstreamH2(t *testing.T) *upstream { return newUpstreamProto(t, true, true) }

func (u *upstream) last() echo {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.calls[len(u.calls)-1]
}

// fixture is a broker attached to a namespace standing in for a sandbox's.
type fixture struct {
	ns  *os.File
	b   *Broker
	mu  sync.Mutex
	evs []result.BrokerEvent
}

func (f *fixture) events() []result.BrokerEvent {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]result.BrokerEvent(nil), f.evs...)
}

// lastEvent waits for the event of the call that just returned.
func (f *fixture) lastEvent(t *testing.T, n int) result.BrokerEvent {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if evs := f.events(); len(evs) >= n {
			return evs[n-1]
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("no event %d; have %+v", n, f.events())
	return result.BrokerEvent{}
}

// attach parses yaml (a whole airlock.yaml) and attaches a broker for the
// services of tool "t".
func attach(t *testing.T, yaml string) *fixture {
	t.Helper()
	return attachWith(t, yaml, nil)
}

// attachWith is attach with the operations' limiters taken from rates.
func attachWith(t *testing.T, yaml string, rates *Rates) *fixture {
	t.Helper()
	return attachSet(t, yaml, rates, nil)
}

// attachSet is attachWith with set set on every service's calls.
func attachSet(t *testing.T, yaml string, rates *Rates, set map[string]string) *fixture {
	t.Helper()
	isolatednet.Require(t)
	t.Setenv("TEST_BROKER_SECRET", secret)
	cfg, err := config.Parse("airlock.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	tool, err := cfg.Tool("t")
	if err != nil {
		t.Fatal(err)
	}
	var svcs []*brokerspec.Service
	for _, name := range tool.Services {
		s, err := cfg.Service(name)
		if err != nil {
			t.Fatal(err)
		}
		if set != nil {
			s = s.WithSet(set)
		}
		svcs = append(svcs, s)
	}
	secrets := map[string]Secret{}
	for name, sec := range cfg.Secrets {
		secrets[name] = sec
	}
	ns, err := netns.New()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ns.Close() })
	f := &fixture{ns: ns}
	b, err := Attach(t.Context(), ns, Config{
		Tool: "t", SandboxID: "sb1", Services: svcs, Secrets: secrets, Rates: rates,
		OnEvent: func(ev result.BrokerEvent) {
			f.mu.Lock()
			f.evs = append(f.evs, ev)
			f.mu.Unlock()
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	f.b = b
	t.Cleanup(func() {
		if err := b.Close(context.Background()); err != nil {
			t.Error(err)
		}
	})
	return f
}

// dialIn dials from inside the namespace, as code in the sandbox would.
func (f *fixture) dialIn(ctx context.Context, network, addr string) (net.Conn, error) {
	var c net.Conn
	err := netns.Do(f.ns, func() error {
		var d net.Dialer
		var err error
		c, err = d.DialContext(ctx, network, addr)
		return err
	})
	return c, err
}

func (f *fixture) client() *http.Client {
	return &http.Client{
		Timeout:       5 * time.Second,
		Transport:     &http.Transport{DialContext: f.dialIn, DisableKeepAlives: true, TLSClientConfig: &tls.Config{}},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// raw sends req (a whole HTTP/1.1 request) to the broker byte for byte.
func (f *fixture) raw(t *testing.T, req string) (*http.Response, string) {
	t.Helper()
	c, err := f.dialIn(t.Context(), "tcp", Addr)
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
	return resp, string(body)
}

func queryEscape(s string) string {
	var b strings.Builder
	for _, c := range []byte(s) {
		if c == '/' || c == '+' || c == '=' {
			fmt.Fprintf(&b, "%%%02X", c)
		} else {
			b.WriteByte(c)
		}
	}
	return b.String()
}

// gzipped compresses s.
func gzipped(t *testing.T, s string) []byte {
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	if _, err := io.WriteString(zw, s); err != nil {
		t.Fatal(err)
	}
	zw.Close()
	return b.Bytes()
}

// hostileForms are the secret as an upstream that encodes what it echoes
// might write it: labels and forms.
func hostileForms(s string) [][2]string {
	js, _ := json.Marshal(s)
	var uLower, uUpper strings.Builder
	for i := 0; i < len(s); i++ {
		fmt.Fprintf(&uLower, "\\u%04x", s[i])
		fmt.Fprintf(&uUpper, "\\u%04X", s[i])
	}
	return [][2]string{
		{"hex", hex.EncodeToString([]byte(s))},
		{"HEX", strings.ToUpper(hex.EncodeToString([]byte(s)))},
		{"json", string(js[1 : len(js)-1])},
		{"json-slash", strings.ReplaceAll(string(js[1:len(js)-1]), "/", `\/`)},
		{"json-u", uLower.String()},
		{"json-U", uUpper.String()},
		{"b64-of-query", base64.StdEncoding.EncodeToString([]byte(url.QueryEscape(s)))},
	}
}
