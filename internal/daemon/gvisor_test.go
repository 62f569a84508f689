package daemon

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/client"
	"github.com/airlockhq/airlock/internal/config"
	"github.com/airlockhq/airlock/internal/testutil"
	"github.com/airlockhq/airlock/internal/testutil/isolatednet"
	"github.com/airlockhq/airlock/result"
	"github.com/airlockhq/airlock/sandbox"
)

// TestGVisorFourRules runs the four rules through the daemon on a gvisor
// tool, and checks each effect from the host: the broker attaches a
// credential that is nowhere in the sandbox; each run gets a fresh
// sandbox of the warm pool; egress reaches the named destination only,
// through airlock's resolver and proxy, with every decision logged; a
// breach is named. The tool's sandboxes run on gVisor's kernel.
func TestGVisorFourRules(t *testing.T) {
	runsc := testutil.Runsc(t)
	const secret = "gvisor-test-s3cret-value"
	var authorized atomic.Int32
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.Contains(r.Header.Get("Authorization"), secret) {
			authorized.Add(1)
		}
		fmt.Fprintf(w, "upstream %s\n", r.URL.Path)
	}))
	t.Cleanup(up.Close)
	port := up.Listener.Addr().(*net.TCPAddr).Port
	t.Setenv("GVISOR_TEST_SECRET", secret)
	_, sock := serveConfig(t, fmt.Sprintf(`
tools:
  untrusted:
    isolation: gvisor
    pool: {warm: 1}
    limits: {memory: 64MiB, time: 20s}
    egress:
      - {host: plain.test, ports: [%[1]d], addresses: [127.0.0.1], private: true}
    services: [api]
  oneshot:
    isolation: gvisor
    pool: {warm: 0}
    limits: {memory: 64MiB, time: 20s}
    egress:
      - {host: plain.test, ports: [%[1]d], addresses: [127.0.0.1], private: true}
    services: [api]
services:
  api:
    upstream: %[2]s
    private: true
    credential: {secret: k}
    operations: [GET /hello]
secrets:
  k: {env: GVISOR_TEST_SECRET}
`, port, up.URL), func(o *Options) { o.Sandbox.Runsc = runsc })
	c := client.New(sock)
	// A tool whose runs come warm from its pool, with init (a miss is
	// as the other tool's); and one with no pool, whose runs' sandboxes
	// are made for their command, which runs as the guest's first
	// process (sandbox.Spec.OneCommand).
	for _, tt := range []struct{ tool, first string }{{"untrusted", ""}, {"oneshot", "sh -c "}} {
		t.Run(tt.tool, func(t *testing.T) { testGVisorFourRules(t, c, tt.tool, tt.first, port, &authorized) })
	}
}

func testGVisorFourRules(t *testing.T, c *client.Client, tool, first string, port int, authorized *atomic.Int32) {
	const secret = "gvisor-test-s3cret-value"
	ctx := t.Context()
	authorized.Store(0)
	run := func(script string) *result.Result {
		t.Helper()
		r, err := c.Run(ctx, api.RunRequest{Tool: tool, Argv: []string{"sh", "-c", script}})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}

	// The guest kernel is gVisor's, and its first process the command
	// when first says so.
	if r := run(`uname -r; tr '\0' ' ' < /proc/1/cmdline`); !strings.Contains(string(r.Stdout), "gvisor") || !strings.Contains(string(r.Stdout), "\n"+first) {
		t.Fatalf("uname -r and the first process: %+v %q %q, want gvisor and %q", r, r.Stdout, r.Stderr, first)
	}

	// 1. The broker: the call goes out with the credential, which the
	// sandbox never sees (environment, files, the broker's answer).
	r := run(`curl -sS "$AIRLOCK_BROKER_URL/api/hello"; curl -sS -o /dev/null -w '%{http_code}\n' "$AIRLOCK_BROKER_URL/api/nope"; ` +
		`cat /proc/self/environ | tr '\0' '\n' | grep -c s3cret; grep -rs s3cret /etc /workspace /tmp /proc/1/environ; echo end`)
	out := string(r.Stdout)
	if !strings.HasPrefix(out, "upstream /hello\n403\n0\nend\n") || authorized.Load() != 1 {
		t.Fatalf("brokered calls: %q (stderr %q), %d authorized upstream", out, r.Stderr, authorized.Load())
	}
	if strings.Contains(string(r.Stderr), secret) {
		t.Fatalf("the secret reached the sandbox's output: %q", r.Stderr)
	}

	// 2. Reset by replacement: each run has a sandbox of its own, fresh.
	a := run("echo mark > /workspace/mark; echo $$")
	b := run("cat /workspace/mark 2>&1 || echo fresh")
	if a.SandboxID == b.SandboxID || !strings.Contains(string(b.Stdout), "fresh") {
		t.Fatalf("two runs: %s %s, the second saw %q", a.SandboxID, b.SandboxID, b.Stdout)
	}

	// 3. Egress: the named destination through airlock; another name is
	// refused by its resolver; a direct connection to the host's
	// loopback, or to the metadata address, goes nowhere.
	r = run(fmt.Sprintf(`curl -sS --max-time 5 http://plain.test:%d/x; `+
		`curl -fsS --max-time 5 http://evil.test:%d/ >/dev/null 2>&1 || echo refused-name; `+
		`curl -sS --noproxy '*' --max-time 3 http://127.0.0.1:%d/ >/dev/null 2>&1 || echo refused-loopback; `+
		`curl -sS --noproxy '*' --max-time 3 http://169.254.169.254/ >/dev/null 2>&1 || echo refused-metadata`, port, port, port))
	if got := string(r.Stdout); got != "upstream /x\nrefused-name\nrefused-loopback\nrefused-metadata\n" {
		t.Fatalf("egress: %q (stderr %q)", got, r.Stderr)
	}
	if allowed, denied := egressSeen(r, "plain.test", "evil.test"); !allowed || !denied {
		t.Errorf("egress decisions %+v: want plain.test allowed and evil.test denied", r.Egress)
	}

	// 4. Bound the whole attempt: a breach of the memory ceiling, which
	// gVisor's own memory counts in, is named. dd's one 200 MB buffer
	// breaches it at once; a shell growing a string through pipes
	// would too, but at gVisor's pipe speed (7 MB/s here, slower under
	// load) it met the time ceiling first on a loaded CI machine.
	r = run(`dd if=/dev/zero of=/dev/null bs=200M count=1; echo survived`)
	if r.Outcome != result.LimitExceeded || r.Limit == nil || r.Limit.Name != result.LimitMemory {
		t.Fatalf("memory breach: %s %+v %q %q", r.Outcome, r.Limit, r.Stdout, r.Stderr)
	}
}

// egressSeen says whether r's egress decisions hold an allow of a
// destination starting with allow and a refusal of one starting with deny.
func egressSeen(r *result.Result, allow, deny string) (allowed, denied bool) {
	for _, ev := range r.Egress {
		allowed = allowed || ev.Allow && strings.HasPrefix(ev.Destination, allow)
		denied = denied || !ev.Allow && strings.HasPrefix(ev.Destination, deny)
	}
	return allowed, denied
}

// TestGVisorToolNeedsRunsc: a daemon whose config has a gvisor tool, on a
// host where runsc cannot be had, does not start, and says which tool and
// why.
func TestGVisorToolNeedsRunsc(t *testing.T) {
	isolatednet.Require(t)
	for _, tt := range []struct {
		name, server, flag, want string
	}{
		{"--runsc", "", "/nonexistent/runsc", "/nonexistent/runsc"},
		{"server.runsc", "server: {runsc: /nonexistent/config-runsc}\n", "", "/nonexistent/config-runsc"},
		{"--runsc over server.runsc", "server: {runsc: /nonexistent/config-runsc}\n", "/nonexistent/flag-runsc", "/nonexistent/flag-runsc"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := config.Parse("airlock.yaml", []byte(tt.server+"tools:\n  plain: {}\n  untrusted: {isolation: gvisor}\n"))
			if err != nil {
				t.Fatal(err)
			}
			_, err = New(t.Context(), Options{Config: cfg, Socket: filepath.Join(t.TempDir(), "airlock.sock"), AuditPath: testAudit(t),
				SnapshotStore: filepath.Join(t.TempDir(), "snapshots"), VolumeStore: filepath.Join(t.TempDir(), "volumes"),
				Sandbox: sandbox.Options{StateDir: testStateDir, CgroupParent: testCgroup, InitPath: testutil.InitPath(t), Runsc: tt.flag}})
			if err == nil || !strings.Contains(err.Error(), "tool untrusted asks for isolation gvisor") || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got %v, want an error naming %s", err, tt.want)
			}
		})
	}
}
