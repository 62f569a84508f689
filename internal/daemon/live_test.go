package daemon

import (
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/client"
	"github.com/airlockhq/airlock/result"
)

// TestPSAndKill: a run in flight is listed with its tool, caller, use and
// ceilings beside an active session; killing it ends the run at once with
// an outcome that says so, destroys its sandbox, and is recorded with who
// asked. A run not in flight is not found.
func TestPSAndKill(t *testing.T) {
	d, c, _ := start(t)
	ctx := t.Context()
	s, err := c.CreateSession(ctx, api.SessionRequest{Tool: "sh"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.DeleteSession(ctx, s.ID)
	type ran struct {
		r   *result.Result
		err error
	}
	done := make(chan ran, 1)
	start := time.Now()
	go func() {
		r, err := c.Run(ctx, api.RunRequest{Tool: "sh", Argv: []string{"sleep", "4"}})
		done <- ran{r, err}
	}()
	var live api.LiveRun
	deadline := time.Now().Add(5 * time.Second)
	for {
		a, err := c.PS(ctx)
		if err != nil {
			t.Fatal(err)
		}
		// Listed as soon as it is claimed; its first reading of use
		// comes a moment later (a loaded machine's moment can be long).
		if len(a.Runs) == 1 && a.Runs[0].MemoryBytes > 0 && a.Runs[0].Pids >= 1 {
			live = a.Runs[0]
			if len(a.Sessions) != 1 || a.Sessions[0].ID != s.ID {
				t.Errorf("sessions %+v", a.Sessions)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the run never showed in ps: %+v", a)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if live.Kind != "run" || live.Tool != "sh" || !strings.HasPrefix(live.ID, "r_") || !strings.HasPrefix(live.Client, "unix:uid=0") ||
		live.MemoryBytes <= 0 || live.Pids < 1 || live.Limits.MemoryBytes != 64<<20 || live.Limits.TimeMillis != 5000 {
		t.Fatalf("ps lists %+v", live)
	}
	if err := c.KillRun(ctx, live.ID); err != nil {
		t.Fatal(err)
	}
	got := <-done
	if got.err != nil || got.r.Outcome != result.Signaled || got.r.Signal != 9 || !strings.Contains(got.r.Error, "ended by airlock kill") || time.Since(start) > 3*time.Second {
		t.Fatalf("the killed run: %+v %v after %s", got.r, got.err, time.Since(start))
	}
	evs := waitAudit(t, c, client.AuditQuery{Kind: "run.killed"}, func(evs []api.AuditEvent) bool { return len(evs) == 1 })
	if evs[0].Run != live.ID || evs[0].Sandbox != live.SandboxID || !strings.HasPrefix(evs[0].Client, "unix:uid=0") {
		t.Fatalf("the kill's record %+v", evs[0])
	}
	a, err := c.PS(ctx)
	if err != nil || len(a.Runs) != 0 {
		t.Fatalf("ps after the kill: %+v %v", a, err)
	}
	var ae *client.Error
	if err := c.KillRun(ctx, live.ID); !errors.As(err, &ae) || ae.Status != http.StatusNotFound {
		t.Fatalf("a second kill: %v", err)
	}
	_ = d
}
