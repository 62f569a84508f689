package daemon

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/client"
)

// TestAuditScopedToToken attacks the audit log from a second tenant: two
// tokens A and B on the TCP listener, both allowed the same tool. A runs
// a command, and execs one in a session, with a (fake) key in its argv.
// B reads the log every way it can — a page, the tail, a follow made
// while A runs, filters naming A's client, run, session and sandbox —
// and must find none of A's events, only its own. An auditor token and
// the local socket read A's command line. Before, every token read every
// event of its tools: B read A's key.
func TestAuditScopedToToken(t *testing.T) {
	const keyA, keyB, keyAud = "tenant-a-0123456789abcdef", "tenant-b-0123456789abcdef", "auditor-0123456789abcdef"
	const fakeKey = "sk-live-FAKEKEY-4f1c9a7e2b"
	t.Setenv("TEST_KEY_A", keyA)
	t.Setenv("TEST_KEY_B", keyB)
	t.Setenv("TEST_KEY_AUD", keyAud)
	addr := freePort(t)
	_, sock := serveConfig(t, `
server:
  tcp: `+addr+`
  tokens:
    - {name: a, secret: a, tools: [sh]}
    - {name: b, secret: b, tools: [sh]}
    - {name: aud, secret: aud, tools: [sh], auditor: true}
secrets:
  a: {env: TEST_KEY_A}
  b: {env: TEST_KEY_B}
  aud: {env: TEST_KEY_AUD}
tools:
  sh: {}
  other: {}
`, nil)
	ctx := t.Context()
	a, b, aud, local := client.NewTCP(addr, keyA), client.NewTCP(addr, keyB), client.NewTCP(addr, keyAud), client.New(sock)

	// B runs something of its own, and starts following the log.
	rb, err := b.Run(ctx, api.RunRequest{Tool: "sh", Argv: []string{"true"}})
	if err != nil {
		t.Fatal(err)
	}
	now, err := b.Audit(ctx, client.AuditQuery{Tail: true, Limit: 1})
	if err != nil {
		t.Fatal(err)
	}
	// B follows the log as airlock audit --follow does, from before A
	// starts until after A is done: each page's next is the cursor of
	// the next long poll.
	aDone := make(chan struct{})
	followed := make(chan []api.AuditEvent, 1)
	go func() {
		var got []api.AuditEvent
		defer func() { followed <- got }()
		cursor, last := now.Next, false
		for !last {
			select {
			case <-aDone:
				last = true // one more poll, for what A's end committed
			default:
			}
			p, err := b.Audit(ctx, client.AuditQuery{After: cursor, Wait: time.Second, Limit: 1000})
			if err != nil {
				t.Error(err)
				return
			}
			got, cursor = append(got, p.Events...), p.Next
		}
	}()
	time.Sleep(100 * time.Millisecond)

	// A: a run, a session's exec, a refusal, each with its key in sight.
	ra, err := a.Run(ctx, api.RunRequest{Tool: "sh", Argv: []string{"echo", "--api-key", fakeKey}})
	if err != nil {
		t.Fatal(err)
	}
	s, err := a.CreateSession(ctx, api.SessionRequest{Tool: "sh"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Exec(ctx, s.ID, api.ExecRequest{Argv: []string{"echo", fakeKey + "-session"}}); err != nil {
		t.Fatal(err)
	}
	if err := a.DeleteSession(ctx, s.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Run(ctx, api.RunRequest{Tool: "other", Argv: []string{"echo", fakeKey}}); err == nil {
		t.Fatal("token a ran a tool outside its scope")
	}
	// Every event of A's is committed (as the socket reads them) before
	// B's follow ends.
	aEvents := func(evs []api.AuditEvent) bool {
		var started, sess, refused, destroyed bool
		for _, ev := range evs {
			started = started || ev.Kind == "run.started" && ev.Run == ra.RunID && strings.Contains(string(ev.Detail), fakeKey)
			sess = sess || ev.Kind == "session.ended" && ev.Session == s.ID
			refused = refused || ev.Kind == "api.request" && ev.Decision == "deny"
			destroyed = destroyed || ev.Kind == "sandbox.destroyed" && ev.Sandbox == ra.SandboxID
		}
		return started && sess && refused && destroyed
	}
	waitAudit(t, local, client.AuditQuery{Client: "token:a"}, aEvents)
	close(aDone)

	// B, every way it can ask.
	pages := map[string][]api.AuditEvent{"a follow across A's run": <-followed}
	for name, q := range map[string]client.AuditQuery{
		"a page":           {Limit: 1000},
		"the tail":         {Tail: true, Limit: 1000},
		"from the start":   {After: 0, Limit: 1000, Wait: time.Second},
		"A's client":       {Client: "token:a"},
		"A's run":          {Run: ra.RunID},
		"A's session":      {Session: s.ID},
		"A's sandbox":      {Sandbox: ra.SandboxID},
		"the kind":         {Kind: "run.started", Tool: "sh"},
		"A's refusals":     {Kind: "api.request", Decision: "deny"},
		"the daemon's own": {Kind: "daemon"},
	} {
		page, err := b.Audit(ctx, q)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		pages[name] = page.Events
	}
	for name, evs := range pages {
		raw, _ := json.Marshal(evs)
		if strings.Contains(string(raw), fakeKey) {
			t.Errorf("token b read token a's key through %s: %s", name, raw)
		}
		for _, ev := range evs {
			if ev.Client != "token:b" {
				t.Errorf("token b read, through %s, an event it did not cause: %+v", name, ev)
			}
		}
	}
	// A reads its own: its run with the key, its session, its refusal
	// and the end of its run's sandbox, every event its own.
	for _, ev := range waitAudit(t, a, client.AuditQuery{}, aEvents) {
		if ev.Client != "token:a" {
			t.Errorf("token a reads an event it did not cause: %+v", ev)
		}
	}
	// B still reads its own run, and its sandbox's end.
	waitAudit(t, b, client.AuditQuery{Run: rb.RunID}, func(evs []api.AuditEvent) bool { return kinds(evs) == "run.started sandbox.claimed run.finished" })
	waitAudit(t, b, client.AuditQuery{Sandbox: rb.SandboxID, Kind: "sandbox.destroyed"}, func(evs []api.AuditEvent) bool { return len(evs) == 1 })

	// The auditor and the socket read A's command line.
	for name, c := range map[string]*client.Client{"the auditor": aud, "the socket": local} {
		evs := waitAudit(t, c, client.AuditQuery{Run: ra.RunID, Kind: "run.started"}, func(evs []api.AuditEvent) bool { return len(evs) == 1 })
		if !strings.Contains(string(evs[0].Detail), fakeKey) || evs[0].Client != "token:a" {
			t.Errorf("%s reads A's run as %+v", name, evs[0])
		}
	}
	// The auditor reads every event of its tools, but not what is the
	// host's alone: other callers' requests.
	page, err := aud.Audit(ctx, client.AuditQuery{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range page.Events {
		if ev.Tool != "sh" && ev.Client != "token:aud" {
			t.Errorf("the auditor reads an event outside its tools: %+v", ev)
		}
	}
}
