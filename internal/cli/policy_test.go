package cli

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/internal/audit"
	"github.com/airlockhq/airlock/internal/testutil/isolatednet"
	"github.com/airlockhq/airlock/result"
)

// publicAddr is put on lo of the tests' isolated network: an address no
// range check refuses, so that a plain egress entry reaches a server on
// it.
const publicAddr = "11.22.33.44"

// TestPolicySuggestRealRuns is the advisor's check on real runs (issue
// 40): a tool's sandboxed runs are refused a port of a listed name, an
// address, a broker operation and a name, and refused a metadata
// address; their decisions, recorded as the daemon records them and
// spread over a week, go into an audit log file, and airlock policy
// suggest --merge reads it and the config. Under the config it prints,
// which config check accepts, the same runs pass, the metadata address
// is still refused, and nothing was added but what was refused: the
// listed-but-unused name is gone.
//
// With AIRLOCK_RECORD_FIXTURE=DIR the decisions and the config are
// written to DIR (internal/advisor/testdata), the advisor's fixture.
func TestPolicySuggestRealRuns(t *testing.T) {
	isolatednet.Require(t)
	if out, err := exec.Command("ip", "addr", "add", publicAddr+"/32", "dev", "lo").CombinedOutput(); err != nil {
		t.Fatalf("ip addr add: %v: %s", err, out)
	}
	t.Cleanup(func() { exec.Command("ip", "addr", "del", publicAddr+"/32", "dev", "lo").Run() })
	hello := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprintf(w, "hello %s\n", r.Host) })
	listed, other := httptest.NewServer(hello), httptest.NewServer(hello)
	defer listed.Close()
	defer other.Close()
	pub := httptest.NewUnstartedServer(hello)
	l, err := net.Listen("tcp", publicAddr+":0")
	if err != nil {
		t.Fatal(err)
	}
	pub.Listener = l
	pub.Start()
	defer pub.Close()
	secret := randomSecret()
	var hits, authorized atomic.Int64
	up := httptest.NewServer(credentialed(secret, &hits, &authorized, func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "api %s\n", r.URL.Path)
	}))
	defer up.Close()
	port := func(s *httptest.Server) int { return s.Listener.Addr().(*net.TCPAddr).Port }
	conf := fmt.Sprintf(`secrets:
  tok:
    env: AIRLOCK_TEST_BROKER_TOKEN
services:
  gh:
    upstream: %s
    addresses: [127.0.0.1]
    private: true
    credential: {secret: tok, template: "Bearer {secret}"}
    env:
      GH_URL: "{url}"
    operations:
      - GET /repos/{owner}/{repo}/issues
      - DELETE /repos/{owner}/{repo}
tools:
  gh:
    egress:
      - host: plain.test
        ports: [%d]
        addresses: [127.0.0.1]
        private: true
      - unused.test
    services: [gh]
`, strings.Replace(up.URL, "127.0.0.1", "api.test", 1), port(listed))
	script := strings.Join([]string{
		fmt.Sprintf(`curl -fsS http://plain.test:%d/ >/dev/null && echo "listed: ok"`, port(listed)),
		fmt.Sprintf(`curl -fsS http://plain.test:%d/ >/dev/null && echo "other port: ok"`, port(other)),
		fmt.Sprintf(`curl -fsS http://%s:%d/ >/dev/null && echo "address: ok"`, publicAddr, port(pub)),
		`curl -fsS "$GH_URL/repos/octo/hello/issues" >/dev/null && echo "operation: ok"`,
		`curl -fsS "$GH_URL/user" >/dev/null && echo "other operation: ok"`,
		`curl -fsS http://nowhere.test/ >/dev/null 2>&1 || echo "name: failed"`,
		`curl -fsS http://169.254.169.254/ >/dev/null 2>&1 || echo "metadata: refused"`,
		`true`,
	}, "\n")
	dir := t.TempDir()
	cfg := filepath.Join(dir, "airlock.yaml")
	if err := os.WriteFile(cfg, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	// Two runs: the week's Monday and Thursday.
	var runs []result.Result
	for range 2 {
		_, r, out := brokeredRun(t, secret, cfg, script)
		for _, w := range []string{"listed: ok", "operation: ok", "name: failed", "metadata: refused"} {
			if !strings.Contains(out, w) {
				t.Fatalf("before: output lacks %q:\n%s", w, out)
			}
		}
		for _, w := range []string{"other port: ok", "address: ok", "other operation: ok"} {
			if strings.Contains(out, w) {
				t.Fatalf("before: %q passed, the config allows it:\n%s", w, out)
			}
		}
		runs = append(runs, r)
	}

	// The decisions as the node records them (internal/node/record.go),
	// in the week before now.
	evs := weekOf(t, "gh", runs)
	db := filepath.Join(dir, "audit.db")
	log, err := audit.Open(t.Context(), audit.Options{Path: db})
	if err != nil {
		t.Fatal(err)
	}
	if err := log.Append(t.Context(), evs...); err != nil {
		t.Fatal(err)
	}
	if err := log.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	if d := os.Getenv("AIRLOCK_RECORD_FIXTURE"); d != "" {
		recordFixture(t, d, conf, evs)
	}

	o := execAirlock(t, nil, "", "policy", "suggest", "gh", "--db", db, "--config", cfg, "--json")
	if o.code != 0 {
		t.Fatalf("policy suggest: exit %d: %s", o.code, o.stderr)
	}
	var s api.PolicySuggestion
	if err := json.Unmarshal([]byte(o.stdout), &s); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, e := range s.Egress {
		got[e.Entry] = e.Action
	}
	for _, sv := range s.Services {
		for _, op := range sv.Operations {
			got[sv.Service+" "+op.Operation] = op.Action
		}
	}
	want := map[string]string{
		fmt.Sprintf("plain.test:%d,%d", min(port(listed), port(other)), max(port(listed), port(other))): "widen",
		fmt.Sprintf("%s:%d", publicAddr, port(pub)):                                                     "add",
		"nowhere.test:80":                     "add",
		"unused.test":                         "drop",
		"gh GET /repos/{owner}/{repo}/issues": "keep",
		"gh DELETE /repos/{owner}/{repo}":     "drop",
		"gh GET /user":                        "add",
	}
	if len(got) != len(want) {
		t.Errorf("suggestion: got %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: got %q, want %q", k, got[k], v)
		}
	}
	if !slices.ContainsFunc(s.Notes, func(n string) bool { return strings.Contains(n, "169.254.169.254") }) {
		t.Errorf("no note of the metadata refusal: %q", s.Notes)
	}

	o = execAirlock(t, nil, "", "policy", "suggest", "gh", "--db", db, "--config", cfg, "--merge", cfg)
	if o.code != 0 {
		t.Fatalf("policy suggest --merge: exit %d: %s", o.code, o.stderr)
	}
	merged := filepath.Join(dir, "merged.yaml")
	if err := os.WriteFile(merged, []byte(o.stdout), 0o600); err != nil {
		t.Fatal(err)
	}
	if o := execAirlock(t, []string{"AIRLOCK_TEST_BROKER_TOKEN=" + secret}, "", "config", "check", "--config", merged); o.code != 0 {
		t.Fatalf("config check refuses the suggestion: %s\n%s", o.stderr, o.stdout)
	}
	_, r2, out2 := brokeredRun(t, secret, merged, script)
	for _, w := range []string{"listed: ok", "other port: ok", "address: ok", "operation: ok", "other operation: ok", "metadata: refused"} {
		if !strings.Contains(out2, w) {
			t.Errorf("after: output lacks %q:\n%s", w, out2)
		}
	}
	for _, ev := range r2.Egress {
		switch {
		case ev.Code == result.EgressNotAllowed:
			t.Errorf("after: still refused as not listed: %+v", ev)
		case strings.HasPrefix(ev.Destination, "169.254.169.254") && ev.Allow:
			t.Errorf("after: metadata allowed: %+v", ev)
		}
	}
	for _, ev := range r2.Broker {
		if !ev.Allow {
			t.Errorf("after: broker call refused: %+v", ev)
		}
	}
}

// weekOf is the runs' egress and broker decisions as the node records
// them in the audit log, each run on a day of the week before now, its
// decisions a minute apart: what a week of the tool's runs leaves.
func weekOf(t *testing.T, tool string, runs []result.Result) []api.AuditEvent {
	t.Helper()
	var evs []api.AuditEvent
	week := time.Now().Add(-7 * 24 * time.Hour).Truncate(time.Hour).UTC()
	for i, r := range runs {
		at := week.Add(time.Duration(1+3*i) * 24 * time.Hour)
		add := func(kind, sandbox string, allow bool, detail func(time.Time) any) {
			at = at.Add(time.Minute)
			b, err := json.Marshal(detail(at))
			if err != nil {
				t.Fatal(err)
			}
			d := audit.Deny
			if allow {
				d = audit.Allow
			}
			evs = append(evs, api.AuditEvent{Time: at, Kind: kind, Tool: tool, Sandbox: sandbox, Run: fmt.Sprintf("r_fixture%d", i), Decision: d, Detail: b})
		}
		for _, e := range r.Egress {
			kind := audit.KindEgress
			if e.Kind == result.EgressDNS {
				kind = audit.KindDNS
			}
			add(kind, e.Sandbox, e.Allow, func(at time.Time) any { e.Time = at; return e })
		}
		for _, e := range r.Broker {
			add(audit.KindBroker, e.Sandbox, e.Allow, func(at time.Time) any { e.Time = at; return e })
		}
	}
	if len(evs) == 0 {
		t.Fatal("the runs made no decisions")
	}
	return evs
}

// recordFixture writes the decisions (as JSON lines, the export's form)
// and the config to dir.
func recordFixture(t *testing.T, dir, conf string, evs []api.AuditEvent) {
	t.Helper()
	var b strings.Builder
	for i, ev := range evs {
		ev.ID = int64(i + 1)
		line, err := json.Marshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		b.Write(line)
		b.WriteByte('\n')
	}
	if err := os.WriteFile(filepath.Join(dir, "week.jsonl"), []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "week.yaml"), []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
}
