package sandbox

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/airlockhq/airlock/result"
)

// TestPauseResume pauses a sandbox with a command spinning in it and one
// that outlives its time ceiling only by being paused: paused, it takes no
// CPU (the kernel's accounting, read from the host), refuses new commands
// and counts as paused in the ledger; resumed, the same processes go on,
// and the time spent paused does not count against the ceiling. A sandbox
// destroyed while paused leaves nothing behind. On both backends: under
// gVisor the freezer holds runsc, its sentry and its gofer.
func TestPauseResume(t *testing.T) {
	for _, be := range backends(t) {
		t.Run(be.name, func(t *testing.T) { testPauseResume(t, be) })
	}
}

func testPauseResume(t *testing.T, be backend) {
	rt := testRuntime(t)
	spec := Spec{Limits: DefaultLimits()}
	spec.Limits.Time = 3 * time.Second
	if be.spec != nil {
		be.spec(&spec)
	}
	sb, err := rt.Create(t.Context(), spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sb.Destroy(context.Background()) })
	trace := traceOf(t, sb)
	before := rt.Usage()

	spun := make(chan *result.Result, 1)
	go func() {
		spun <- sb.Exec(t.Context(), ExecRequest{Argv: []string{"/bin/sh", "-c", "while :; do :; done"}, Resident: true})
	}()
	// The timed command waits for a file a second command makes after
	// Resume: its wall time then holds the whole pause, longer than the
	// ceiling, while its running time is only what a slow machine takes
	// to start it and to see the file (a fixed sleep made that race the
	// ceiling in an emulated guest). It waits without forking: a loop
	// forking a sleep fifty times a second kept cgroup v1's freezer
	// FREEZING for good on the hybrid host (docs/api.md's pause says so).
	timed := make(chan *result.Result, 1)
	began := time.Now()
	go func() {
		timed <- sb.Exec(t.Context(), ExecRequest{Argv: []string{"/bin/sh", "-c", "touch /tmp/started; while [ ! -e /tmp/go ]; do :; done; echo woke"}, Capture: true, KeepAlive: true})
	}()
	// Both commands run before the pause: one that has not started when
	// the sandbox is paused is refused, and would prove nothing here (a
	// slow emulated guest starts them late).
	started := sb.hostDir("/tmp") + "/started"
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if _, err := os.Stat(started); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the timed command never started")
		}
	}
	cpu := func() time.Duration {
		n, err := sb.group.CPUUsage()
		if err != nil {
			t.Fatalf("CPUUsage: %v", err)
		}
		return time.Duration(n)
	}
	for deadline := time.Now().Add(5 * time.Second); cpu() < 50*time.Millisecond; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the spinner never ran")
		}
	}

	// Bounded, as the node's pause is: a group that does not freeze is
	// an error, not a hung test.
	pctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if err := sb.Pause(pctx); err != nil {
		t.Fatalf("Pause: %v", err)
	}
	if !sb.Paused() {
		t.Error("Paused() = false after Pause")
	}
	if err := sb.Pause(pctx); err != nil {
		t.Errorf("a second Pause: %v", err)
	}
	u := rt.Usage()
	if u.Paused != before.Paused+1 || u.PausedMemory != before.PausedMemory+spec.Limits.Memory {
		t.Errorf("Usage() paused = %d, %d; want %d, %d", u.Paused, u.PausedMemory, before.Paused+1, before.PausedMemory+spec.Limits.Memory)
	}
	r := sb.Exec(t.Context(), ExecRequest{Argv: []string{"/bin/true"}})
	if r.Outcome != result.Error {
		t.Errorf("Exec while paused: outcome %s, want an error", r.Outcome)
	}
	at := cpu()
	// As long as the time ceiling: paused time must not count.
	time.Sleep(spec.Limits.Time)
	if d := cpu() - at; d > 5*time.Millisecond {
		t.Errorf("a paused sandbox used %v of CPU in %v; want none", d, spec.Limits.Time)
	}

	if err := sb.Resume(); err != nil {
		t.Fatalf("Resume: %v", err)
	}
	if sb.Paused() {
		t.Error("Paused() = true after Resume")
	}
	if u := rt.Usage(); u.Paused != before.Paused {
		t.Errorf("Usage().Paused = %d after Resume, want %d", u.Paused, before.Paused)
	}
	if r := sb.Exec(t.Context(), ExecRequest{Argv: []string{"/bin/touch", "/tmp/go"}, KeepAlive: true}); r.Outcome != result.Exited || r.ExitCode != 0 {
		t.Fatalf("touch /tmp/go after Resume: %s %q", r.Outcome, r.Error)
	}
	select {
	case r := <-timed:
		if r.Outcome != result.Exited || r.ExitCode != 0 || string(r.Stdout) != "woke\n" {
			t.Errorf("the command paused past its time ceiling: %s (limit %+v, error %q, stdout %q) after %v; want exit 0, \"woke\"", r.Outcome, r.Limit, r.Error, r.Stdout, time.Since(began))
		}
		if d := time.Since(began); d <= spec.Limits.Time {
			t.Errorf("the timed command took %v, not past its ceiling %v: the test proves nothing", d, spec.Limits.Time)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the paused command never finished after Resume")
	}
	at = cpu()
	for deadline := time.Now().Add(5 * time.Second); cpu()-at < 50*time.Millisecond; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			select {
			case r := <-spun:
				t.Fatalf("the spinner ended: %s %+v %q", r.Outcome, r.Limit, r.Error)
			default:
			}
			t.Fatalf("the spinner did not run again after Resume (frozen: %v)", sb.Paused())
		}
	}

	// Destroyed while paused: killed, thawed, gone.
	if err := sb.Pause(pctx); err != nil {
		t.Fatalf("Pause: %v", err)
	}
	if err := sb.Destroy(t.Context()); err != nil {
		t.Errorf("Destroy of a paused sandbox: %v", err)
	}
	trace.assertGone(t)
	if r := <-spun; r.Outcome == result.Exited {
		t.Errorf("the spinner exited by itself: %+v", r)
	}
	if u := rt.Usage(); u.Paused != before.Paused || u.PausedMemory != before.PausedMemory || u.Sandboxes != before.Sandboxes-1 {
		t.Errorf("Usage() after Destroy = %+v; want one sandbox fewer than %+v, none more paused", u, before)
	}
	if err := sb.Pause(t.Context()); !errors.Is(err, ErrDead) {
		t.Errorf("Pause of a destroyed sandbox = %v, want ErrDead", err)
	}
}
