package cli

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/client"
)

// TestPausedSurvivesRestart pauses a session with a process and files in
// it (and a volume attached), kills the daemon with SIGKILL, and starts
// another: the session is back, paused, saying its processes were lost;
// a plain resume is refused, naming how to resume from the files; a
// resume from the files gives a fresh sandbox with them (the process
// gone). A running session does not come back. The same after a
// graceful stop. After the last daemon stops nothing of any is left: no
// sandbox cgroup, no mount, no kept record.
func TestPausedSurvivesRestart(t *testing.T) {
	requireRoot(t)
	dir := t.TempDir()
	snaps, vols := filepath.Join(dir, "snapshots"), filepath.Join(dir, "volumes")
	cfg := writeConfig(t, "images:\n  snapshots: "+snaps+"\n  volumes: "+vols+"\ntools:\n  sh:\n    pool: {warm: 1}\n    limits: {memory: 64MiB}\n")
	sock := filepath.Join(t.TempDir(), "airlock.sock")
	auditDB := filepath.Join(t.TempDir(), "audit.db")
	mountsBefore := mountCount(t)
	start := func() (*client.Client, func(syscall.Signal)) {
		cmd, logs := serveCmd(t, cfg, sock, auditDB)
		c := waitForDaemon(t, sock, logs, 30*time.Second)
		stopped := false
		stop := func(sig syscall.Signal) {
			_ = cmd.Process.Signal(sig)
			_ = cmd.Wait()
			stopped = true
		}
		t.Cleanup(func() {
			if !stopped {
				stop(syscall.SIGTERM)
			}
		})
		return c, stop
	}
	c, stop := start()
	ctx := t.Context()
	if _, err := c.CreateVolume(ctx, api.VolumeRequest{Name: "v", Size: "16MiB"}); err != nil {
		t.Fatal(err)
	}
	s, err := c.CreateSession(ctx, api.SessionRequest{Tool: "sh", Volumes: []api.VolumeMount{{Volume: "v", Path: "/data"}}})
	if err != nil {
		t.Fatal(err)
	}
	running, err := c.CreateSession(ctx, api.SessionRequest{Tool: "sh"})
	if err != nil {
		t.Fatal(err)
	}
	r, err := c.Exec(ctx, s.ID, api.ExecRequest{Argv: []string{"sh", "-c", "echo work > notes; echo tmp > /tmp/t; echo vol > /data/v; sleep 600 >/dev/null 2>&1 & echo $! > pid"}})
	if err != nil || r.ExitCode != 0 {
		t.Fatalf("%+v %v", r, err)
	}
	// The check below that the process is gone could not fail if pgrep
	// found nothing anyway: here it finds the sleep.
	if r, err := c.Exec(ctx, s.ID, api.ExecRequest{Argv: []string{"sh", "-c", "pgrep -x sleep >/dev/null && echo alive"}}); err != nil || string(r.Stdout) != "alive\n" {
		t.Fatalf("pgrep before the restart: %+v %v", r, err)
	}
	record := filepath.Join(snaps, "paused", "session-"+s.ID+".rec")
	pauseAndKeep := func() {
		t.Helper()
		if _, err := c.PauseSession(ctx, s.ID); err != nil {
			t.Fatalf("pause: %v", err)
		}
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			if _, err := os.Stat(record); err == nil {
				return
			}
			if time.Now().After(deadline) {
				t.Fatal("the paused session's files were never kept")
			}
		}
	}
	pauseAndKeep()
	stop(syscall.SIGKILL)

	var pv *api.Session
	for round, how := range []string{"SIGKILL", "a graceful stop"} {
		c, stop = start()
		got, err := c.Session(ctx, s.ID)
		if err != nil || got.State != api.SessionPaused || !got.ProcessesLost {
			t.Fatalf("after %s: %+v %v; want it paused, its processes lost", how, got, err)
		}
		if _, err := c.Session(ctx, running.ID); err == nil && round == 0 {
			t.Errorf("a running session came back after %s", how)
		}
		var ce *client.Error
		if _, err := c.Exec(ctx, s.ID, api.ExecRequest{Argv: []string{"true"}}); !errors.As(err, &ce) || ce.Status != 409 {
			t.Errorf("exec in a dormant session: %v; want 409", err)
		}
		if _, err := c.ResumeSession(ctx, s.ID, nil); !errors.As(err, &ce) || ce.Status != 409 || !strings.Contains(err.Error(), `"files": true`) {
			t.Errorf("a plain resume after %s: %v; want 409 saying how to resume from the files", how, err)
		}
		got, err = c.ResumeSession(ctx, s.ID, &api.ResumeRequest{Files: true})
		if err != nil || got.State != api.SessionActive || got.ProcessesLost {
			t.Fatalf("resume from the files after %s: %+v %v", how, got, err)
		}
		// The volume is not reattached: a session's volumes are its
		// sandbox's, and this one is new (said in the docs).
		// A new pid namespace numbers from 1 again: the old sleep's pid
		// may be another process's now, so the sleep is looked for by
		// name.
		r, err := c.Exec(ctx, s.ID, api.ExecRequest{Argv: []string{"sh", "-c", `cat notes /tmp/t; pgrep -x sleep >/dev/null && echo alive || echo gone`}})
		if err != nil || string(r.Stdout) != "work\ntmp\ngone\n" {
			t.Errorf("after resuming from the files: %+v %v; want the files and no process", r, err)
		}
		if _, err := os.Stat(record); !os.IsNotExist(err) {
			t.Errorf("the kept record outlived the resume: %v", err)
		}
		if round == 0 {
			// One more, paused with a volume attached: a graceful stop
			// keeps it and unmounts the volume.
			pv, err = c.CreateSession(ctx, api.SessionRequest{Tool: "sh", Volumes: []api.VolumeMount{{Volume: "v", Path: "/data"}}})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := c.PauseSession(ctx, pv.ID); err != nil {
				t.Fatal(err)
			}
			pauseAndKeep()
			stop(syscall.SIGTERM)
			if b, _ := os.ReadFile("/proc/self/mountinfo"); strings.Contains(string(b), vols) {
				t.Errorf("a volume is still mounted after a graceful stop:\n%s", b)
			}
		}
	}
	if got, err := c.Session(ctx, pv.ID); err != nil || got.State != api.SessionPaused || !got.ProcessesLost {
		t.Errorf("the session paused with a volume, after a graceful stop: %+v %v", got, err)
	}
	for _, id := range []string{s.ID, pv.ID} {
		if err := c.DeleteSession(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.DeleteVolume(ctx, "v"); err != nil {
		t.Errorf("delete the volume: %v", err)
	}
	stop(syscall.SIGTERM)
	if n := cliCgroups(t); n != 0 {
		t.Errorf("%d sandbox cgroups left", n)
	}
	if n := mountCount(t); n != mountsBefore {
		b, _ := os.ReadFile("/proc/self/mountinfo")
		t.Errorf("%d mounts, %d before:\n%s", n, mountsBefore, b)
	}
	ents, _ := os.ReadDir(filepath.Join(snaps, "paused"))
	for _, e := range ents {
		t.Errorf("left in the kept pauses: %s", e.Name())
	}
}
