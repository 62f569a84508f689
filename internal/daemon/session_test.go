package daemon

import (
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/client"
	"github.com/airlockhq/airlock/result"
)

func TestSessionWorkspaceAndFiles(t *testing.T) {
	_, c, _ := start(t)
	ctx := t.Context()
	s, err := c.CreateSession(ctx, api.SessionRequest{Tool: "sh"})
	if err != nil {
		t.Fatal(err)
	}
	if s.State != api.SessionActive || s.SandboxID == "" {
		t.Fatalf("session %+v", s)
	}
	exec := func(cmd string) *result.Result {
		t.Helper()
		r, err := c.Exec(ctx, s.ID, api.ExecRequest{Argv: []string{"sh", "-c", cmd}})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	// State persists across execs: one sandbox for the session.
	if r := exec(`echo "$GREETING" > greeting`); r.ExitCode != 0 {
		t.Fatalf("%+v", r)
	}
	if r := exec("cat greeting"); string(r.Stdout) != "hello\n" || r.SandboxID != s.SandboxID {
		t.Fatalf("second exec: %q in %s", r.Stdout, r.SandboxID)
	}
	// Files in and out, owned by the sandbox's user.
	if err := c.PutFile(ctx, s.ID, "dir/in.txt", strings.NewReader("uploaded")); err != nil {
		t.Fatal(err)
	}
	if r := exec("cat dir/in.txt; echo; stat -c %U dir/in.txt dir; echo made > out.txt"); string(r.Stdout) != "uploaded\nsandbox\nsandbox\n" {
		t.Fatalf("in the sandbox: %q %q", r.Stdout, r.Stderr)
	}
	if b, err := c.GetFile(ctx, s.ID, "out.txt"); err != nil || string(b) != "made\n" {
		t.Fatalf("get: %q %v", b, err)
	}
	// Concurrent execs in one session.
	var wg sync.WaitGroup
	for i := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := c.Exec(ctx, s.ID, api.ExecRequest{Argv: []string{"sh", "-c", "sleep 0.2; echo $0", string(rune('a' + i))}})
			if err != nil || r.ExitCode != 0 {
				t.Errorf("concurrent exec: %+v %v", r, err)
			}
		}()
	}
	wg.Wait()
	if err := c.DeleteSession(ctx, s.ID); err != nil {
		t.Fatal(err)
	}
	got, err := c.Session(ctx, s.ID)
	if err != nil || got.State != api.SessionEnded || got.EndReason != "deleted" {
		t.Fatalf("after delete: %+v %v", got, err)
	}
	_, err = c.Exec(ctx, s.ID, api.ExecRequest{Argv: []string{"true"}})
	var ce *client.Error
	if !errors.As(err, &ce) || ce.Status != 409 {
		t.Fatalf("exec after delete: %v", err)
	}
}

// The sandbox plants symlinks; the file calls never follow them out of
// the workspace, and the host is unchanged.
func TestSessionFilesConfined(t *testing.T) {
	_, c, _ := start(t)
	ctx := t.Context()
	s, err := c.CreateSession(ctx, api.SessionRequest{Tool: "sh"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.DeleteSession(ctx, s.ID)
	r, err := c.Exec(ctx, s.ID, api.ExecRequest{Argv: []string{"sh", "-c", "ln -s /etc/hostname link && ln -s / root && mkfifo fifo"}})
	if err != nil || r.ExitCode != 0 {
		t.Fatalf("%+v %v", r, err)
	}
	marker := "/tmp/airlock-session-pwned"
	os.Remove(marker)
	for _, p := range []string{"link", "root/etc/hostname", "fifo", "../etc/passwd"} {
		if b, err := c.GetFile(ctx, s.ID, p); err == nil {
			t.Errorf("read %q: %q", p, b)
		}
	}
	for _, p := range []string{"link", "root/tmp/airlock-session-pwned", "fifo", "../x"} {
		if err := c.PutFile(ctx, s.ID, p, strings.NewReader("pwned")); err == nil {
			t.Errorf("wrote %q", p)
		}
	}
	if _, err := os.Stat(marker); !os.IsNotExist(err) {
		t.Fatalf("a file appeared on the host: %v", err)
	}
	if r, _ := c.Exec(ctx, s.ID, api.ExecRequest{Argv: []string{"cat", "/etc/hostname"}}); string(r.Stdout) != "sandbox\n" {
		t.Fatalf("the sandbox's own file changed: %q", r.Stdout)
	}
}

func TestSessionEndsOnLimitAndIdle(t *testing.T) {
	_, c, _ := start(t)
	ctx := t.Context()
	s, err := c.CreateSession(ctx, api.SessionRequest{Tool: "sh"})
	if err != nil {
		t.Fatal(err)
	}
	r, err := c.Exec(ctx, s.ID, api.ExecRequest{Argv: []string{"sh", "-c", "head -c 200000000 /dev/zero > /dev/shm/x; sleep 5"}})
	if err != nil || r.Outcome != result.LimitExceeded {
		t.Fatalf("balloon: %+v %v", r, err)
	}
	waitState(t, c, s.ID, "limit: "+r.Limit.Name)

	idle, err := c.CreateSession(ctx, api.SessionRequest{Tool: "sh", IdleTimeout: "1s"})
	if err != nil {
		t.Fatal(err)
	}
	waitState(t, c, idle.ID, "idle timeout")
}

func waitState(t *testing.T, c *client.Client, id, reason string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		s, err := c.Session(t.Context(), id)
		if err == nil && s.State == api.SessionEnded {
			if s.EndReason != reason {
				t.Fatalf("ended for %q, want %q", s.EndReason, reason)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("session still %+v (%v)", s, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestSessionBadRequests(t *testing.T) {
	_, c, _ := start(t)
	ctx := t.Context()
	var ce *client.Error
	for _, tt := range []struct {
		req    api.SessionRequest
		status int
	}{
		{api.SessionRequest{Tool: "nope"}, 404},
		{api.SessionRequest{Tool: "sh", IdleTimeout: "soon"}, 400},
		{api.SessionRequest{Tool: "sh", MaxLifetime: "48h"}, 400},
		{api.SessionRequest{Tool: "sh", IdleTimeout: "2h", MaxLifetime: "1h"}, 400},
	} {
		if _, err := c.CreateSession(ctx, tt.req); !errors.As(err, &ce) || ce.Status != tt.status {
			t.Errorf("%+v: %v, want %d", tt.req, err, tt.status)
		}
	}
	if _, err := c.Session(ctx, "s_nope"); !errors.As(err, &ce) || ce.Status != 404 {
		t.Errorf("unknown session: %v", err)
	}
}

func TestSessionCap(t *testing.T) {
	_, sock := serveConfig(t, testConfig, func(o *Options) { o.MaxSessions = 2 })
	c := client.New(sock)
	a, err := c.CreateSession(t.Context(), api.SessionRequest{Tool: "cold"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.CreateSession(t.Context(), api.SessionRequest{Tool: "cold"}); err != nil {
		t.Fatal(err)
	}
	var ce *client.Error
	if _, err := c.CreateSession(t.Context(), api.SessionRequest{Tool: "cold"}); !errors.As(err, &ce) || ce.Status != 503 {
		t.Fatalf("third session: %v", err)
	}
	// Ending one makes room.
	if err := c.DeleteSession(t.Context(), a.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CreateSession(t.Context(), api.SessionRequest{Tool: "cold"}); err != nil {
		t.Fatal(err)
	}
}

// TestUncleanPathsRefused: a path with "." or ".." segments is refused
// as such. ServeMux answered it with a redirect to the cleaned path, which
// a file PUT (a body that cannot be sent twice) did not follow, and the
// client took the redirect for success: `session cp a.txt ID:sub/../b.txt`
// exited 0 having written nothing. An unknown audit kind is refused too,
// rather than answered with no events.
func TestUncleanPathsRefused(t *testing.T) {
	_, c, _ := start(t)
	ctx := t.Context()
	s, err := c.CreateSession(ctx, api.SessionRequest{Tool: "sh"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.DeleteSession(ctx, s.ID)
	for _, p := range []string{"sub/../b.txt", "./b.txt", "sub//b.txt"} {
		err := c.PutFile(ctx, s.ID, p, strings.NewReader("x"))
		var ae *client.Error
		if !errors.As(err, &ae) || ae.Status != http.StatusBadRequest || !strings.Contains(ae.Message, "segments") {
			t.Errorf("PUT %s: %v, want 400 naming the segments", p, err)
		}
		if _, err := c.GetFile(ctx, s.ID, p); !errors.As(err, &ae) || ae.Status != http.StatusBadRequest {
			t.Errorf("GET %s: %v, want 400", p, err)
		}
	}
	if err := c.PutFile(ctx, s.ID, "b.txt", strings.NewReader("x")); err != nil {
		t.Fatal(err)
	}
	_, err = c.Audit(ctx, client.AuditQuery{Kind: "nope"})
	var ae *client.Error
	if !errors.As(err, &ae) || ae.Status != http.StatusBadRequest || !strings.Contains(ae.Message, `no events are of kind "nope"`) {
		t.Errorf("kind nope: %v", err)
	}
	for _, k := range []string{"sandbox", "run.finished", "limit", "mcp.call"} {
		if _, err := c.Audit(ctx, client.AuditQuery{Kind: k}); err != nil {
			t.Errorf("kind %s: %v", k, err)
		}
	}
	// No daemon: a sentence, matching client.ErrNoDaemon.
	if _, err := client.New(filepath.Join(t.TempDir(), "none.sock")).Pools(ctx); !errors.Is(err, client.ErrNoDaemon) || !strings.Contains(err.Error(), "is `airlock serve` running?") {
		t.Errorf("no daemon: %v", err)
	}
}
