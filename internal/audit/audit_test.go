package audit

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/testutil"
)

func open(t *testing.T, opts Options) *Log {
	t.Helper()
	if opts.Path == "" {
		opts.Path = filepath.Join(t.TempDir(), "audit.db")
	}
	l, err := Open(t.Context(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close(context.Background()) })
	return l
}

func TestAppendQuery(t *testing.T) {
	l := open(t, Options{})
	ctx := t.Context()
	t0 := time.Now()
	evs := []Event{
		{Kind: KindSandboxCreated, Tool: "py", Sandbox: "a1"},
		{Kind: KindRunStarted, Tool: "py", Sandbox: "a1", Run: "r1", Client: "unix:uid=0"},
		{Kind: KindEgress, Tool: "py", Sandbox: "a1", Run: "r1", Decision: Deny, Detail: Detail(map[string]string{"destination": "169.254.169.254:80"})},
		{Kind: KindDNS, Tool: "py", Sandbox: "a1", Decision: Allow},
		{Kind: KindRunFinished, Tool: "py", Sandbox: "a1", Run: "r1", Decision: "exited"},
		{Kind: KindSandboxDestroyed, Tool: "sh", Sandbox: "b2"},
		{Kind: KindAPI, Client: "token:ci", Decision: Deny},
	}
	if err := l.Append(ctx, evs...); err != nil {
		t.Fatal(err)
	}
	if got := l.Last(); got != int64(len(evs)) {
		t.Fatalf("Last() = %d, want %d", got, len(evs))
	}
	tests := []struct {
		name string
		q    Query
		want []string // kinds, in order
	}{
		{"all", Query{}, []string{"sandbox.created", "run.started", "egress", "dns", "run.finished", "sandbox.destroyed", "api.request"}},
		{"family", Query{Kind: "sandbox"}, []string{"sandbox.created", "sandbox.destroyed"}},
		{"exact kind", Query{Kind: "run.finished"}, []string{"run.finished"}},
		{"no partial word", Query{Kind: "sand"}, []string{}},
		{"no prefix of a dotted kind", Query{Kind: "run.fin"}, []string{}},
		{"tool", Query{Tool: "sh"}, []string{"sandbox.destroyed"}},
		{"sandbox and decision", Query{Sandbox: "a1", Decision: Deny}, []string{"egress"}},
		{"run", Query{Run: "r1"}, []string{"run.started", "egress", "run.finished"}},
		{"client", Query{Client: "token:ci"}, []string{"api.request"}},
		{"after", Query{After: 5}, []string{"sandbox.destroyed", "api.request"}},
		{"limit", Query{Limit: 2}, []string{"sandbox.created", "run.started"}},
		{"tail", Query{Limit: 2, Tail: true}, []string{"sandbox.destroyed", "api.request"}},
		{"scoped to a tool", Query{Scope: &Scope{Tools: []string{"sh"}}}, []string{"sandbox.destroyed"}},
		{"scoped to a client", Query{Scope: &Scope{Client: "token:ci"}}, []string{"api.request"}},
		{"scoped to a client and a tool", Query{Scope: &Scope{Client: "token:ci", Tools: []string{"sh"}}}, []string{"sandbox.destroyed", "api.request"}},
		{"scoped, filtered on another client", Query{Client: "unix:uid=0", Scope: &Scope{Client: "token:ci"}}, []string{}},
		{"scoped to nothing", Query{Scope: &Scope{}}, []string{}},
		{"scoped to a quote", Query{Scope: &Scope{Client: "x' OR '1'='1"}}, []string{}},
		{"since", Query{Since: t0.Add(-time.Minute)}, []string{"sandbox.created", "run.started", "egress", "dns", "run.finished", "sandbox.destroyed", "api.request"}},
		{"until", Query{Until: t0.Add(-time.Minute)}, []string{}},
		{"quote in a value", Query{Tool: "x' OR '1'='1"}, []string{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := l.Query(ctx, tt.q)
			if err != nil {
				t.Fatal(err)
			}
			kinds := []string{}
			for _, ev := range got {
				kinds = append(kinds, ev.Kind)
			}
			if fmt.Sprint(kinds) != fmt.Sprint(tt.want) {
				t.Errorf("got %v, want %v", kinds, tt.want)
			}
		})
	}
	got, err := l.Query(ctx, Query{Kind: KindEgress})
	if err != nil || len(got) != 1 {
		t.Fatalf("egress query: %v %v", got, err)
	}
	if string(got[0].Detail) != `{"destination":"169.254.169.254:80"}` || got[0].Run != "r1" || got[0].Time.IsZero() {
		t.Errorf("egress event came back as %+v", got[0])
	}
}

// TestGroupCommit appends from many goroutines at once; every append is
// acknowledged with its events committed, and ids are unique.
func TestGroupCommit(t *testing.T) {
	l := open(t, Options{Sync: SyncFull})
	const writers, each = 16, 50
	var wg sync.WaitGroup
	errs := make(chan error, writers*each)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				l.Record(Event{Kind: KindDNS, Tool: strconv.Itoa(w)})
				errs <- l.Append(t.Context(), Event{Kind: KindRunFinished, Tool: strconv.Itoa(w), Run: strconv.Itoa(i)})
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	got, err := l.Query(t.Context(), Query{Kind: KindRunFinished, Limit: MaxLimit})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != writers*each {
		t.Fatalf("%d run.finished events, want %d", len(got), writers*each)
	}
	if l.Last() != 2*writers*each {
		t.Errorf("Last() = %d, want %d (Recorded events committed before later Appends)", l.Last(), 2*writers*each)
	}
	// Whoever commits (the writer, or a waiter committing for it), the
	// log's order is the queue's: each writer's events in the order it
	// queued them.
	next := map[string]int{}
	for _, ev := range got { // oldest first
		if want := strconv.Itoa(next[ev.Tool]); ev.Run != want {
			t.Fatalf("writer %s: run %s committed where %s was due", ev.Tool, ev.Run, want)
		}
		next[ev.Tool]++
	}
}

func TestReopenKeepsEvents(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sub", "audit.db")
	l, err := Open(t.Context(), Options{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Append(t.Context(), Event{Kind: KindDaemonStarted}); err != nil {
		t.Fatal(err)
	}
	l.Record(Event{Kind: KindDaemonStopped})
	if err := l.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := l.Append(t.Context(), Event{Kind: KindDNS}); err != ErrClosed {
		t.Errorf("Append after Close = %v, want ErrClosed", err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("database mode %v, want 0600", fi.Mode().Perm())
	}
	l2 := open(t, Options{Path: path})
	got, err := l2.Query(t.Context(), Query{})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[1].Kind != KindDaemonStopped {
		t.Fatalf("after reopen: %+v", got)
	}
	if err := l2.Append(t.Context(), Event{Kind: KindDNS}); err != nil {
		t.Fatal(err)
	}
	if l2.Last() != 3 {
		t.Errorf("Last() = %d after reopen and one append, want 3", l2.Last())
	}
}

// TestOldKindIndexDropped opens a log made with the index on kind that
// logs had before, and checks that it is gone and that kind filters still
// answer.
func TestOldKindIndexDropped(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.db")
	l := open(t, Options{Path: path})
	if err := l.Append(t.Context(), Event{Kind: KindEgress, Tool: "a"}, Event{Kind: KindSandboxCreated, Tool: "a"}, Event{Kind: KindDNS, Tool: "b"}); err != nil {
		t.Fatal(err)
	}
	if _, err := l.wc.ExecContext(t.Context(), `CREATE INDEX IF NOT EXISTS events_kind ON events(kind, id)`); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	l = open(t, Options{Path: path})
	var n int
	if err := l.r.QueryRowContext(t.Context(), `SELECT count(*) FROM sqlite_master WHERE type = 'index' AND name = 'events_kind'`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Error("the index on kind is still there after Open")
	}
	for kind, want := range map[string]int{"egress": 1, "sandbox": 1, "sandbox.created": 1, "dns": 1, "sandbox.claimed": 0} {
		got, err := l.Query(t.Context(), Query{Kind: kind})
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != want {
			t.Errorf("kind %q: %d events, want %d", kind, len(got), want)
		}
	}
}

func TestRetention(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.db")
	l, err := Open(t.Context(), Options{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-48 * time.Hour)
	if err := l.Append(t.Context(), Event{Kind: KindDNS, Time: old}, Event{Kind: KindEgress}); err != nil {
		t.Fatal(err)
	}
	l.Close(t.Context())
	l = open(t, Options{Path: path, Retention: 24 * time.Hour})
	got, err := l.Query(t.Context(), Query{})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Kind != KindEgress {
		t.Fatalf("after retention of 24h: %+v, want only the recent event", got)
	}
}

// TestEnqueueAndBarrier: Enqueue's wait returns once its events are
// written, and an empty Append waits for everything queued before it
// (what an audit query relies on to see a run answered just before).
func TestEnqueueAndBarrier(t *testing.T) {
	l := open(t, Options{})
	ctx := t.Context()
	wait, err := l.Enqueue(ctx, Event{Kind: KindRunFinished, Run: "r1"})
	if err != nil {
		t.Fatal(err)
	}
	if err := wait(ctx); err != nil {
		t.Fatal(err)
	}
	if err := wait(ctx); err != nil {
		t.Fatalf("a second wait: %v", err)
	}
	for i := range 50 {
		l.Record(Event{Kind: KindDNS, Run: "d" + strconv.Itoa(i)})
		w, err := l.Enqueue(ctx, Event{Kind: KindRunFinished, Run: "q" + strconv.Itoa(i)})
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Append(ctx); err != nil {
			t.Fatal(err)
		}
		got, err := l.Query(ctx, Query{Run: "q" + strconv.Itoa(i)})
		if err != nil || len(got) != 1 {
			t.Fatalf("after the barrier, round %d: %d events, %v", i, len(got), err)
		}
		if got, _ := l.Query(ctx, Query{Run: "d" + strconv.Itoa(i)}); len(got) != 1 {
			t.Fatalf("after the barrier, round %d: the recorded event is missing", i)
		}
		if err := w(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if n := l.Last(); n != 101 {
		t.Errorf("Last() = %d, want 101 (barriers add nothing)", n)
	}
}

// TestEnqueueQuiet: quietly queued events are written by their wait, or
// by whatever write comes first, never lost to a writer that looked at
// the queue just before them; a barrier waits for them like any other.
func TestEnqueueQuiet(t *testing.T) {
	l := open(t, Options{})
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	w, err := l.EnqueueQuiet(ctx, Event{Kind: KindRunFinished, Run: "quiet"})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Append(ctx); err != nil {
		t.Fatal(err)
	}
	if got, err := l.Query(ctx, Query{Run: "quiet"}); err != nil || len(got) != 1 {
		t.Fatalf("after a barrier: %d events, %v", len(got), err)
	}
	if err := w(ctx); err != nil {
		t.Fatal(err)
	}
	// Quiet events amid others, from many goroutines: every wait
	// returns, and every event is written once.
	const workers, each = 8, 100
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for g := range workers {
		wg.Go(func() {
			for i := range each {
				if g%2 == 0 {
					l.Record(Event{Kind: KindDNS})
				}
				w, err := l.EnqueueQuiet(ctx, Event{Kind: KindRunFinished, Run: fmt.Sprintf("w%d-%d", g, i)})
				if err == nil {
					err = w(ctx)
				}
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("a quiet event's wait: %v", err)
	}
	got, err := l.Query(ctx, Query{Kind: KindRunFinished, Limit: 10000})
	if err != nil || len(got) != 1+workers*each {
		t.Fatalf("%d run.finished events, %v; want %d", len(got), err, 1+workers*each)
	}
}

// TestLingerNotAlone: a writer woken while only lingering events are
// queued (an Enqueue whose waiter committed its events first wakes it so)
// leaves them for the next transaction anyone starts.
func TestLingerNotAlone(t *testing.T) {
	defer func(d time.Duration) { recordLinger = d }(recordLinger)
	recordLinger = time.Hour
	l := open(t, Options{})
	ctx := t.Context()
	if err := l.Linger(ctx, Event{Kind: KindSandboxCreated, Run: "lingers"}); err != nil {
		t.Fatal(err)
	}
	l.wake()
	// The writer had its chance; nothing was committed.
	time.Sleep(100 * time.Millisecond)
	if l.Last() != 0 {
		t.Fatalf("Last() = %d: a wake committed lingering events alone", l.Last())
	}
	if err := l.Append(ctx, Event{Kind: KindRunStarted, Run: "waits"}); err != nil {
		t.Fatal(err)
	}
	got, err := l.Query(ctx, Query{})
	if err != nil || len(got) != 2 || got[0].Run != "lingers" || got[1].Run != "waits" {
		t.Fatalf("after the append: %+v %v; want lingers then waits", got, err)
	}
	// Close writes what lingers.
	if err := l.Linger(ctx, Event{Kind: KindSandboxDestroyed, Run: "at close"}); err != nil {
		t.Fatal(err)
	}
	path := l.opts.Path
	if err := l.Close(ctx); err != nil {
		t.Fatal(err)
	}
	got, err = open(t, Options{Path: path}).Query(ctx, Query{})
	if err != nil || len(got) != 3 || got[2].Run != "at close" {
		t.Fatalf("after close: %+v %v; want the lingering event written", got, err)
	}
}

// TestDue: the writer commits for a waiter or a half full queue, not for
// lingering events alone.
func TestDue(t *testing.T) {
	done := make(chan error, 1)
	for _, c := range []struct {
		name  string
		items []item
		want  bool
	}{
		{"empty", nil, false},
		{"lingering", []item{{events: []Event{{}}}, {events: []Event{{}}}}, false},
		{"a waiter last", []item{{events: []Event{{}}}, {done: done}}, true},
		{"half full", make([]item, queueCap/2), true},
	} {
		l := &Log{q: c.items}
		if got := l.due(); got != c.want {
			t.Errorf("%s: due() = %v, want %v", c.name, got, c.want)
		}
	}
}

// TestLinger: events queued by Linger (and Record) are written with no
// write anyone else starts, within the linger bound, and go with the
// next acknowledged append when one comes first, in queue order.
func TestLinger(t *testing.T) {
	l := open(t, Options{})
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if err := l.Linger(ctx, Event{Kind: KindRunFinished, Run: "alone"}); err != nil {
		t.Fatal(err)
	}
	// Nothing else is written: the linger's own wake writes it.
	if err := l.Wait(ctx, 0); err != nil {
		t.Fatalf("a lingering event was never written: %v", err)
	}
	if l.Last() != 1 {
		t.Fatalf("Last() = %d after the linger, want 1", l.Last())
	}
	// With an acknowledged append right after: one commit holds both,
	// the lingering one first.
	if err := l.Linger(ctx, Event{Kind: KindRunFinished, Run: "first"}); err != nil {
		t.Fatal(err)
	}
	if err := l.Append(ctx, Event{Kind: KindRunStarted, Run: "second"}); err != nil {
		t.Fatal(err)
	}
	got, err := l.Query(ctx, Query{After: 1})
	if err != nil || len(got) != 2 || got[0].Run != "first" || got[1].Run != "second" {
		t.Fatalf("after the append: %+v %v; want first then second", got, err)
	}
	l.Close(ctx)
	if err := l.Linger(ctx, Event{Kind: KindDNS}); !errors.Is(err, ErrClosed) {
		t.Errorf("Linger on a closed log = %v, want ErrClosed", err)
	}
}

func TestWait(t *testing.T) {
	l := open(t, Options{})
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	if err := l.Wait(ctx, 0); err != context.DeadlineExceeded {
		t.Fatalf("Wait on an empty log = %v, want the deadline", err)
	}
	done := make(chan error, 1)
	go func() { done <- l.Wait(t.Context(), 0) }()
	time.Sleep(10 * time.Millisecond)
	l.Record(Event{Kind: KindDNS})
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Wait did not return after a commit")
	}
}

func TestOpenRefusesBadOptions(t *testing.T) {
	dir := t.TempDir()
	for _, o := range []Options{
		{},
		{Path: filepath.Join(dir, "a.db"), Sync: "sometimes"},
		{Path: filepath.Join(dir, "b.db"), Retention: -time.Hour},
		{Path: dir}, // a directory
	} {
		if l, err := Open(t.Context(), o); err == nil {
			l.Close(t.Context())
			t.Errorf("Open(%+v) succeeded", o)
		}
	}
	// A file that is not a database is refused, not overwritten.
	junk := filepath.Join(dir, "junk.db")
	os.WriteFile(junk, []byte("this is not a database, and it is long enough to have a header"), 0o600)
	if l, err := Open(t.Context(), Options{Path: junk}); err == nil {
		l.Close(t.Context())
		t.Error("Open of a file that is not a database succeeded")
	}
}

// TestWriteFailure fills the filesystem under the log: appends then fail
// with an error (the caller refuses to run unrecorded), and succeed again
// once there is room.
func TestWriteFailure(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root to mount a small tmpfs")
	}
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size=1m"); err != nil {
		t.Skipf("cannot mount tmpfs: %v", err)
	}
	t.Cleanup(func() { syscall.Unmount(dir, syscall.MNT_DETACH) })
	l := open(t, Options{Path: filepath.Join(dir, "audit.db")})
	if err := l.Append(t.Context(), Event{Kind: KindDaemonStarted}); err != nil {
		t.Fatal(err)
	}
	fill := filepath.Join(dir, "fill")
	f, err := os.Create(fill)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4096)
	for {
		if _, err := f.Write(buf); err != nil {
			break
		}
	}
	f.Close()
	var failed error
	big := Detail(map[string]string{"pad": string(make([]byte, 8192))})
	for i := 0; i < 200 && failed == nil; i++ {
		failed = l.Append(t.Context(), Event{Kind: KindDNS, Detail: big})
	}
	if failed == nil {
		t.Fatal("appends kept succeeding on a full filesystem")
	}
	if l.Err() == nil {
		t.Error("Err() is nil after a failed write")
	}
	// A barrier neither hides the failure nor clears it.
	if err := l.Append(t.Context()); err == nil || l.Err() == nil {
		t.Errorf("barrier after a failed write: %v, Err() %v", err, l.Err())
	}
	if err := os.Remove(fill); err != nil {
		t.Fatal(err)
	}
	if err := l.Append(t.Context(), Event{Kind: KindDNS}); err != nil {
		t.Fatalf("append after room was made: %v", err)
	}
	if l.Err() != nil {
		t.Errorf("Err() = %v after a successful write", l.Err())
	}
}

// TestKill9 appends from a child process that is then killed with
// SIGKILL mid-stream: every event whose Append returned is in the log.
func TestKill9(t *testing.T) {
	if os.Getenv("AUDIT_CHILD") != "" {
		return
	}
	path := filepath.Join(t.TempDir(), "audit.db")
	cmd := exec.Command(os.Args[0], "-test.run=^TestKill9Child$")
	cmd.Env = append(os.Environ(), "AUDIT_CHILD="+path)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	acked := map[string]bool{}
	sc := bufio.NewScanner(out)
	for sc.Scan() && len(acked) < 300 {
		acked[sc.Text()] = true
	}
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	if len(acked) < 300 {
		t.Fatalf("the child acknowledged only %d events", len(acked))
	}
	l := open(t, Options{Path: path})
	seen := map[string]bool{}
	for after := int64(0); ; {
		got, err := l.Query(t.Context(), Query{After: after, Limit: MaxLimit})
		if err != nil {
			t.Fatal(err)
		}
		if len(got) == 0 {
			break
		}
		for _, ev := range got {
			seen[ev.Run] = true
		}
		after = got[len(got)-1].ID
	}
	for id := range acked {
		if !seen[id] {
			t.Errorf("acknowledged event %s lost after kill -9", id)
		}
	}
	t.Logf("%d acknowledged, %d in the log", len(acked), len(seen))
}

// TestKill9Child is the child of TestKill9: it appends forever, printing
// each acknowledged event.
func TestKill9Child(t *testing.T) {
	path := os.Getenv("AUDIT_CHILD")
	if path == "" {
		t.Skip("run by TestKill9")
	}
	l, err := Open(context.Background(), Options{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	for w := range 4 {
		go func() {
			for i := 0; ; i++ {
				id := fmt.Sprintf("%d-%d", w, i)
				l.Record(Event{Kind: KindDNS, Run: "r" + id})
				if err := l.Append(context.Background(), Event{Kind: KindRunFinished, Run: id}); err != nil {
					panic(err)
				}
				mu.Lock()
				fmt.Println(id)
				mu.Unlock()
			}
		}()
	}
	select {}
}

// TestExport: every committed event goes out as a JSON line, with its id
// and in order, as Query returns it.
func TestExport(t *testing.T) {
	var out testutil.SyncBuffer
	l := open(t, Options{Export: &out})
	ctx := t.Context()
	if err := l.Append(ctx, Event{Kind: KindRunStarted, Tool: "py", Run: "r1"}, Event{Kind: KindRunFinished, Tool: "py", Run: "r1", Decision: "exited"}); err != nil {
		t.Fatal(err)
	}
	l.Record(Event{Kind: KindSandboxDestroyed, Tool: "py", Sandbox: "s1"})
	if err := l.Append(ctx); err != nil { // a barrier: the Record is written
		t.Fatal(err)
	}
	want, err := l.Query(ctx, Query{})
	if err != nil {
		t.Fatal(err)
	}
	// The export goes out on its own; Close waits for what is queued.
	if err := l.Close(ctx); err != nil {
		t.Fatal(err)
	}
	var got []Event
	sc := bufio.NewScanner(strings.NewReader(out.String()))
	for sc.Scan() {
		var ev Event
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatalf("an exported line %q: %v", sc.Text(), err)
		}
		got = append(got, ev)
	}
	if len(got) != 3 || len(want) != 3 {
		t.Fatalf("exported %d events, the log holds %d:\n%s", len(got), len(want), out.String())
	}
	for i := range want {
		if got[i].ID != want[i].ID || got[i].Kind != want[i].Kind || !got[i].Time.Equal(want[i].Time) || got[i].Run != want[i].Run {
			t.Errorf("exported %+v, the log has %+v", got[i], want[i])
		}
	}
}

// gatedWriter blocks every Write until open is closed, as a pipe whose
// reader has stalled does.
type gatedWriter struct {
	open chan struct{}
	out  testutil.SyncBuffer
}

func (g *gatedWriter) Write(b []byte) (int, error) {
	<-g.open
	return g.out.Write(b)
}

// TestExportStalled: an export nobody takes holds no commit: appends go
// on at their pace, every event is in the log, and the export gets what
// its queue held, in order, once it moves again.
func TestExportStalled(t *testing.T) {
	g := &gatedWriter{open: make(chan struct{})}
	l := open(t, Options{Export: g})
	ctx := t.Context()
	const n = exportQueue + 500
	began := time.Now()
	for i := range n {
		if err := l.Append(ctx, Event{Kind: KindRunStarted, Tool: "py", Run: fmt.Sprint("r", i)}); err != nil {
			t.Fatal(err)
		}
	}
	if d := time.Since(began); d > 30*time.Second {
		t.Fatalf("%d appends with the export stalled took %v", n, d)
	}
	if got, err := l.Query(ctx, Query{Limit: 1, Tail: true}); err != nil || len(got) != 1 || got[0].ID != n {
		t.Fatalf("the log's newest event: %+v %v, want id %d", got, err, n)
	}
	close(g.open)
	if err := l.Close(ctx); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(g.out.String()), "\n")
	if len(lines) < exportQueue || len(lines) >= n {
		t.Fatalf("exported %d of %d events with a queue of %d batches", len(lines), n, exportQueue)
	}
	var last int64
	for _, line := range lines {
		var ev Event
		if err := json.Unmarshal([]byte(line), &ev); err != nil || ev.ID <= last {
			t.Fatalf("exported %q after id %d: %v", line, last, err)
		}
		last = ev.ID
	}
}

// TestObserve: Observe sees every committed event once, in commit
// order, whether it was appended or recorded.
func TestObserve(t *testing.T) {
	var mu sync.Mutex
	var seen []string
	l, err := Open(t.Context(), Options{Path: filepath.Join(t.TempDir(), "a.db"), Observe: func(e Event) {
		mu.Lock()
		seen = append(seen, e.Kind+"/"+e.Run)
		mu.Unlock()
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close(t.Context())
	if err := l.Append(t.Context(), Event{Kind: KindRunStarted, Run: "r1"}); err != nil {
		t.Fatal(err)
	}
	l.Record(Event{Kind: KindRunFinished, Run: "r1"}, Event{Kind: KindLimit, Run: "r1"})
	if err := l.Append(t.Context()); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if got, want := strings.Join(seen, " "), "run.started/r1 run.finished/r1 limit.breach/r1"; got != want {
		t.Errorf("observed %q, want %q", got, want)
	}
}
