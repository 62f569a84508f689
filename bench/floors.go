package main

import (
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"syscall"
	"time"

	"github.com/airlockhq/airlock/internal/linux/cgroup"
	"github.com/airlockhq/airlock/internal/linux/netns"
	"github.com/airlockhq/airlock/sandbox"
)

// floors measures, alone and in this run, steps of a sandbox's life that
// bwrap does not take (or takes too, for scale), so that what airlock
// costs over bwrap can be set against what the kernel and the Go runtime
// charge for them: a sandbox's cgroup made, entered and removed; a
// network namespace made and closed; and the all-thread system calls a Go
// init must make to confine itself.
func floors(n int) error {
	cg, err := cgroup.Open("/airlock-bench-floors")
	if err != nil {
		return err
	}
	defer cg.Close()
	lim := sandbox.DefaultLimits()
	cl := cgroup.Limits{MemoryBytes: lim.Memory, Pids: lim.Pids, CPUMilli: lim.CPUMilli}
	group := func(i int) error {
		g, err := cg.Create("floor-"+strconv.Itoa(i), cl)
		if err != nil {
			return err
		}
		if g.Version() == cgroup.V1 {
			// What a sandbox start does there: the tasks files opened
			// for the clone, which writes itself into them (the
			// child's writes are not this process's CPU).
			fds, err := g.TasksFDs()
			if err != nil {
				return err
			}
			for _, fd := range fds {
				syscall.Close(fd)
			}
		} else {
			fd, err := g.DirFD()
			if err != nil {
				return err
			}
			syscall.Close(fd)
		}
		if err := g.OpenCounters(); err != nil {
			return err
		}
		if _, err := g.Counters(); err != nil {
			return err
		}
		return g.Delete(context.Background())
	}
	namespace := func(int) error {
		ns, err := netns.New()
		if err != nil {
			return err
		}
		return ns.Close()
	}
	type step struct {
		name string
		fn   func(int) error
		s    series
		cpu  time.Duration
	}
	steps := []*step{
		{name: fmt.Sprintf("the sandbox's cgroup (%s): made with its limits, its tasks files (v1) or its directory (v2) opened for the clone, its counters read, removed", cg.Version()), fn: group},
		{name: "a network namespace: made (`lo` up) and closed (bwrap makes one too)", fn: namespace},
	}
	for i := range n {
		for _, st := range steps {
			c0 := cpuTime()
			start := time.Now()
			if err := st.fn(i); err != nil {
				return fmt.Errorf("%s: %w", st.name, err)
			}
			st.s.d = append(st.s.d, time.Since(start))
			st.cpu += cpuTime() - c0
		}
	}
	// The all-thread calls, in a fresh Go process as init is one: a
	// static helper run with 0 and with 3 calls, interleaved.
	helper, err := helperProgram("allthreads", "./bench/internal/allthreads")
	if err != nil {
		return err
	}
	var base, three series
	for range n {
		for _, c := range []struct {
			s   *series
			arg string
		}{{&base, "0"}, {&three, "3"}} {
			cmd := exec.Command(helper, c.arg)
			cmd.Env = []string{"GOMAXPROCS=1"} // as init runs
			start := time.Now()
			if err := cmd.Run(); err != nil {
				return fmt.Errorf("all-thread helper: %w", err)
			}
			c.s.d = append(c.s.d, time.Since(start))
		}
	}
	fmt.Printf("\n## Steps bwrap does not take, measured alone (%d each, interleaved)\n\n", n)
	fmt.Println("| step | p50 | CPU of this process per step |\n| --- | --- | --- |")
	for _, st := range steps {
		fmt.Printf("| %s | %s | %s |\n", st.name, ms(st.s.pct(0.5)), ms(st.cpu/time.Duration(n)))
	}
	measured.cgroupCPU = steps[0].cpu / time.Duration(n)
	fmt.Printf("| init's three all-thread system calls (`setresgid`, `setresuid`, Landlock), in a fresh static Go process with a locked main thread: whole process with them less without | %s | — |\n",
		ms(three.pct(0.5)-base.pct(0.5)))
	fmt.Println("\nThe CPU column counts this process only: the kernel's deferred work (a removed cgroup's release, a closed namespace's cleanup) runs in kernel threads and is not in it.")
	return nil
}

// cpuTime is the CPU time this process has used.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
