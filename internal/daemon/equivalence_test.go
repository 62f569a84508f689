package daemon

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/client"
	"github.com/airlockhq/airlock/result"
)

// Equivalence tests. Each fast path of the node is a second path that must
// stay equivalent to the general one: these run the same calls through
// both and compare what comes out, the answer, the error and the audit
// records, with what differs by nature (ids, times, durations, resource
// usage) normalised away. Anything else that differs fails the test.

// noisy are the members of an answer or an audit detail that differ
// between two runs of the same command whatever path they take.
var noisy = map[string]bool{
	"time": true, "duration_ms": true, "usage": true, "evidence": true,
	"sandbox_id": true, "run_id": true,
	// A breach's observed value (how far past the ceiling the sampler
	// found the command) varies from run to run; the ceiling does not.
	"observed": true,
	// A post-mortem's processes: their host pids and resident memory.
	"pid": true, "rss_bytes": true,
}

// observedText is a breach's observed value where a sentence tells it,
// and pmText a post-mortem's process's pid and memory.
var (
	observedText = regexp.MustCompile(`observed [0-9]+`)
	pmText       = regexp.MustCompile(`\(pid [0-9]+, [0-9.]+ MiB( resident)?\)`)
)

// normalizer renders answers and audit events for comparison: each id it
// was told of, and each tool name, becomes a placeholder, and the noisy
// members go.
type normalizer map[string]string

// value normalises a decoded JSON value.
func (n normalizer) value(v any) any {
	switch v := v.(type) {
	case map[string]any:
		out := map[string]any{}
		for k, x := range v {
			if !noisy[k] {
				out[k] = n.value(x)
			}
		}
		if evs, ok := out["egress"].([]any); ok {
			// The order of decisions made at once (a resolver's A and
			// AAAA queries, which curl sends together) is not what is
			// compared: the decisions are.
			slices.SortFunc(evs, func(a, b any) int {
				ja, _ := json.Marshal(a)
				jb, _ := json.Marshal(b)
				return strings.Compare(string(ja), string(jb))
			})
		}
		return out
	case []any:
		out := make([]any, len(v))
		for i, x := range v {
			out[i] = n.value(x)
		}
		return out
	case string:
		if p, ok := n[v]; ok {
			return p
		}
		for id, p := range n {
			if strings.HasPrefix(p, "<id") {
				v = strings.ReplaceAll(v, id, p)
			}
		}
		return pmText.ReplaceAllString(observedText.ReplaceAllString(v, "observed N"), "(pid N, M)")
	}
	return v
}

// json normalises the JSON encoding of v.
func (n normalizer) json(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var x any
	if err := json.Unmarshal(b, &x); err != nil {
		t.Fatal(err)
	}
	b, _ = json.Marshal(n.value(x)) // maps encode with sorted keys
	return string(b)
}

// events renders evs, each normalised, sorted: the order in which the
// log's writer commits a call's records (the destroy after the answer, or
// before it) is not what is compared.
func (n normalizer) events(t *testing.T, evs []api.AuditEvent) []string {
	t.Helper()
	out := make([]string, 0, len(evs))
	for _, ev := range evs {
		for _, id := range []string{ev.Sandbox, ev.Run, ev.Session} {
			if _, ok := n[id]; id != "" && !ok {
				n[id] = fmt.Sprintf("<id%d>", len(n))
			}
		}
		var detail any
		if len(ev.Detail) > 0 {
			if err := json.Unmarshal(ev.Detail, &detail); err != nil {
				t.Fatal(err)
			}
		}
		out = append(out, n.json(t, map[string]any{
			"kind": ev.Kind, "tool": ev.Tool, "sandbox": ev.Sandbox, "session": ev.Session, "run": ev.Run,
			"client": ev.Client, "decision": ev.Decision, "detail": detail,
		}))
	}
	slices.Sort(out)
	return out
}

// auditCursor is the id of the newest event in the audit log.
func auditCursor(t *testing.T, c *client.Client) int64 {
	t.Helper()
	page, err := c.Audit(t.Context(), client.AuditQuery{Tail: true, Limit: 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Events) == 0 {
		return 0
	}
	return page.Events[len(page.Events)-1].ID
}

// quietCursor is auditCursor once the log has had nothing new for a
// while: a request's api.request is written just after its answer, so a
// request answered before the cursor (the client's own, after its
// initialization) could otherwise land in the next call's window.
// (It reads the log itself: a read through the API is a request the log
// records.)
func quietCursor(t *testing.T, d *Daemon) int64 {
	t.Helper()
	last := d.Audit().Last()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		time.Sleep(150 * time.Millisecond)
		if err := d.Audit().Append(t.Context()); err != nil {
			t.Fatal(err)
		}
		now := d.Audit().Last()
		if now == last {
			return now
		}
		last = now
	}
	t.Fatal("the audit log did not go quiet within 10 s")
	return 0
}

// has reports whether evs holds an event of kind (of sandbox sb, when
// set) whose detail contains each of in.
func has(evs []api.AuditEvent, kind, sb string, in ...string) bool {
	return slices.ContainsFunc(evs, func(ev api.AuditEvent) bool {
		if ev.Kind != kind || sb != "" && ev.Sandbox != sb {
			return false
		}
		for _, s := range in {
			if !strings.Contains(string(ev.Detail), s) {
				return false
			}
		}
		return true
	})
}

// waitWarm waits until each of tools' pools holds its warm sandboxes, so
// that the next call's claim is warm whatever path it takes, and the
// pool's refill of the last call is recorded before the next begins.
func waitWarm(t *testing.T, d *Daemon, tools ...string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for _, tool := range tools {
		for p := d.Pool(tool); p.Stats().Idle < p.Stats().Warm; {
			if time.Now().After(deadline) {
				t.Fatalf("pool %s never refilled: %+v", tool, p.Stats())
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
}

// diff fails the test when a and b, the renderings of what two paths
// gave, differ.
func diff(t *testing.T, what, nameA, nameB string, a, b []string) {
	t.Helper()
	if slices.Equal(a, b) {
		return
	}
	t.Errorf("%s differ:\n%s:\n  %s\n%s:\n  %s", what, nameA, strings.Join(a, "\n  "), nameB, strings.Join(b, "\n  "))
}

const equivMCPConfig = `
server:
  tcp: %s
  tokens:
    - {name: agent, secret: agent, tools: [echo, fail, nap, plain]}
secrets:
  agent: {env: TEST_EQUIV_TOKEN}
tools:
  echo:
    command: [echo, "{word}", "{more}"]
    pool: {warm: 1}
    inputs:
      word: {required: true}
      more: {max_length: 10}
  fail:
    command: [sh, -c, "echo failing >&2; exit 3"]
  nap:
    command: [sleep, "{seconds}"]
    limits: {time: 300ms}
    inputs:
      seconds: {type: integer, minimum: 0, maximum: 60, required: true}
  plain: {}
  other:
    command: [echo, other]
`

// TestMCPFastPathEquivalent runs each call of an MCP client through the
// tools/call fast path and through the SDK's server (the fast path turned
// off for the call, on the same session), and compares the answers, the
// errors and the audit records each leaves: the mcp.call record, the
// run's, its sandbox's claim and end, and the request's. Calls that run,
// fail, breach a limit, or are refused (bad arguments, an unknown tool, a
// tool without a command, a tool outside the caller's token) are all
// compared; the fast path must have answered the calls it takes (a
// configured tool the token may use) and no other.
func TestMCPFastPathEquivalent(t *testing.T) {
	const token = "equiv-agent-0123456789abcdef"
	t.Setenv("TEST_EQUIV_TOKEN", token)
	addr := freePort(t)
	d, sock := serveConfig(t, fmt.Sprintf(equivMCPConfig, addr), nil)
	local := client.New(sock)
	hc := &http.Client{Transport: roundTripper(func(r *http.Request) (*http.Response, error) {
		r = r.Clone(r.Context())
		r.Header.Set("Authorization", "Bearer "+token)
		return http.DefaultTransport.RoundTrip(r)
	})}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "equiv", Version: "1"}, nil).
		Connect(t.Context(), &mcp.StreamableClientTransport{Endpoint: "http://" + addr + "/mcp", HTTPClient: hc}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	// The client has said it finished initializing once it lists tools.
	if _, err := cs.ListTools(t.Context(), nil); err != nil {
		t.Fatal(err)
	}
	// The requests so far (initialize, initialized, tools/list) are
	// recorded once answered: in the log before the first call's window.
	waitAudit(t, local, client.AuditQuery{Kind: "api.request", Client: "token:agent"}, func(evs []api.AuditEvent) bool {
		return len(slices.DeleteFunc(evs, func(ev api.AuditEvent) bool { return !strings.Contains(string(ev.Detail), `"POST"`) })) >= 3
	})
	t.Cleanup(func() { d.mcp.SetFastPath(true) })

	calls := []struct {
		name, tool string
		args       map[string]any
		fast       bool // the fast path takes it
	}{
		{"a call that runs", "echo", map[string]any{"word": "hi", "more": "there"}, true},
		{"a refused argument", "echo", map[string]any{"word": "--x"}, true},
		{"a missing argument", "echo", map[string]any{}, true},
		{"an argument the tool has not", "echo", map[string]any{"word": "x", "rm": "-rf"}, true},
		{"an argument of the wrong type", "nap", map[string]any{"seconds": "five"}, true},
		{"a command that fails", "fail", nil, true},
		{"a command that breaches its time", "nap", map[string]any{"seconds": 5}, true},
		{"an unknown tool", "nope", nil, false},
		{"a tool without a command", "plain", nil, false},
		{"a tool outside the token", "other", nil, false},
	}
	// one makes the call through the fast path, or not, and returns its
	// rendered answer (or error) and audit records.
	one := func(t *testing.T, tool string, args map[string]any, fast, wantFast bool) (answer, records []string) {
		t.Helper()
		waitWarm(t, d, "echo")
		after := quietCursor(t, d)
		d.mcp.SetFastPath(fast)
		before := d.mcp.FastCalls()
		r, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: tool, Arguments: args})
		if took := d.mcp.FastCalls() != before; took != (fast && wantFast) {
			t.Errorf("%s (fast path on: %v): the fast path answered: %v", tool, fast, took)
		}
		var sb string
		n := normalizer{}
		if err != nil {
			answer = []string{"error: " + err.Error()}
		} else {
			var res struct {
				SandboxID string `json:"sandbox_id"`
			}
			b, _ := json.Marshal(r.StructuredContent)
			_ = json.Unmarshal(b, &res)
			if sb = res.SandboxID; sb != "" {
				n[sb] = "<id-sandbox>"
			}
			answer = []string{n.json(t, r)}
		}
		evs := waitAudit(t, local, client.AuditQuery{After: after}, func(evs []api.AuditEvent) bool {
			return has(evs, "mcp.call", "") && has(evs, "api.request", "", `"POST"`, `"/mcp"`) &&
				(sb == "" || has(evs, "sandbox.destroyed", sb))
		})
		// Only the call's own: not the pool's refill, nor the test's own
		// reads of the log.
		evs = slices.DeleteFunc(evs, func(ev api.AuditEvent) bool {
			return ev.Sandbox != "" && ev.Sandbox != sb ||
				ev.Kind == "api.request" && !strings.Contains(string(ev.Detail), `"/mcp"`)
		})
		return answer, n.events(t, evs)
	}
	start := time.Now()
	for _, c := range calls {
		t.Run(strings.ReplaceAll(c.name, " ", "_"), func(t *testing.T) {
			fastAnswer, fastRecords := one(t, c.tool, c.args, true, c.fast)
			sdkAnswer, sdkRecords := one(t, c.tool, c.args, false, c.fast)
			diff(t, "answers", "fast path", "SDK", fastAnswer, sdkAnswer)
			diff(t, "audit records", "fast path", "SDK", fastRecords, sdkRecords)
			if len(fastRecords) == 0 {
				t.Error("no audit records")
			}
		})
	}
	t.Logf("%d calls each way in %v", len(calls), time.Since(start).Round(time.Millisecond))
}

// TestPrebindEquivalent runs the same commands, one reaching an allowed
// destination and one a refused one, in a tool whose sandboxes the pool
// binds while it builds them (prebound) and in the same tool bound at the
// claim (one with a broker service, which is never bound ahead; the
// service is not used), both claimed warm, and compares the results (the
// egress decisions among them) and the audit records of each run. The
// tool's name is normalised, as are ids and times.
func TestPrebindEquivalent(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "hello %s\n", r.Host)
	}))
	t.Cleanup(up.Close)
	port := up.Listener.Addr().(*net.TCPAddr).Port
	t.Setenv("EQUIV_TEST_SECRET", "s3cret")
	egress := fmt.Sprintf(`
    egress:
      - host: plain.test
        ports: [%d]
        addresses: [127.0.0.1]
        private: true`, port)
	d, sock := serveConfig(t, `
tools:
  prebound:
    pool: {warm: 1}`+egress+`
  atclaim:
    pool: {warm: 1}
    services: [api]`+egress+`
services:
  api:
    upstream: https://api.example
    credential: {secret: k}
    operations: [GET /]
secrets:
  k: {env: EQUIV_TEST_SECRET}
`, nil)
	c := client.New(sock)
	// one runs argv in tool and returns its rendered result and records.
	one := func(t *testing.T, tool string, argv []string) (answer, records []string) {
		t.Helper()
		waitWarm(t, d, tool)
		ahead := d.Prebound()
		after := auditCursor(t, c)
		r, err := c.Run(t.Context(), api.RunRequest{Tool: tool, Argv: argv})
		if err != nil {
			t.Fatalf("%s: %v", tool, err)
		}
		if got, want := slices.Contains(ahead, r.SandboxID), tool == "prebound"; got != want {
			t.Fatalf("%s: sandbox bound ahead %v, want %v", tool, got, want)
		}
		n := normalizer{tool: "<tool>", r.SandboxID: "<id-sandbox>"}
		evs := waitAudit(t, c, client.AuditQuery{After: after}, func(evs []api.AuditEvent) bool {
			return has(evs, "sandbox.destroyed", r.SandboxID) && has(evs, "api.request", "", `"/v1/runs"`)
		})
		evs = slices.DeleteFunc(evs, func(ev api.AuditEvent) bool {
			return ev.Sandbox != "" && ev.Sandbox != r.SandboxID ||
				ev.Kind == "api.request" && !strings.Contains(string(ev.Detail), `"/v1/runs"`)
		})
		return []string{n.json(t, r)}, n.events(t, evs)
	}
	start := time.Now()
	cmds := []struct {
		name string
		argv []string
		// want is in the result of both: the egress decision made.
		want string
	}{
		{"an allowed destination", []string{"curl", "-sS", fmt.Sprintf("http://plain.test:%d/", port)}, `"allow":true`},
		{"a refused destination", []string{"curl", "-sS", "http://evil.test/"}, `"allow":false`},
		// Past the proxy: the name resolved by the sandbox's DNS, the
		// connection taken by the transparent gateway.
		{"an allowed destination, direct", []string{"curl", "-sS", "--noproxy", "*", fmt.Sprintf("http://plain.test:%d/", port)}, `"kind":"transparent"`},
		{"a refused destination, direct", []string{"sh", "-c", "curl -sS --noproxy '*' --max-time 2 http://evil.test/; echo exit $?"}, `"kind":"dns"`},
	}
	for _, tc := range cmds {
		t.Run(strings.ReplaceAll(tc.name, " ", "_"), func(t *testing.T) {
			preAnswer, preRecords := one(t, "prebound", tc.argv)
			claimAnswer, claimRecords := one(t, "atclaim", tc.argv)
			diff(t, "results", "bound ahead", "bound at the claim", preAnswer, claimAnswer)
			diff(t, "audit records", "bound ahead", "bound at the claim", preRecords, claimRecords)
			if !strings.Contains(preAnswer[0], tc.want) || !has2(preRecords, `"kind":"egress"`) && !has2(preRecords, `"kind":"dns"`) {
				t.Errorf("no egress decision %s: %s\n%s", tc.want, preAnswer[0], strings.Join(preRecords, "\n"))
			}
		})
	}
	t.Logf("%d commands each way in %v", len(cmds), time.Since(start).Round(time.Millisecond))
}

// has2 reports whether one of lines contains s.
func has2(lines []string, s string) bool {
	return slices.ContainsFunc(lines, func(l string) bool { return strings.Contains(l, s) })
}

// TestRunExecEquivalent runs the same commands as runs (POST /v1/runs,
// whose audit records are queued and written after the answer) and as
// execs in a session (POST /v1/sessions/{id}/exec, whose records are each
// acknowledged before going on), and compares the results and the records
// each run leaves; and it makes the same refusals both ways (an unknown
// tool, a tool outside the caller's token, bad arguments) and compares
// the errors, neither leaving a run's record.
//
// What legitimately differs is normalised:
//   - an exec's records carry its session's id; a run's, none;
//   - a run's run.started has no sandbox: it is queued before the claim,
//     whose work it overlaps; an exec's names its session's sandbox;
//   - a run's sandbox is claimed (sandbox.claimed, under the run), and
//     created and destroyed, for it alone; a session's sandbox lifecycle
//     (its claim, session.created and session.ended) is the session's,
//     recorded outside any exec: sandbox and session events are left out;
//   - a run's egress decisions are recorded under the run; a session's
//     binding lives as long as the session and records its decisions
//     under the session, not under the exec that made them: the run is
//     left out of egress, dns and broker events.
func TestRunExecEquivalent(t *testing.T) {
	const token = "equiv-agent-0123456789abcdef"
	t.Setenv("TEST_EQUIV_TOKEN", token)
	addr := freePort(t)
	d, sock := serveConfig(t, `
server:
  tcp: `+addr+`
  tokens:
    - {name: agent, secret: agent, tools: [sh]}
secrets:
  agent: {env: TEST_EQUIV_TOKEN}
tools:
  sh:
    pool: {warm: 1}
    limits: {time: 2s}
    env: {GREETING: hello}
  other: {}
`, nil)
	c, agent := client.New(sock), client.NewTCP(addr, token)
	ctx := t.Context()
	// records waits for run's records and returns them rendered.
	records := func(t *testing.T, after int64, run, session string) []string {
		t.Helper()
		evs := waitAudit(t, c, client.AuditQuery{After: after}, func(evs []api.AuditEvent) bool {
			return slices.ContainsFunc(evs, func(ev api.AuditEvent) bool { return ev.Kind == "run.finished" && ev.Run == run })
		})
		var mine []api.AuditEvent
		for _, ev := range evs {
			switch {
			case strings.HasPrefix(ev.Kind, "sandbox.") || strings.HasPrefix(ev.Kind, "session."):
			case ev.Kind == "egress" || ev.Kind == "dns" || ev.Kind == "broker":
				if ev.Run == run || session != "" && ev.Session == session {
					ev.Run, ev.Session = "", ""
					mine = append(mine, ev)
				}
			case ev.Run == run:
				if ev.Kind == "run.started" {
					ev.Sandbox = ""
				}
				ev.Session = ""
				mine = append(mine, ev)
			}
		}
		return normalizer{}.events(t, mine)
	}
	open := func(t *testing.T) string {
		t.Helper()
		s, err := c.CreateSession(ctx, api.SessionRequest{Tool: "sh"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.DeleteSession(ctx, s.ID) })
		return s.ID
	}
	start := time.Now()
	cmds := []struct {
		name string
		req  api.ExecRequest
		want result.Outcome
	}{
		{"a command that prints", api.ExecRequest{Argv: []string{"sh", "-c", `read x; echo "$GREETING $FOO $x from $(pwd)"; echo err >&2`},
			Env: api.Env{"FOO=bar"}, Workdir: "/tmp", Stdin: "world\n"}, result.Exited},
		{"a command that fails", api.ExecRequest{Argv: []string{"sh", "-c", "exit 3"}}, result.Exited},
		{"a refused destination", api.ExecRequest{Argv: []string{"curl", "-sS", "http://evil.test/"}}, result.Exited},
		{"a command that breaches its time", api.ExecRequest{Argv: []string{"sleep", "5"}}, result.LimitExceeded},
	}
	for _, tc := range cmds {
		t.Run(strings.ReplaceAll(tc.name, " ", "_"), func(t *testing.T) {
			waitWarm(t, d, "sh")
			after := auditCursor(t, c)
			run, err := c.Run(ctx, api.RunRequest{Tool: "sh", Argv: tc.req.Argv, Env: tc.req.Env, Workdir: tc.req.Workdir, Stdin: tc.req.Stdin})
			if err != nil {
				t.Fatal(err)
			}
			runRecords := records(t, after, run.RunID, "")

			waitWarm(t, d, "sh")
			session := open(t)
			after = auditCursor(t, c)
			exec, err := c.Exec(ctx, session, tc.req)
			if err != nil {
				t.Fatal(err)
			}
			execRecords := records(t, after, exec.RunID, session)

			if run.Outcome != tc.want {
				t.Errorf("outcome %s, want %s", run.Outcome, tc.want)
			}
			n := normalizer{run.SandboxID: "<id-sandbox>", exec.SandboxID: "<id-sandbox>"}
			diff(t, "results", "run", "session exec", []string{n.json(t, run)}, []string{n.json(t, exec)})
			diff(t, "audit records", "run", "session exec", runRecords, execRecords)
		})
	}

	// The same refusals both ways: the same error, and no run recorded.
	session := open(t)
	refusals := []struct {
		name      string
		run       func() error
		execution func() error
	}{
		{"an unknown tool",
			func() error { _, err := c.Run(ctx, api.RunRequest{Tool: "nope", Argv: []string{"true"}}); return err },
			func() error { _, err := c.CreateSession(ctx, api.SessionRequest{Tool: "nope"}); return err }},
		{"a tool outside the token",
			func() error {
				_, err := agent.Run(ctx, api.RunRequest{Tool: "other", Argv: []string{"true"}})
				return err
			},
			func() error { _, err := agent.CreateSession(ctx, api.SessionRequest{Tool: "other"}); return err }},
		{"a relative workdir",
			func() error {
				_, err := c.Run(ctx, api.RunRequest{Tool: "sh", Argv: []string{"pwd"}, Workdir: "tmp"})
				return err
			},
			func() error {
				_, err := c.Exec(ctx, session, api.ExecRequest{Argv: []string{"pwd"}, Workdir: "tmp"})
				return err
			}},
		{"an empty command",
			func() error { _, err := c.Run(ctx, api.RunRequest{Tool: "sh", Argv: []string{""}}); return err },
			func() error { _, err := c.Exec(ctx, session, api.ExecRequest{Argv: []string{""}}); return err }},
	}
	// refused makes the call and returns its error and the runs it
	// recorded: none is wanted. A run's start is queued before anything
	// of it happens, and a query waits for what is queued, so a run the
	// refusal let through would be found at once.
	refused := func(t *testing.T, call func() error) []string {
		t.Helper()
		after := auditCursor(t, c)
		err := call()
		var ce *client.Error
		if !errors.As(err, &ce) {
			t.Fatalf("not an API error: %v", err)
		}
		page, aerr := c.Audit(ctx, client.AuditQuery{After: after, Kind: "run"})
		if aerr != nil {
			t.Fatal(aerr)
		}
		return append([]string{fmt.Sprintf("%d %s %s", ce.Status, ce.Code, ce.Message)}, normalizer{}.events(t, page.Events)...)
	}
	for _, tc := range refusals {
		t.Run(strings.ReplaceAll(tc.name, " ", "_"), func(t *testing.T) {
			r, e := refused(t, tc.run), refused(t, tc.execution)
			diff(t, "refusals", "run", "session", r, e)
			if len(r) != 1 {
				t.Errorf("a refused run was recorded: %v", r[1:])
			}
		})
	}
	t.Logf("%d commands and %d refusals each way in %v", len(cmds), len(refusals), time.Since(start).Round(time.Millisecond))
}
