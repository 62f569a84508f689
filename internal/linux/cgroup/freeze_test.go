package cgroup

import (
	"os/exec"
	"testing"
	"time"
)

// TestFreezeHoldsNoCPU freezes a group whose process spins and checks,
// from the kernel's own accounting, that it takes no CPU until thawed,
// and that a frozen group can still be killed.
func TestFreezeHoldsNoCPU(t *testing.T) {
	p := openTestParent(t)
	g, err := p.Create("freeze", Limits{Pids: 16})
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	spin := exec.Command("sh", "-c", "while :; do :; done")
	startInGroup(t, g, spin)
	usage := func() int64 {
		t.Helper()
		n, err := g.CPUUsage()
		if err != nil {
			t.Fatalf("CPUUsage: %v", err)
		}
		return n
	}
	waitFor(t, "the spinner to use CPU", 5*time.Second, func() bool { return usage() > int64(20*time.Millisecond) })

	if err := g.Freeze(t.Context()); err != nil {
		t.Fatalf("Freeze: %v", err)
	}
	if ok, err := g.Frozen(); err != nil || !ok {
		t.Fatalf("Frozen() = %v, %v; want true", ok, err)
	}
	if err := g.Freeze(t.Context()); err != nil {
		t.Errorf("a second Freeze: %v", err)
	}
	// The usage counter can lag the freeze: time the spinner ran just
	// before it stopped may reach the counter after Frozen says frozen
	// (milliseconds of it on a loaded guest). Two equal readings first;
	// a group that does not freeze never gives them.
	var before int64
	waitFor(t, "the frozen group's CPU usage to stay put", 5*time.Second, func() bool {
		a := usage()
		time.Sleep(50 * time.Millisecond)
		before = usage()
		return before == a
	})
	time.Sleep(300 * time.Millisecond)
	if d := usage() - before; d > int64(5*time.Millisecond) {
		t.Errorf("a frozen group used %v of CPU in 300ms; want none", time.Duration(d))
	}
	if got := procState(spin.Process.Pid); got == "" {
		t.Fatal("the frozen process is gone")
	}

	if err := g.Thaw(); err != nil {
		t.Fatalf("Thaw: %v", err)
	}
	if ok, err := g.Frozen(); err != nil || ok {
		t.Errorf("Frozen() after Thaw = %v, %v; want false", ok, err)
	}
	before = usage()
	waitFor(t, "the thawed spinner to run again", 5*time.Second, func() bool { return usage()-before > int64(20*time.Millisecond) })

	// Paused again, then destroyed: Kill must not leave it frozen alive.
	if err := g.Freeze(t.Context()); err != nil {
		t.Fatalf("Freeze: %v", err)
	}
	if err := g.Kill(t.Context()); err != nil {
		t.Fatalf("Kill of a frozen group: %v", err)
	}
	if err := spin.Wait(); !killedBySIGKILL(err) {
		t.Errorf("Wait() = %v, want death by SIGKILL", err)
	}
	if err := g.Delete(t.Context()); err != nil {
		t.Errorf("Delete: %v", err)
	}
}
