package daemon

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/audit"
	"github.com/airlockhq/airlock/internal/e2b"
	"github.com/airlockhq/airlock/internal/testutil/isolatednet"
)

// e2bRun runs cmd (sh -c) in the sandbox through envd's Start and
// returns its stdout once it ends.
func e2bRun(t *testing.T, base string, sb e2b.Sandbox, cmd string) string {
	t.Helper()
	out, _ := e2bRunStreams(t, base, sb, cmd)
	return out
}

// echoServer is a server a sandbox runs on its loopback: it answers
// who it is and the request's headers.
const echoServer = `import http.server, json, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        b = json.dumps({"who": sys.argv[2], "path": self.path, "headers": dict(self.headers)}).encode()
        self.send_response(200); self.send_header("Content-Length", str(len(b))); self.end_headers(); self.wfile.write(b)
    def log_message(self, *a): pass
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
`

// upgradeServer is a server a sandbox runs that takes a connection over
// (as a WebSocket's is): it answers 101 and echoes what comes after,
// upper-cased.
const upgradeServer = `import socketserver, sys
class H(socketserver.StreamRequestHandler):
    def handle(self):
        while self.rfile.readline() not in (b"\r\n", b""): pass
        self.wfile.write(b"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n"); self.wfile.flush()
        while True:
            b = self.request.recv(1024)
            if not b: return
            self.request.sendall(b.upper())
socketserver.TCPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
`

// TestE2BPorts: with server.e2b_domain, a sandbox's port P is served at
// P-ID.DOMAIN (E2B's getHost), to the request that carries the
// sandbox's traffic access token, which never reaches the sandbox; the
// request reaches that sandbox's own loopback only: not another
// sandbox's server on the same port, nor the host's. A port nothing
// listens on, an unknown sandbox and a killed one get E2B's proxy
// answers; each request is recorded; envd's own port is served by host
// name too.
func TestE2BPorts(t *testing.T) {
	isolatednet.Require(t)
	d, base := serveE2BDaemon(t, "", func(o *Options) { o.Config.Server.E2BDomain = "sandbox.test" })
	a, b := e2bCreate(t, base), e2bCreate(t, base)
	if a.Domain == nil || *a.Domain != "sandbox.test" || a.TrafficAccessToken == nil || *a.TrafficAccessToken == "" {
		t.Fatalf("create's answer: domain %v, traffic token %v", a.Domain, a.TrafficAccessToken)
	}
	// The host's own server on loopback, which no sandbox port may reach.
	var hostHits atomic.Int32
	hostSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hostHits.Add(1) }))
	t.Cleanup(hostSrv.Close)
	hostPort := hostSrv.Listener.Addr().(*net.TCPAddr).Port
	getPath := func(host, path string, hdr map[string]string) (int, string) {
		t.Helper()
		req, _ := http.NewRequestWithContext(t.Context(), "GET", base+path, nil)
		req.Host = host
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	get := func(host string, hdr map[string]string) (int, string) { return getPath(host, "/some/path?q=1", hdr) }
	startServer := func(sb e2b.Sandbox, code, args string, port int) {
		t.Helper()
		code = strings.ReplaceAll(code, "'", `'"'"'`)
		e2bRun(t, base, sb, fmt.Sprintf(`printf '%%s' '%s' > /tmp/s%d.py; nohup python3 /tmp/s%d.py %d %s >/dev/null 2>&1 & for i in $(seq 100); do python3 -c 'import socket; socket.create_connection(("127.0.0.1", %d))' 2>/dev/null && break; sleep 0.05; done`, code, port, port, port, args, port))
	}
	startServer(a, echoServer, "a", 8000)
	startServer(b, echoServer, "b", 8000)
	startServer(a, upgradeServer, "", 8002)
	tok := func(sb e2b.Sandbox) map[string]string {
		return map[string]string{"E2b-Traffic-Access-Token": *sb.TrafficAccessToken, "X-Access-Token": sb.EnvdAccessToken, "X-Api-Key": e2bKey}
	}
	host := func(port int, sb e2b.Sandbox) string { return fmt.Sprintf("%d-%s.sandbox.test", port, sb.SandboxID) }

	status, body := get(host(8000, a), tok(a))
	var seen struct {
		Who, Path string
		Headers   map[string]string
	}
	if status != 200 || json.Unmarshal([]byte(body), &seen) != nil || seen.Who != "a" || seen.Path != "/some/path?q=1" {
		t.Fatalf("a's port 8000: %d %s", status, body)
	}
	for k := range seen.Headers {
		if k := strings.ToLower(k); k == "e2b-traffic-access-token" || k == "x-access-token" || k == "x-api-key" {
			t.Errorf("the sandbox's server was given %s", k)
		}
	}
	if seen.Headers["Host"] != host(8000, a) {
		t.Errorf("the server saw Host %q, want the one the client named", seen.Headers["Host"])
	}
	if status, body := get(host(8000, b), tok(b)); status != 200 || !strings.Contains(body, `"who": "b"`) {
		t.Errorf("b's port 8000: %d %s", status, body)
	}
	for _, tc := range []struct {
		name   string
		host   string
		hdr    map[string]string
		status int
		want   string
	}{
		{"no token", host(8000, a), nil, 403, "traffic access token"},
		{"another sandbox's token", host(8000, a), tok(b), 403, "traffic access token"},
		{"the envd token instead", host(8000, a), map[string]string{"X-Access-Token": a.EnvdAccessToken}, 403, "traffic access token"},
		{"a port nothing listens on", host(8001, a), tok(a), 502, "port is not open"},
		{"the host's port", host(hostPort, a), tok(a), 502, "port is not open"},
		{"no such sandbox", "8000-s_nosuch.sandbox.test", tok(a), 502, "was not found"},
	} {
		if status, body := get(tc.host, tc.hdr); status != tc.status || !strings.Contains(body, tc.want) {
			t.Errorf("%s: %d %s, want %d with %q", tc.name, status, body, tc.status, tc.want)
		}
	}
	// A connection taken over (a WebSocket's upgrade): both ways, live.
	c, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(c, "GET /ws HTTP/1.1\r\nHost: %s\r\nConnection: Upgrade\r\nUpgrade: echo\r\nE2b-Traffic-Access-Token: %s\r\n\r\n", host(8002, a), *a.TrafficAccessToken)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade: %v %v", resp, err)
	}
	for _, m := range []string{"first", "second"} {
		fmt.Fprint(c, m)
		buf := make([]byte, len(m))
		if _, err := io.ReadFull(br, buf); err != nil || string(buf) != strings.ToUpper(m) {
			t.Fatalf("through the upgraded connection: %q %v", buf, err)
		}
	}
	if n := hostHits.Load(); n != 0 {
		t.Errorf("the host's server got %d requests through a sandbox's port", n)
	}
	// envd's own port by host name, without E2b-Sandbox-Id.
	if status, body := getPath(host(49983, a), "/health", map[string]string{"X-Access-Token": a.EnvdAccessToken}); status != 204 {
		t.Errorf("envd's health by host: %d %s", status, body)
	}
	// Recorded: the request that reached the port, with its answer.
	if err := d.Audit().Append(t.Context()); err != nil {
		t.Fatal(err)
	}
	evs, err := d.Audit().Query(t.Context(), audit.Query{Kind: audit.KindPort, Sandbox: d.e2b.SessionOf(a.SandboxID).Sandbox().ID(), Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	var recorded bool
	for _, e := range evs {
		var det struct {
			Port   int
			Path   string
			Status int
		}
		_ = json.Unmarshal(e.Detail, &det)
		recorded = recorded || det.Port == 8000 && det.Path == "/some/path" && det.Status == 200
	}
	if !recorded {
		t.Errorf("no session.port event for a's port 8000 in %d events", len(evs))
	}
	// Killed: E2B's proxy answer for a sandbox it does not find.
	if s := e2bKill(t, base, a.SandboxID, 10*time.Second); s != 204 {
		t.Fatalf("kill: %d", s)
	}
	if status, body := get(host(8000, a), tok(a)); status != 502 || !strings.Contains(body, "was not found") {
		t.Errorf("a killed sandbox's port: %d %s", status, body)
	}
}
