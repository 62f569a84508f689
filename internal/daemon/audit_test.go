package daemon

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/testutil"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/client"
	"github.com/airlockhq/airlock/internal/audit"
	"github.com/airlockhq/airlock/internal/config"
	"github.com/airlockhq/airlock/internal/testutil/isolatednet"
	"github.com/airlockhq/airlock/result"
	"github.com/airlockhq/airlock/sandbox"
)

// waitAudit polls the audit log until ok accepts what q selects; Record
// commits in the background, a few milliseconds after the answer.
func waitAudit(t *testing.T, c *client.Client, q client.AuditQuery, ok func([]api.AuditEvent) bool) []api.AuditEvent {
	t.Helper()
	if q.Limit == 0 {
		q.Limit = 1000
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		page, err := c.Audit(t.Context(), q)
		if err != nil {
			t.Fatal(err)
		}
		if ok(page.Events) {
			return page.Events
		}
		if time.Now().After(deadline) {
			t.Fatalf("audit %+v: never got what was wanted; last answer %+v", q, page.Events)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func kinds(evs []api.AuditEvent) string {
	var k []string
	for _, ev := range evs {
		k = append(k, ev.Kind)
	}
	return strings.Join(k, " ")
}

// TestAuditRecordsEverything makes runs, a breach and a session through
// the socket and finds each step in the audit log, attributed.
func TestAuditRecordsEverything(t *testing.T) {
	d, c, _ := start(t)
	ctx := t.Context()
	r, err := c.Run(ctx, api.RunRequest{Tool: "sh", Argv: []string{"sh", "-c", "exit 3"}, Env: []string{"TOKEN=do-not-record"}})
	if err != nil || r.ExitCode != 3 {
		t.Fatalf("run: %+v %v", r, err)
	}
	// The run's outcome is acknowledged with its answer: no waiting.
	page, err := c.Audit(ctx, client.AuditQuery{Sandbox: r.SandboxID, Kind: "run"})
	if err != nil {
		t.Fatal(err)
	}
	if got := kinds(page.Events); got != "run.finished" {
		// run.started has no sandbox yet: it is recorded before the claim.
		t.Fatalf("the run's events by sandbox: %q, want run.finished", got)
	}
	fin := page.Events[0]
	if fin.Decision != "exited" || fin.Tool != "sh" || !strings.HasPrefix(fin.Client, "unix:uid=0,pid=") || fin.Run == "" {
		t.Errorf("run.finished = %+v", fin)
	}
	all, err := c.Audit(ctx, client.AuditQuery{Run: fin.Run})
	if err != nil {
		t.Fatal(err)
	}
	if got := kinds(all.Events); got != "run.started sandbox.claimed run.finished" {
		t.Errorf("the run's events: %q", got)
	}
	if d := string(all.Events[0].Detail); !strings.Contains(d, `"argv":["sh","-c","exit 3"]`) || !strings.Contains(d, `"env":["TOKEN"]`) || strings.Contains(d, "do-not-record") {
		t.Errorf("run.started detail %s: want argv and env names only", d)
	}
	// The sandbox's whole life: created by the pool, claimed, destroyed.
	life := waitAudit(t, c, client.AuditQuery{Sandbox: r.SandboxID, Kind: "sandbox"}, func(evs []api.AuditEvent) bool { return len(evs) == 3 })
	if got := kinds(life); got != "sandbox.created sandbox.claimed sandbox.destroyed" {
		t.Errorf("sandbox life: %q", got)
	}
	// A breach: the outcome and the limit.
	r, err = c.Run(ctx, api.RunRequest{Tool: "cold", Argv: []string{"sleep", "5"}})
	if err != nil || r.Outcome != result.LimitExceeded {
		t.Fatalf("breach: %+v %v", r, err)
	}
	br, err := c.Audit(ctx, client.AuditQuery{Kind: "limit.breach", Tool: "cold"})
	if err != nil || len(br.Events) != 1 || br.Events[0].Decision != "time" || br.Events[0].Sandbox != r.SandboxID {
		t.Fatalf("breach events: %+v %v", br, err)
	}
	// A session: opened, an exec, a file in and out, closed.
	s, err := c.CreateSession(ctx, api.SessionRequest{Tool: "sh"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Exec(ctx, s.ID, api.ExecRequest{Argv: []string{"true"}}); err != nil {
		t.Fatal(err)
	}
	if err := c.PutFile(ctx, s.ID, "a.txt", strings.NewReader("hi")); err != nil {
		t.Fatal(err)
	}
	if _, err := c.GetFile(ctx, s.ID, "missing.txt"); err == nil {
		t.Fatal("read a file that does not exist")
	}
	if err := c.DeleteSession(ctx, s.ID); err != nil {
		t.Fatal(err)
	}
	sess := waitAudit(t, c, client.AuditQuery{Session: s.ID}, func(evs []api.AuditEvent) bool {
		return strings.Contains(kinds(evs), "session.ended")
	})
	want := "session.created sandbox.claimed run.started run.finished session.file session.file session.ended"
	if got := kinds(sess); got != want {
		t.Errorf("session events: %q, want %q", got, want)
	}
	files, _ := c.Audit(ctx, client.AuditQuery{Session: s.ID, Kind: "session.file", Decision: "deny"})
	if len(files.Events) != 1 || !strings.Contains(string(files.Events[0].Detail), `"op":"get"`) {
		t.Errorf("the refused read: %+v", files.Events)
	}
	// API requests carry the caller; health probes are not recorded.
	c.Health(ctx)
	reqs := waitAudit(t, c, client.AuditQuery{Kind: "api.request"}, func(evs []api.AuditEvent) bool { return len(evs) >= 8 })
	for _, ev := range reqs {
		if !strings.HasPrefix(ev.Client, "unix:uid=0,pid=") {
			t.Errorf("api.request without the peer: %+v", ev)
		}
		if strings.Contains(string(ev.Detail), "/healthz") {
			t.Errorf("a health probe was recorded: %+v", ev)
		}
	}
	// Paging: pages of 2 with the cursor give every event once, in order.
	var ids []int64
	for after := int64(0); ; {
		p, err := c.Audit(ctx, client.AuditQuery{After: after, Limit: 2})
		if err != nil {
			t.Fatal(err)
		}
		if len(p.Events) == 0 {
			break
		}
		for _, ev := range p.Events {
			ids = append(ids, ev.ID)
		}
		after = p.Next
	}
	for i := 1; i < len(ids); i++ {
		if ids[i] != ids[i-1]+1 {
			t.Fatalf("paging skipped or repeated: %v", ids)
		}
	}
	if ids[0] != 1 || int64(len(ids)) < d.Audit().Last()-5 {
		t.Fatalf("paging from the start gave %d events starting at %d; the log has %d", len(ids), ids[0], d.Audit().Last())
	}
	// The tail: the newest, oldest first.
	tail, err := c.Audit(ctx, client.AuditQuery{Tail: true, Limit: 3})
	if err != nil || len(tail.Events) != 3 || tail.Events[0].ID > tail.Events[2].ID {
		t.Fatalf("tail: %+v %v", tail, err)
	}
}

// TestAuditFollow holds a query with wait until a new event is committed.
func TestAuditFollow(t *testing.T) {
	_, c, _ := start(t)
	ctx := t.Context()
	now, err := c.Audit(ctx, client.AuditQuery{Tail: true, Limit: 1})
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *api.AuditPage, 1)
	go func() {
		p, err := c.Audit(ctx, client.AuditQuery{After: now.Next, Kind: "run.finished", Wait: 30 * time.Second})
		if err != nil {
			t.Error(err)
		}
		got <- p
	}()
	time.Sleep(100 * time.Millisecond)
	if _, err := c.Run(ctx, api.RunRequest{Tool: "sh", Argv: []string{"true"}}); err != nil {
		t.Fatal(err)
	}
	select {
	case p := <-got:
		if p == nil || len(p.Events) != 1 || p.Events[0].Kind != "run.finished" {
			t.Fatalf("follow got %+v", p)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the follower was not woken by a new event")
	}
	// With nothing new, wait ends empty with the same cursor.
	p, err := c.Audit(ctx, client.AuditQuery{After: 1 << 40, Wait: 100 * time.Millisecond})
	if err != nil || len(p.Events) != 0 || p.Next != 1<<40 {
		t.Fatalf("an empty wait: %+v %v", p, err)
	}
}

func TestAuditBadQueries(t *testing.T) {
	_, _, sock := start(t)
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
	for _, q := range []string{
		"after=-1", "after=x", "limit=0", "limit=1001", "since=yesterday", "until=-5m",
		"wait=2m", "wait=soon", "tail=maybe", "tail=1&wait=1s", "colour=red", "tool=a&tool=b",
		"tool=" + strings.Repeat("a", 300),
	} {
		resp, err := hc.Get("http://airlock/v1/audit?" + q)
		if err != nil {
			t.Fatal(err)
		}
		var e api.Error
		if err := decodeJSON(resp, &e); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		if resp.StatusCode != 400 || e.Code != api.CodeInvalid || e.Message == "" {
			t.Errorf("%s: %d %+v, want 400 invalid", q, resp.StatusCode, e)
		}
	}
	resp, err := hc.Post("http://airlock/v1/audit", "application/json", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST /v1/audit: %d", resp.StatusCode)
	}
	// Times in both forms are accepted.
	for _, q := range []string{"since=15m", "since=" + url.QueryEscape(time.Now().Add(-time.Hour).Format(time.RFC3339)), "kind=sandbox&decision=deny&tail=true&limit=5"} {
		resp, err := hc.Get("http://airlock/v1/audit?" + q)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Errorf("%s: %d", q, resp.StatusCode)
		}
	}
}

// TestAuditUnwritableRefusesRuns puts the log on a small tmpfs and fills
// it: runs and sessions are refused with audit_unavailable, health says
// so, nothing runs unrecorded; with room again, runs work.
func TestAuditUnwritableRefusesRuns(t *testing.T) {
	isolatednet.Require(t)
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size=2m"); err != nil {
		t.Skipf("cannot mount tmpfs: %v", err)
	}
	t.Cleanup(func() { syscall.Unmount(dir, syscall.MNT_DETACH) })
	d, sock := serveConfig(t, testConfig, func(o *Options) { o.AuditPath = filepath.Join(dir, "audit.db") })
	c := client.New(sock)
	if _, err := c.Run(t.Context(), api.RunRequest{Tool: "sh", Argv: []string{"true"}}); err != nil {
		t.Fatal(err)
	}
	// The file system is filled by another process, which has ended
	// before the first refusal: a sandbox's init cloned from this process
	// holds a copy of its descriptors until it execs, and one cloned
	// while this process held the fill open would keep the fill's space
	// after its removal for as long as it took to exec.
	fill := filepath.Join(dir, "fill")
	if out, err := exec.Command("dd", "if=/dev/zero", "of="+fill, "bs=4096").CombinedOutput(); err == nil || !strings.Contains(string(out), "No space left") {
		t.Fatalf("fill the audit log's file system: %v\n%s", err, out)
	}
	var refused *client.Error
	for i := 0; i < 100; i++ {
		_, err := c.Run(t.Context(), api.RunRequest{Tool: "sh", Argv: []string{"sh", "-c", "echo ran >&2"}})
		if errors.As(err, &refused) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if refused == nil || refused.Status != 503 || refused.Code != api.CodeAuditUnavailable {
		t.Fatalf("runs were not refused on a full audit log: %v", refused)
	}
	if strings.Contains(refused.Message, dir) {
		t.Errorf("the refusal names a host path: %q", refused.Message)
	}
	var ce *client.Error
	if _, err := c.CreateSession(t.Context(), api.SessionRequest{Tool: "sh"}); !errors.As(err, &ce) || ce.Code != api.CodeAuditUnavailable {
		t.Errorf("session opened on a full audit log: %v", err)
	}
	if err := c.Health(t.Context()); !errors.As(err, &ce) || ce.Status != 503 {
		t.Errorf("health with an unwritable audit log: %v", err)
	}
	// A refused run claims no sandbox: more refusals leave the pool's
	// claim counters as they were. (Counting cgroups instead races the
	// replenisher, which may still be replacing a sandbox of the runs
	// before the refusal.)
	claims := func() int64 {
		st, err := c.Pools(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		var n int64
		for _, s := range st {
			n += s.Hits + s.Misses
		}
		return n
	}
	before := claims()
	for range 3 {
		if _, err := c.Run(t.Context(), api.RunRequest{Tool: "sh", Argv: []string{"true"}}); !errors.As(err, &ce) || ce.Code != api.CodeAuditUnavailable {
			t.Fatalf("run on a full audit log: %v", err)
		}
	}
	if n := claims(); n != before {
		t.Errorf("%d claims after three refused runs, %d before", n, before)
	}
	if err := os.Remove(fill); err != nil {
		t.Fatal(err)
	}
	if r, err := c.Run(t.Context(), api.RunRequest{Tool: "sh", Argv: []string{"true"}}); err != nil || r.Outcome != result.Exited {
		var st syscall.Statfs_t
		syscall.Statfs(dir, &st)
		ents, _ := os.ReadDir(dir)
		var names []string
		for _, e := range ents {
			fi, _ := e.Info()
			names = append(names, fmt.Sprintf("%s=%d", e.Name(), fi.Size()))
		}
		// Every process's descriptors on that file system.
		links, _ := filepath.Glob("/proc/[0-9]*/fd/*")
		for _, fd := range links {
			if l, _ := os.Readlink(fd); strings.Contains(l, dir) {
				comm, _ := os.ReadFile(filepath.Join(fd, "../../comm"))
				names = append(names, fmt.Sprintf("%s (%s) -> %s", fd, bytes.TrimSpace(comm), l))
			}
		}
		// Seen a few times under load, with the fill written from this
		// process: the log still full ("database or disk is full") with
		// the fill gone, the space held by something unseen.
		t.Fatalf("run after room was made: %+v %v; audit error: %v; free %d blocks; %v", r, err, d.Audit().Err(), st.Bfree, names)
	}
	if err := c.Health(t.Context()); err != nil {
		t.Errorf("health after recovery: %v", err)
	}
}

// TestAuditAcrossRestart: a graceful shutdown records the destroys and
// the stop; the next daemon on the same log continues after them.
func TestAuditAcrossRestart(t *testing.T) {
	isolatednet.Require(t)
	cfg, err := config.Parse("airlock.yaml", []byte(testConfig))
	if err != nil {
		t.Fatal(err)
	}
	path := testAudit(t)
	run := func() (last int64) {
		sock := filepath.Join(t.TempDir(), "airlock.sock")
		d, err := New(t.Context(), Options{Config: cfg, Socket: sock, AuditPath: path,
			Sandbox: sandbox.Options{StateDir: testStateDir, CgroupParent: testCgroup, InitPath: testutil.InitPath(t)}, Grace: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- d.Serve(ctx) }()
		if _, err := client.New(sock).Run(t.Context(), api.RunRequest{Tool: "sh", Argv: []string{"true"}}); err != nil {
			t.Fatal(err)
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		return d.Audit().Last()
	}
	first := run()
	run()
	// Read the file directly: the daemons are gone.
	l, err := audit.Open(t.Context(), audit.Options{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close(context.Background())
	evs, err := l.Query(t.Context(), audit.Query{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	created, destroyed := map[string]bool{}, map[string]bool{}
	var starts, stops int
	for _, ev := range evs {
		switch ev.Kind {
		case "sandbox.created":
			created[ev.Sandbox] = true
		case "sandbox.destroyed":
			destroyed[ev.Sandbox] = true
		case "daemon.started":
			starts++
		case "daemon.stopped":
			stops++
			if ev.ID == first && evs[len(evs)-1].Kind != "daemon.stopped" {
				t.Errorf("the last event is %s, want daemon.stopped", evs[len(evs)-1].Kind)
			}
		}
	}
	if starts != 2 || stops != 2 {
		t.Errorf("%d starts and %d stops recorded, want 2 and 2", starts, stops)
	}
	for id := range created {
		if !destroyed[id] {
			t.Errorf("sandbox %s created but its destroy not recorded", id)
		}
	}
	if len(created) < 2 {
		t.Errorf("%d sandboxes created over two daemons, want at least one each", len(created))
	}
}
