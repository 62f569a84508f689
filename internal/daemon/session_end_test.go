package daemon

import (
	"context"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/client"
	"github.com/airlockhq/airlock/internal/audit"
)

// sandboxCgroups finds a sandbox's cgroup in any hierarchy. The kernel
// removes a cgroup only once no process is left in it, so its absence
// says the sandbox's processes are gone too.
func sandboxCgroups(id string) []string {
	var found []string
	for _, pat := range []string{"/sys/fs/cgroup/*" + testCgroup + "/" + id, "/sys/fs/cgroup" + testCgroup + "/" + id} {
		m, _ := filepath.Glob(pat)
		found = append(found, m...)
	}
	return found
}

// TestSessionEndWaits ends one session three ways at once: the reaper
// (its max lifetime passes), a DELETE and shutdown. An upload held open
// is a call in flight, which the end waits for, so the three overlap
// for as long as the test holds it. Whoever came second used to return
// at once: DELETE answered 204 while the sandbox was still there and its
// end unrecorded, and shutdown closed the runtime and the audit log
// under the reaper's destroy. Each answer must come after the sandbox is
// gone from the host and its end recorded, and the end is recorded once.
func TestSessionEndWaits(t *testing.T) {
	d, sock := serveConfig(t, testConfig, nil)
	c := client.New(sock)
	ctx := t.Context()
	s, err := c.CreateSession(ctx, api.SessionRequest{Tool: "sh", MaxLifetime: "2s"})
	if err != nil {
		t.Fatal(err)
	}
	if len(sandboxCgroups(s.SandboxID)) == 0 {
		t.Fatalf("sandbox %s has no cgroup to watch: the test would prove nothing", s.SandboxID)
	}
	ended := func(ctx context.Context) (int, error) {
		evs, err := d.Audit().Query(ctx, audit.Query{Kind: audit.KindSessionEnded, Session: s.ID})
		return len(evs), err
	}

	pr, pw := io.Pipe()
	put := make(chan error, 1)
	go func() { put <- c.PutFile(ctx, s.ID, "held", pr) }()
	if _, err := pw.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		v, err := c.Session(ctx, s.ID)
		if err == nil && v.Running == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the upload never entered the session: %+v %v", v, err)
		}
	}
	// The reaper ends it first; its end waits for the upload.
	waitState(t, c, s.ID, "max lifetime")

	// answer is what the host showed when a caller got its answer.
	type answer struct {
		err     error
		cgroups []string
		ended   int
		endErr  error
	}
	deleted := make(chan answer, 1)
	go func() {
		err := c.DeleteSession(context.WithoutCancel(ctx), s.ID)
		a := answer{err: err, cgroups: sandboxCgroups(s.SandboxID)}
		a.ended, a.endErr = ended(context.WithoutCancel(ctx))
		deleted <- a
	}()
	// Time for the DELETE to be read before shutdown closes the socket.
	time.Sleep(300 * time.Millisecond)
	stopped := make(chan answer, 1)
	go func() {
		err := d.Shutdown(context.WithoutCancel(ctx))
		stopped <- answer{err: err, cgroups: sandboxCgroups(s.SandboxID)}
	}()
	time.Sleep(300 * time.Millisecond)
	select {
	case a := <-deleted:
		t.Errorf("DELETE answered (%v) while a call was still in flight in the session", a.err)
		deleted <- a
	default:
	}
	select {
	case a := <-stopped:
		t.Errorf("shutdown returned (%v) while a call was still in flight in a session", a.err)
		stopped <- a
	default:
	}
	pw.Close()
	<-put // it fails or not: its sandbox is being destroyed

	for _, tt := range []struct {
		who string
		got chan answer
	}{{"DELETE", deleted}, {"shutdown", stopped}} {
		var a answer
		select {
		case a = <-tt.got:
		case <-time.After(time.Minute):
			t.Fatalf("%s never returned", tt.who)
		}
		if a.err != nil {
			t.Errorf("%s: %v", tt.who, a.err)
		}
		if len(a.cgroups) > 0 {
			t.Errorf("%s returned with the sandbox's cgroup still on the host: %v", tt.who, a.cgroups)
		}
		if tt.who == "DELETE" && (a.ended != 1 || a.endErr != nil) {
			t.Errorf("DELETE answered with %d session.ended records in the log (%v), want 1", a.ended, a.endErr)
		}
	}

	// The daemon is gone: read its log from the file.
	l, err := audit.Open(ctx, audit.Options{Path: d.opts.AuditPath})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close(context.Background())
	evs, err := l.Query(ctx, audit.Query{Kind: audit.KindSessionEnded, Session: s.ID})
	if err != nil {
		t.Fatal(err)
	}
	var reasons []string
	for _, ev := range evs {
		reasons = append(reasons, string(ev.Detail))
	}
	if len(evs) != 1 || !strings.Contains(reasons[0], "max lifetime") {
		t.Fatalf("session.ended recorded %d times %v, want once, for the max lifetime (the reaper came first)", len(evs), reasons)
	}
}
