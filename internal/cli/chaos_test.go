package cli

import (
	"bytes"
	"context"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/client"
	"github.com/airlockhq/airlock/result"
)

// TestChaos kills the daemon with SIGKILL at random points while clients
// create, run in and destroy sandboxes and sessions, and starts it again,
// 200 times (20 with -short). After the last daemon's shutdown nothing of
// any of them may be left: no sandbox cgroup (and so no process), no
// mount, no lock file of a sandbox or a uid range. And every run a client
// was answered for is in the audit log with its outcome: the daemon
// answers only once the outcome is recorded.
func TestChaos(t *testing.T) {
	requireRoot(t)
	rounds := 200
	if testing.Short() {
		rounds = 20
	}
	cfg := writeConfig(t, "tools:\n  sh:\n    pool: {warm: 1}\n    limits: {memory: 64MiB}\n")
	sock := filepath.Join(t.TempDir(), "airlock.sock")
	auditDB := filepath.Join(t.TempDir(), "audit.db")
	mountsBefore := mountCount(t)
	idsHeldBefore := heldLocks(t, "/run/airlock/ids")
	start := func() (*exec.Cmd, *bytes.Buffer) { return serveCmd(t, cfg, sock, auditDB) }
	var mu sync.Mutex
	acked := map[string]bool{} // answered runs
	c := client.New(sock)
	for round := range rounds {
		cmd, logs := start()
		waitChaos(t, cmd, c, logs)
		ctx, stop := context.WithCancel(context.Background())
		var answered atomic.Int64
		var wg sync.WaitGroup
		for w := range 3 {
			wg.Go(func() {
				for ctx.Err() == nil {
					if w == 2 {
						// Sessions: created, used, deleted.
						s, err := c.CreateSession(ctx, api.SessionRequest{Tool: "sh"})
						if err == nil {
							c.Exec(ctx, s.ID, api.ExecRequest{Argv: []string{"true"}})
							c.DeleteSession(ctx, s.ID)
						}
						continue
					}
					r, err := c.Run(ctx, api.RunRequest{Tool: "sh", Argv: []string{"sh", "-c", "echo x"}})
					if err == nil && r.Outcome == result.Exited {
						mu.Lock()
						acked[r.RunID] = true
						mu.Unlock()
						answered.Add(1)
					}
				}
			})
		}
		// The kill lands at a random point once work is under way (an
		// emulated guest is ten times slower: a fixed delay would kill
		// every daemon before its first answer there).
		for deadline := time.Now().Add(20 * time.Second); answered.Load() == 0 && time.Now().Before(deadline); {
			time.Sleep(time.Millisecond)
		}
		time.Sleep(time.Duration(rand.IntN(60)) * time.Millisecond)
		_ = cmd.Process.Signal(syscall.SIGKILL)
		_ = cmd.Wait()
		stop()
		wg.Wait()
		if t.Failed() {
			t.Fatalf("round %d", round)
		}
	}
	// The last daemon sweeps what the last kill left, then shuts down.
	cmd, logs := start()
	waitForDaemon(t, sock, logs, 30*time.Second)
	// Every answered run's start was acknowledged (committed before it
	// ran), so it is in the log; and no run or session of the log is
	// left open: an outcome a kill cut off between the answer and its
	// write (see the daemon's reconcile) is closed by the next daemon,
	// saying so.
	reconciled := map[string]bool{}
	startedRuns, finishedRuns := map[string]bool{}, map[string]bool{}
	opened, ended := map[string]bool{}, map[string]bool{}
	for _, kind := range []string{"run", "session"} {
		for after := int64(0); ; {
			p, err := c.Audit(t.Context(), client.AuditQuery{Kind: kind, After: after, Limit: 1000})
			if err != nil {
				t.Fatal(err)
			}
			if len(p.Events) == 0 {
				break
			}
			for _, ev := range p.Events {
				switch ev.Kind {
				case "run.started":
					startedRuns[ev.Run] = true
				case "run.finished":
					finishedRuns[ev.Run] = true
					if strings.Contains(string(ev.Detail), `"reconciled":true`) {
						reconciled[ev.Run] = true
					}
				case "session.created":
					opened[ev.Session] = true
				case "session.ended":
					ended[ev.Session] = true
				}
			}
			after = p.Next
		}
	}
	lost, cut := 0, 0
	for id := range acked {
		if id == "" || !startedRuns[id] || !finishedRuns[id] {
			lost++
		}
		if reconciled[id] {
			cut++
		}
	}
	open := 0
	for run := range startedRuns {
		if !finishedRuns[run] {
			open++
		}
	}
	for s := range opened {
		if !ended[s] {
			open++
		}
	}
	t.Logf("%d rounds, %d answered runs (%d of their outcomes cut off by a kill and closed by the next daemon), %d runs and %d sessions in the log", rounds, len(acked), cut, len(startedRuns), len(opened))
	if lost > 0 || len(acked) == 0 {
		t.Errorf("%d of %d answered runs are missing from the audit log", lost, len(acked))
	}
	if open > 0 {
		t.Errorf("%d runs and sessions left open in the audit log", open)
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("the last daemon: %v\n%s", err, logs)
	}
	if n := cliCgroups(t); n != 0 {
		t.Errorf("%d sandbox cgroups left", n)
	}
	if n := lockFiles(t, "/run/airlock/groups/"+strings.ReplaceAll(strings.Trim(testCgroup, "/"), "/", "%2F")); n != 0 {
		t.Errorf("%d sandbox lock files left", n)
	}
	if n := heldLocks(t, "/run/airlock/ids"); n > idsHeldBefore {
		t.Errorf("%d uid ranges held after the rounds, %d before", n, idsHeldBefore)
	}
	if n := mountCount(t); n != mountsBefore {
		t.Errorf("%d mounts on the host after the rounds, %d before", n, mountsBefore)
	}
}

// waitChaos waits for a daemon of TestChaos to answer; one that does not
// within 30s is made to show its goroutines (SIGQUIT), and the test fails
// with them.
func waitChaos(t *testing.T, cmd *exec.Cmd, c *client.Client, logs *bytes.Buffer) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for c.Health(t.Context()) != nil {
		if time.Now().After(deadline) {
			_ = cmd.Process.Signal(syscall.SIGQUIT)
			_ = cmd.Wait()
			t.Fatalf("daemon never answered:\n%s", logs)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// mountCount counts the mounts of this process's mount namespace (the
// host's).
func mountCount(t *testing.T) int {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	return bytes.Count(b, []byte("\n"))
}
