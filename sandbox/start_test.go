package sandbox

import (
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/airlockhq/airlock/result"
	"golang.org/x/sys/unix"
)

// TestStartThenExec gives commands to a sandbox whose init is still
// starting: each is queued to init and runs once it is ready, two of them
// at once included, and the sandbox is then removed without a trace.
func TestStartThenExec(t *testing.T) {
	rt := testRuntime(t)
	sb, err := rt.Start(t.Context(), Spec{Limits: DefaultLimits()})
	if err != nil {
		t.Fatal(err)
	}
	tr := traceOf(t, sb)
	var wg sync.WaitGroup
	res := make([]*result.Result, 2)
	for i := range res {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res[i] = sb.Exec(t.Context(), ExecRequest{Argv: []string{"sh", "-c", "hostname; id -u"}, Capture: true, KeepAlive: true})
		}()
	}
	wg.Wait()
	if err := sb.Destroy(t.Context()); err != nil {
		t.Fatal(err)
	}
	tr.assertGone(t)
	for i, r := range res {
		if r.Outcome != result.Exited || r.ExitCode != 0 || string(r.Stdout) != "sandbox\n1000\n" {
			t.Errorf("exec %d: %s %d %q %s", i, r.Outcome, r.ExitCode, r.Stdout, r.Error)
		}
	}
}

// TestStartInitDies kills init while it starts, a command already queued:
// the command's result is an error (never a run), a second Exec says the
// sandbox is dead, and Destroy still removes every trace.
func TestStartInitDies(t *testing.T) {
	rt := testRuntime(t)
	sb, err := rt.Start(t.Context(), Spec{Limits: DefaultLimits()})
	if err != nil {
		t.Fatal(err)
	}
	tr := traceOf(t, sb)
	if err := unix.Kill(sb.InitPid(), unix.SIGKILL); err != nil {
		t.Fatal(err)
	}
	r := sb.Exec(t.Context(), ExecRequest{Argv: []string{"sh", "-c", "echo ran"}, Capture: true})
	if r.Outcome != result.Error || len(r.Stdout) != 0 || !strings.Contains(r.Error, "sandbox") {
		t.Errorf("exec on a killed starting sandbox: %s %q %q, want an error", r.Outcome, r.Stdout, r.Error)
	}
	r2 := sb.Exec(t.Context(), ExecRequest{Argv: []string{"true"}})
	if r2.Outcome != result.Error {
		t.Errorf("second exec: %s %q, want an error", r2.Outcome, r2.Error)
	}
	if err := sb.Destroy(t.Context()); err != nil {
		t.Fatal(err)
	}
	tr.assertGone(t)
}

func TestBadHostnameRefused(t *testing.T) {
	rt := testRuntime(t)
	for _, h := range []string{"a\n127.0.0.1 evil", strings.Repeat("h", 65), "a b", "x/y"} {
		_, err := rt.Create(t.Context(), Spec{Limits: DefaultLimits(), Hostname: h})
		if !errors.Is(err, ErrInvalid) {
			t.Errorf("hostname %q: %v, want ErrInvalid", h, err)
		}
	}
}

// TestStartThenDestroy destroys a sandbox whose init may still be
// starting, with no command ever given: nothing of it remains.
func TestStartThenDestroy(t *testing.T) {
	rt := testRuntime(t)
	for range 3 {
		sb, err := rt.Start(t.Context(), Spec{Limits: DefaultLimits()})
		if err != nil {
			t.Fatal(err)
		}
		tr := traceOf(t, sb)
		if err := sb.Destroy(t.Context()); err != nil {
			t.Fatal(err)
		}
		tr.assertGone(t)
		if r := sb.Exec(t.Context(), ExecRequest{Argv: []string{"true"}}); r.Outcome != result.Error {
			t.Errorf("exec after destroy: %s, want an error", r.Outcome)
		}
	}
}
