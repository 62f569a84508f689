package daemon

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/client"
	"github.com/airlockhq/airlock/result"
)

// preboundCount counts the bindings waiting for a claim.
func (d *Daemon) preboundCount() int { return len(d.Prebound()) }

// TestPreboundRun: a pooled tool's sandboxes are bound while the pool
// builds them, and a run that claims one has its egress decisions, allowed
// and refused, in its result and in the audit log under its own run, as a
// run bound at the claim has. A sandbox that dies unclaimed takes its
// binding with it, and so does shutdown. A tool with broker services is
// never bound ahead.
func TestPreboundRun(t *testing.T) {
	var hits atomic.Int64
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		fmt.Fprintf(w, "hello %s\n", r.Host)
	}))
	t.Cleanup(up.Close)
	port := up.Listener.Addr().(*net.TCPAddr).Port
	t.Setenv("PREBIND_TEST_SECRET", "s3cret")
	d, sock := serveConfig(t, fmt.Sprintf(`
tools:
  web:
    pool: {warm: 1}
    egress:
      - host: plain.test
        ports: [%d]
        addresses: [127.0.0.1]
        private: true
  brokered:
    pool: {warm: 1}
    services: [api]
services:
  api:
    upstream: https://api.example
    credential: {secret: k}
    operations: [GET /]
secrets:
  k: {env: PREBIND_TEST_SECRET}
`, port), nil)
	c := client.New(sock)
	ctx := t.Context()
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for !ok() {
			if time.Now().After(deadline) {
				t.Fatalf("never: %s", what)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	idle := func(tool string) int { return d.Pool(tool).Stats().Idle }
	waitFor("both pools full", func() bool { return idle("web") == 1 && idle("brokered") == 1 })
	// Only web's sandbox is bound ahead.
	if n := d.preboundCount(); n != 1 {
		t.Fatalf("%d bindings made ahead, want 1 (web's; brokered binds at the claim)", n)
	}

	r, err := c.Run(ctx, api.RunRequest{Tool: "web", Argv: []string{"sh", "-c",
		fmt.Sprintf(`curl -sS http://plain.test:%d/; curl -sS http://evil.test/ || true`, port)}})
	if err != nil {
		t.Fatal(err)
	}
	if r.Outcome != result.Exited || !strings.Contains(string(r.Stdout), "hello plain.test") {
		t.Fatalf("run: %+v (stdout %q, stderr %q)", r, r.Stdout, r.Stderr)
	}
	if hits.Load() != 1 {
		t.Errorf("upstream hits %d, want 1", hits.Load())
	}
	if allowed, denied := egressSeen(r, "plain.test", "evil.test"); !allowed || !denied {
		t.Errorf("the result's egress decisions %+v: want plain.test allowed and evil.test denied", r.Egress)
	}
	// The audit log has both under the run that claimed the sandbox.
	fin, err := c.Audit(ctx, client.AuditQuery{Sandbox: r.SandboxID, Kind: "run.finished"})
	if err != nil || len(fin.Events) != 1 {
		t.Fatalf("run.finished: %+v %v", fin, err)
	}
	evs := waitAudit(t, c, client.AuditQuery{Run: fin.Events[0].Run, Kind: "egress"}, func(evs []api.AuditEvent) bool { return len(evs) >= 2 })
	var sawAllow, sawDeny bool
	for _, ev := range evs {
		sawAllow = sawAllow || ev.Decision == "allow" && strings.Contains(string(ev.Detail), "plain.test")
		sawDeny = sawDeny || ev.Decision == "deny" && strings.Contains(string(ev.Detail), "evil.test")
		if ev.Sandbox != r.SandboxID || ev.Tool != "web" {
			t.Errorf("egress event attributed to %s/%s, want web/%s: %+v", ev.Tool, ev.Sandbox, r.SandboxID, ev)
		}
	}
	if !sawAllow || !sawDeny {
		t.Errorf("audit egress events of the run %+v: want an allow of plain.test and a deny of evil.test", evs)
	}

	// The refill is bound ahead too; killing its init unclaimed (as a
	// crash would) makes the pool discard it, and the binding goes.
	waitFor("web's pool refilled", func() bool { return idle("web") == 1 && d.preboundCount() == 1 })
	victim := d.Prebound()[0]
	killGroup(t, victim)
	waitFor("the dead sandbox's binding closed", func() bool {
		return !slices.Contains(d.Prebound(), victim)
	})

	// A claimed brokered sandbox still gets its broker at the claim.
	r, err = c.Run(ctx, api.RunRequest{Tool: "brokered", Argv: []string{"sh", "-c", `test -n "$AIRLOCK_BROKER_URL" && echo broker`}})
	if err != nil || !strings.Contains(string(r.Stdout), "broker") {
		t.Fatalf("brokered run: %+v %v (stderr %q)", r, err, r.Stderr)
	}
	waitFor("web's pool refilled again", func() bool { return idle("web") == 1 && d.preboundCount() == 1 })
	if err := d.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if n := d.preboundCount(); n != 0 {
		t.Errorf("%d bindings left after shutdown, want 0", n)
	}
}

// killGroup kills every process in sandbox id's cgroup, from the host.
func killGroup(t *testing.T, id string) {
	t.Helper()
	dir := "/sys/fs/cgroup" + testCgroup + "/" + id
	if _, err := os.Stat("/sys/fs/cgroup/pids"); err == nil {
		dir = "/sys/fs/cgroup/pids" + testCgroup + "/" + id
	}
	b, err := os.ReadFile(dir + "/cgroup.procs")
	if err != nil {
		t.Fatal(err)
	}
	pids := strings.Fields(string(b))
	if len(pids) == 0 {
		t.Fatalf("no process in %s", dir)
	}
	for _, p := range pids {
		pid, _ := strconv.Atoi(p)
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
	}
}

// TestBrokerRateAcrossSandboxes: a service's rate bounds the calls of all
// the tool's sandboxes on the node together: five runs, each in a fresh
// sandbox, each calling once, get three answers and two refusals.
func TestBrokerRateAcrossSandboxes(t *testing.T) {
	var calls atomic.Int64
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		fmt.Fprint(w, "ok")
	}))
	defer up.Close()
	t.Setenv("RATE_TEST_SECRET", "rate-test-secret-value")
	_, sock := serveConfig(t, fmt.Sprintf(`
tools:
  brokered:
    pool: {warm: 2}
    services: [api]
services:
  api:
    upstream: %s
    private: true
    credential: {secret: k}
    rate: 3
    operations: [GET /status]
secrets:
  k: {env: RATE_TEST_SECRET}
`, up.URL), nil)
	c := client.New(sock)
	var codes []string
	for range 5 {
		r, err := c.Run(t.Context(), api.RunRequest{Tool: "brokered", Argv: []string{"curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "http://127.0.0.3/api/status"}})
		if err != nil || r.Outcome != result.Exited {
			t.Fatalf("run: %+v %v", r, err)
		}
		codes = append(codes, string(r.Stdout))
	}
	if got := strings.Join(codes, " "); got != "200 200 200 429 429" || calls.Load() != 3 {
		t.Fatalf("five sandboxes calling once each under a rate of 3: %s, %d calls upstream", got, calls.Load())
	}
}
