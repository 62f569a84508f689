package node

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/audit"
	"github.com/airlockhq/airlock/internal/config"
	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/linux/inroot"
	"github.com/airlockhq/airlock/internal/testutil"
	"github.com/airlockhq/airlock/result"
	"github.com/airlockhq/airlock/sandbox"
)

func TestMain(m *testing.M) {
	// Sandboxes re-execute the test binary as their init.
	if code, ok := sandbox.Child(); ok {
		os.Exit(code)
	}
	os.Exit(m.Run())
}

const testStateDir = "/run/airlock-test-node"

var testCgroup = testutil.CgroupParent("/airlock-test-node")

// newNode starts a node of the config text until the test ends: the
// core alone, with no edge in front of it.
func newNode(t *testing.T, text string) *Node {
	t.Helper()
	testutil.RequireRoot(t)
	cfg, err := config.Parse("airlock.yaml", []byte(text))
	if err != nil {
		t.Fatal(err)
	}
	n, err := New(t.Context(), Options{Config: cfg, AuditPath: filepath.Join(t.TempDir(), "audit.db"),
		Sandbox: sandbox.Options{StateDir: testStateDir, CgroupParent: testCgroup, InitPath: testutil.InitPath(t)}})
	if err != nil {
		t.Fatal(err)
	}
	n.Start()
	t.Cleanup(func() {
		ctx := context.WithoutCancel(t.Context())
		if err := errors.Join(n.Stop(ctx), n.Close(ctx)); err != nil {
			t.Error(err)
		}
	})
	return n
}

// TestCaptureBudgetRefuses checks the budget's refusals: a run that finds
// no room within the wait, and one whose ceiling alone is over it.
func TestCaptureBudgetRefuses(t *testing.T) {
	b := newCaptureBudget(100, 20*time.Millisecond)
	free, err := b.reserve(t.Context(), 60)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		n    int64
		want string
	}{
		{50, "was held by other runs' output"},
		{101, "over the daemon's budget for captured output"},
	} {
		_, err := b.reserve(t.Context(), tc.n)
		var r *Refusal
		if !errors.As(err, &r) || !errors.Is(err, sandbox.ErrCapacity) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "server.capacity.output") {
			t.Errorf("reserve(%d): got %v, want a capacity refusal saying %q", tc.n, err, tc.want)
		}
	}
	free()
	free() // twice gives back once
	f1, err := b.reserve(t.Context(), 100)
	if err != nil {
		t.Fatalf("after release: %v", err)
	}
	f1()
	// A caller gone while it waits is not told about the budget.
	ctx, cancel := context.WithCancel(t.Context())
	f2, _ := b.reserve(t.Context(), 100)
	cancel()
	if _, err := b.reserve(ctx, 1); err == nil || errors.Is(err, errdefs.ErrUnavailable) || strings.Contains(err.Error(), "budget") {
		t.Errorf("gone caller: %v", err)
	}
	f2()
}

// TestAuditNetEventsCapped: a sandbox that makes decisions without end
// (a DNS loop) writes at most maxNetEvents of them into the log, and one
// audit.capped event.
func TestAuditNetEventsCapped(t *testing.T) {
	n := newNode(t, "tools:\n  sh: {}\n")
	scope := &runScope{tool: "sh", sandbox: "capped0000", run: "r_capped"}
	egress, broker := n.netRecorder(scope)
	for i := range maxNetEvents + 500 {
		if i%2 == 0 {
			egress(result.EgressEvent{Kind: result.EgressDNS, Destination: "loop.example", Allow: false})
		} else {
			broker(result.BrokerEvent{Service: "s", Allow: false})
		}
	}
	if err := n.Audit().Append(t.Context()); err != nil {
		t.Fatal(err)
	}
	count := 0
	for after := int64(0); ; {
		evs, err := n.Audit().Query(t.Context(), audit.Query{Run: "r_capped", After: after, Limit: 1000})
		if err != nil {
			t.Fatal(err)
		}
		if len(evs) == 0 {
			break
		}
		for _, ev := range evs {
			if ev.Kind != audit.KindCapped {
				count++
			}
		}
		after = evs[len(evs)-1].ID
	}
	if count != maxNetEvents {
		t.Errorf("%d decisions recorded, want %d", count, maxNetEvents)
	}
	capped, err := n.Audit().Query(t.Context(), audit.Query{Run: "r_capped", Kind: audit.KindCapped})
	if err != nil || len(capped) != 1 {
		t.Fatalf("audit.capped events: %+v %v", capped, err)
	}
}

// TestAuditNetEventCodes: an egress or broker decision is recorded with
// its code beside its reason, so the log can be searched by code.
func TestAuditNetEventCodes(t *testing.T) {
	n := newNode(t, "tools:\n  sh: {}\n")
	scope := &runScope{tool: "sh", sandbox: "codes00000", run: "r_codes"}
	egress, broker := n.netRecorder(scope)
	egress(result.EgressEvent{Kind: result.EgressProxy, Destination: "169.254.169.254:80", Code: result.EgressMetadata, Reason: "address 169.254.169.254 is a cloud metadata endpoint (never allowed)"})
	broker(result.BrokerEvent{Service: "gh", Method: "DELETE", Code: result.BrokerNoOperation, Reason: "no operation matches DELETE /repos/o/r"})
	if err := n.Audit().Append(t.Context()); err != nil {
		t.Fatal(err)
	}
	evs, err := n.Audit().Query(t.Context(), audit.Query{Run: "r_codes"})
	if err != nil || len(evs) != 2 {
		t.Fatalf("events: %+v %v", evs, err)
	}
	want := map[string]string{audit.KindEgress: result.EgressMetadata, audit.KindBroker: result.BrokerNoOperation}
	for _, ev := range evs {
		var detail struct{ Code, Reason string }
		if err := json.Unmarshal(ev.Detail, &detail); err != nil {
			t.Fatal(err)
		}
		if ev.Decision != audit.Deny || detail.Code != want[ev.Kind] || detail.Reason == "" {
			t.Errorf("%s event: decision %s, detail %s; want deny with code %s and a reason", ev.Kind, ev.Decision, ev.Detail, want[ev.Kind])
		}
	}
}

// TestMetricsFromAudit: the labelled metrics count what the audit log
// commits, with label values bounded: a broker call's service is the
// sandbox's word until an operation of the config matched it, so it is
// not a label then, and a tool the config does not have reads "other".
func TestMetricsFromAudit(t *testing.T) {
	n := newNode(t, "tools:\n  sh: {}\n")
	scope := &runScope{tool: "sh", sandbox: "metrics000", run: "r_metrics"}
	egress, broker := n.netRecorder(scope)
	egress(result.EgressEvent{Kind: result.EgressProxy, Destination: "169.254.169.254:80", Code: result.EgressMetadata})
	egress(result.EgressEvent{Kind: result.EgressProxy, Destination: "evil.test:443", Code: "Not A Code\n"})
	broker(result.BrokerEvent{Service: "attacker-named-" + strings.Repeat("x", 200), Method: "GET", Code: result.BrokerNoOperation})
	broker(result.BrokerEvent{Service: "gh", Operation: "GET /repos/{owner}/{repo}", Method: "GET", Allow: true, Status: 200})
	n.audit.Record(audit.Event{Kind: audit.KindRunFinished, Tool: "sh", Decision: "limit", Detail: audit.Detail(map[string]any{"usage": result.Usage{WallMillis: 1500}})},
		audit.Event{Kind: audit.KindLimit, Tool: "sh", Decision: "memory"},
		audit.Event{Kind: audit.KindSessionCreated, Tool: "gone"},
		audit.Event{Kind: audit.KindSessionEnded, Tool: "sh", Detail: audit.Detail(map[string]string{"reason": "limit: memory"})})
	if err := n.Audit().Append(t.Context()); err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	if err := n.WriteMetrics(&b); err != nil {
		t.Fatal(err)
	}
	got := b.String()
	for _, want := range []string{
		`airlock_egress_decisions_total{tool="sh",kind="egress",decision="deny",code="` + result.EgressMetadata + `"} 1`,
		`airlock_egress_decisions_total{tool="sh",kind="egress",decision="deny",code="other"} 1`,
		`airlock_broker_calls_total{tool="sh",service="-",operation="-",decision="deny",code="` + result.BrokerNoOperation + `"} 1`,
		`airlock_broker_calls_total{tool="sh",service="gh",operation="GET /repos/{owner}/{repo}",decision="allow",code="-"} 1`,
		`airlock_run_outcomes_total{tool="sh",outcome="limit"} 1`,
		`airlock_run_duration_seconds_bucket{tool="sh",outcome="limit",le="2.5"} 1`,
		`airlock_run_duration_seconds_bucket{tool="sh",outcome="limit",le="1"} 0`,
		`airlock_limit_breaches_total{tool="sh",limit="memory"} 1`,
		`airlock_sessions_opened_total{tool="other"} 1`,
		`airlock_sessions_ended_total{tool="sh",reason="limit"} 1`,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("metrics lack %s:\n%s", want, got)
		}
	}
	if strings.Contains(got, "attacker-named") {
		t.Errorf("a sandbox-named service is a label:\n%s", got)
	}
}

// TestCoreAuthorizes: the core checks, itself, that a caller may use the
// tool it names, whatever the edge in front of it checked: a token scoped
// to one tool that reaches a run, a session or a process of another (an
// edge that forgot its own check) is refused, and nothing is claimed,
// held or recorded. No caller at all is refused the same way: none
// stands for the local socket's.
func TestCoreAuthorizes(t *testing.T) {
	n := newNode(t, "tools:\n  mine: {}\n  theirs: {}\n")
	scoped := TokenCaller(&config.Token{Name: "ci", Tools: []string{"mine"}})
	theirs := n.Config().Tools["theirs"]
	for _, c := range []*Caller{scoped, nil} {
		res, done, err := n.Run(t.Context(), RunRequest{Tool: theirs, Caller: c, Client: "test", Argv: []string{"true"}, Capture: true})
		if res != nil || done != nil || !errdefs.IsDenied(err) {
			t.Errorf("run of another tool by %v: %v %v", c, res, err)
		}
		if s, err := n.OpenSession(t.Context(), theirs, "test", c, time.Minute, time.Minute, nil); s != nil || !errdefs.IsDenied(err) {
			t.Errorf("session of another tool by %v: %v", c, err)
		}
		if p, err := n.StartProcess(t.Context(), theirs, c, "test"); p != nil || !errdefs.IsDenied(err) {
			t.Errorf("process of another tool by %v: %v", c, err)
		}
	}
	if st := n.Pool("theirs").Stats(); st.Hits+st.Misses != 0 {
		t.Errorf("%d claims of the refused tool's pool, want none", st.Hits+st.Misses)
	}
	if got := n.Counts().Forbidden.Load(); got != 3 {
		t.Errorf("%d refusals counted, want the scoped token's 3", got)
	}
	if err := n.Audit().Append(t.Context()); err != nil {
		t.Fatal(err)
	}
	for _, kind := range []string{"run", "session"} {
		if evs, err := n.Audit().Query(t.Context(), audit.Query{Kind: kind}); err != nil || len(evs) != 0 {
			t.Errorf("%s events: %d (%v), want none", kind, len(evs), err)
		}
	}
	// The tool in its scope runs.
	res, done, err := n.Run(t.Context(), RunRequest{Tool: n.Config().Tools["mine"], Caller: scoped, Client: "test", Argv: []string{"true"}, Capture: true})
	if err != nil || res.Outcome != result.Exited {
		t.Fatalf("run of its own tool: %+v %v", res, err)
	}
	done()
}

// TestSessionEndWaitsForAll: every caller of a session's End, the first
// and the others at once (the reaper, a DELETE, an E2B kill, shutdown
// all end sessions through it), returns only once the sandbox is gone
// from the host and the end recorded, and the end is recorded once. A
// call in flight (entered) holds the end, so the callers overlap for as
// long as the test holds it.
func TestSessionEndWaitsForAll(t *testing.T) {
	n := newNode(t, "tools:\n  sh: {}\n")
	s, err := n.OpenSession(t.Context(), n.Config().Tools["sh"], "test", Local, time.Minute, time.Hour, nil)
	if err != nil {
		t.Fatal(err)
	}
	cgroups := func() []string {
		var found []string
		for _, pat := range []string{"/sys/fs/cgroup/*" + testCgroup + "/" + s.Sandbox().ID(), "/sys/fs/cgroup" + testCgroup + "/" + s.Sandbox().ID()} {
			m, _ := filepath.Glob(pat)
			found = append(found, m...)
		}
		return found
	}
	if len(cgroups()) == 0 {
		t.Fatalf("sandbox %s has no cgroup to watch: the test would prove nothing", s.Sandbox().ID())
	}
	if !s.Enter() {
		t.Fatal("a new session refused a call")
	}
	type answer struct {
		who     string
		err     error
		cgroups []string
		ended   int
	}
	answers := make(chan answer, 3)
	for _, who := range []string{"idle timeout", "deleted", "killed"} {
		go func() {
			err := s.End(context.WithoutCancel(t.Context()), who)
			evs, _ := n.Audit().Query(context.WithoutCancel(t.Context()), audit.Query{Kind: audit.KindSessionEnded, Session: s.ID()})
			answers <- answer{who, err, cgroups(), len(evs)}
		}()
	}
	time.Sleep(300 * time.Millisecond)
	select {
	case a := <-answers:
		t.Fatalf("End (%s) returned %v while a call was in flight", a.who, a.err)
	default:
	}
	s.Leave()
	for range 3 {
		select {
		case a := <-answers:
			if a.err != nil || len(a.cgroups) > 0 || a.ended != 1 {
				t.Errorf("End (%s) returned %v with cgroups %v and %d session.ended records, want none left and 1", a.who, a.err, a.cgroups, a.ended)
			}
		case <-time.After(time.Minute):
			t.Fatal("an End never returned")
		}
	}
	// Ending an ended session returns at once, even for a caller gone.
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := s.End(ctx, "late"); err != nil {
		t.Errorf("End of an ended session: %v", err)
	}
}

// TestReadOnlyRootRefusesWrites: a file call's view of a read-only root
// (InDir "/", which the E2B files API reads) cannot write, even with no
// check above it: the root is mounted read-only for whoever comes
// through it. Its files are read as the sandbox reads them.
func TestReadOnlyRootRefusesWrites(t *testing.T) {
	n := newNode(t, "tools:\n  sh: {}\n")
	s, err := n.OpenSession(t.Context(), n.Config().Tools["sh"], "test", Local, time.Minute, time.Hour, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !s.Enter() {
		t.Fatal("a new session refused a call")
	}
	defer s.Leave()
	f, _, err := s.OpenFileIn("/", "etc/hostname")
	if err != nil {
		t.Fatalf("read the root's etc/hostname: %v", err)
	}
	b, _ := io.ReadAll(f)
	f.Close()
	if string(b) != "sandbox\n" {
		t.Errorf("etc/hostname: %q, want the sandbox's own", b)
	}
	for _, rel := range []string{"x.txt", "etc/x.txt", "var/tmp/x.txt"} {
		err := s.InDir("/", func(root *os.File, uid int) error {
			_, err := inroot.WriteFile(root, rel, strings.NewReader("no"), 10, uid, uid)
			return err
		})
		if err == nil {
			t.Errorf("a write of /%s through the read-only root was taken", rel)
		}
		t.Logf("/%s: %v", rel, err)
		if _, err := os.Lstat("/" + rel); !os.IsNotExist(err) {
			t.Errorf("/%s is on the host (%v)", rel, err)
		}
	}
}
