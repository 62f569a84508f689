package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/client"
	"github.com/airlockhq/airlock/internal/config"
	"github.com/airlockhq/airlock/internal/daemon"
	"github.com/airlockhq/airlock/result"
	"github.com/airlockhq/airlock/sandbox"
)

// daemonBench runs the daemon in this process on a private socket and
// measures runs through the API with the Go client: a warm run (the pool
// let refill first) against a cold one (a tool without a pool),
// interleaved, and sustained throughput with 4 clients.
func daemonBench(n int, tput time.Duration) error {
	// The cold tool's ceilings are small enough that the 100 sessions
	// held below fit the node's default capacity (80 % of the memory,
	// half of pid_max, summed over the sandboxes' ceilings).
	c, sock, stop, err := startDaemon(daemonBenchConfig)
	if err != nil {
		return err
	}
	defer stop()
	run := daemonRun(c)
	idle := func() int {
		ps, err := c.Pools(context.Background())
		if err != nil {
			return 0
		}
		return ps[0].Idle
	}
	warm := series{name: "warm: claim → run /bin/true → result, through the API"}
	cold := series{name: "cold: create → run /bin/true → result, through the API"}
	bw := series{name: "`bwrap --unshare-all … /bin/true`, whole process, interleaved"}
	for i := 0; i < n+n/10; i++ {
		for idle() < 2 {
			time.Sleep(time.Millisecond)
		}
		t0 := time.Now()
		if err := run("warm"); err != nil {
			return err
		}
		t1 := time.Now()
		if err := run("cold"); err != nil {
			return err
		}
		t2 := time.Now()
		b, err := bwrapOnce()
		if err != nil {
			return err
		}
		if i >= n/10 {
			warm.d = append(warm.d, t1.Sub(t0))
			cold.d = append(cold.d, t2.Sub(t1))
			bw.d = append(bw.d, b)
		}
	}
	fmt.Printf("## Daemon (%d runs each, interleaved, Go client on the unix socket)\n\n", n)
	fmt.Println("| run | p50 | p99 |\n| --- | --- | --- |")
	for _, s := range []*series{&warm, &cold, &bw} {
		fmt.Printf("| %s | %s | %s |\n", s.name, ms(s.pct(0.5)), ms(s.pct(0.99)))
	}
	measured.warmAPI, measured.warmBwrapP50 = warm.pct(0.5), bw.pct(0.5)
	fmt.Printf("\nWarm p50 / bwrap whole-process p50: %.2f×.\n", float64(measured.warmAPI)/float64(measured.warmBwrapP50))
	if err := mcpBench(sock, n, idle, run); err != nil {
		return err
	}
	if err := sustained(c, tput); err != nil {
		return err
	}
	return sessionsHeld(c, 100)
}

// daemonBenchConfig is the daemon section's: a tool whose pool sizes
// itself (at least the 2 the interleaved runs wait for) and one without.
const daemonBenchConfig = "tools:\n  warm:\n    pool: {min: 2, max: 16}\n    command: [/bin/true]\n  cold: {limits: {memory: 128MiB, pids: 64}}\n"

// daemonRun returns a function that runs /bin/true of a tool through c.
func daemonRun(c *client.Client) func(tool string) error {
	return func(tool string) error {
		r, err := c.Run(context.Background(), api.RunRequest{Tool: tool, Argv: []string{"/bin/true"}})
		if err != nil {
			return err
		}
		if r.Outcome != result.Exited || r.ExitCode != 0 {
			return fmt.Errorf("run: %s %d %s", r.Outcome, r.ExitCode, r.Error)
		}
		return nil
	}
}

// minSustainedWindow is the shortest window the sustained runs are
// measured in. Each side's deferred kernel work (its namespaces' and
// cgroups' release) runs behind it, partly into the next side's window;
// in windows of 2.5 s bwrap's moved some 40–60 ms of CPU into the start of
// each of airlock's (docs/benchmarks.md, "The windows' length"), and a
// sustained rate should bill each side for its own.
const minSustainedWindow = 10 * time.Second

// sustained measures 4 clients in 4 windows of tput/4 (at least
// minSustainedWindow each), the pool refilling as they go, alternating
// with windows of bwrap 4 at a time; then, in a phase of its own (2 rounds of the same windows), the confined
// peer (bwrap taking a sandbox's confinement steps) 4 at a time,
// alternating with bwrap again. The confined peer is kept out of the
// target's windows: the work the kernel defers after its runs (its
// cgroups' release among it) lands in the windows that follow, and with
// its windows between them airlock's runs read 3–5 % dearer
// (docs/benchmarks.md, "The windows' length").
func sustained(c *client.Client, tput time.Duration) error {
	tput = max(tput, 4*minSustainedWindow)
	run := daemonRun(c)
	peer, closePeer, err := newConfinedPeer()
	if err != nil {
		return err
	}
	defer closePeer()
	bwrapLoad := func(d time.Duration) (int64, time.Duration, error) {
		n, el := bwrapParallel(d)
		return n, el, nil
	}
	var total int64
	var sched schedCount
	sides, err := windowsOf(tput, 4, func(d time.Duration) (int64, time.Duration, error) {
		before := readSched()
		n, took, err := fourAtOnce(d, func() error { return run("warm") })
		sched = sched.add(readSched().sub(before))
		total += n
		return n, took, err
	}, bwrapLoad)
	if err != nil {
		return err
	}
	air, bw := sides[0], sides[1]
	ps, _ := c.Pools(context.Background())
	peerSides, err := windowsOf(tput/2, 2, func(d time.Duration) (int64, time.Duration, error) {
		return fourAtOnce(d, peer.run)
	}, bwrapLoad)
	if err != nil {
		return err
	}
	conf, bw2 := peerSides[0], peerSides[1]
	measured.sustained, measured.sustainedBwrap = air.rate, bw.rate
	fmt.Printf("\nSustained, 4 clients in 4 windows of %s: **%.0f runs/s** (%d runs; pool hits %d, misses %d, built ahead %d, released or discarded unclaimed %d, whole section; the pool's target at the end %d: %s); bwrap 4 at once in the windows between: %.0f runs/s (%.2f×).\n", tput/4, air.rate, total, ps[0].Hits, ps[0].Misses, ps[0].Created, ps[0].Released+ps[0].Discarded+ps[0].Evicted, ps[0].Warm, ps[0].Reason, bw.rate, air.rate/bw.rate)
	fmt.Printf("bwrap taking a sandbox's confinement steps (its cgroup with the default limits made by airlock's code and removed, /proc masked and bound read-only as a sandbox's, airlock's seccomp filter, a /workspace tmpfs), 4 at once in 2 windows of %s after those, alternating with bwrap's (%.0f runs/s): %.0f runs/s; airlock / this peer, each against the bwrap windows beside it: %.2f×.\n", tput/4, bw2.rate, conf.rate, (air.rate/bw.rate)/(conf.rate/bw2.rate))
	fmt.Printf("The machine's CPU time per run (every process and kernel thread, /proc/stat): airlock %s, bwrap %s, the confined bwrap %s (bwrap beside it %s).\n", ms(air.cpu), ms(bw.cpu), ms(conf.cpu), ms(bw2.cpu))
	fmt.Printf("The machine's context switches per run: airlock %.0f, bwrap %.0f, the confined bwrap %.0f; its interprocessor interrupts (rescheduling, function calls, TLB shootdowns) per run: %.1f, %.1f, %.1f; the processors' time left idle: %.1f %%, %.1f %%, %.1f %%.\n", air.ctxt, bw.ctxt, conf.ctxt, air.ipis, bw.ipis, conf.ipis, 100*air.idle, 100*bw.idle, 100*conf.idle)
	fmt.Printf("This process (the daemon and its clients) per run through the API: %.1f goroutines started, about %.0f goroutines scheduled (the runtime times one in eight), about %.0f of them after waiting over 50 µs to run.\n\n", float64(sched.created)/float64(total), float64(sched.scheduled)/float64(total), float64(sched.late)/float64(total))
	return nil
}

// sustainedBench is the daemon section's sustained runs alone (-only
// sustained), for profiling.
func sustainedBench(tput time.Duration) error {
	c, _, stop, err := startDaemon(daemonBenchConfig)
	if err != nil {
		return err
	}
	defer stop()
	fmt.Println("## Sustained runs through the daemon (alone)")
	return sustained(c, tput)
}

// startDaemon runs a daemon of the configuration yaml in this process,
// on a private unix socket, and returns a Go client of it, the socket,
// and the function that stops it and removes its files.
func startDaemon(yaml string) (c *client.Client, sock string, stop func(), err error) {
	return startDaemonWith(yaml, nil)
}

// startDaemonWith is startDaemon with the runtime's options adjusted.
func startDaemonWith(yaml string, adjust func(*sandbox.Options)) (c *client.Client, sock string, stop func(), err error) {
	cfg, err := config.Parse("bench.yaml", []byte(yaml))
	if err != nil {
		return nil, "", nil, err
	}
	_, initPath, err := programs()
	if err != nil {
		return nil, "", nil, err
	}
	dir, err := os.MkdirTemp("", "airlock-bench-daemon")
	if err != nil {
		return nil, "", nil, err
	}
	sock = filepath.Join(dir, "airlock.sock")
	so := sandbox.Options{StateDir: "/run/airlock-bench", CgroupParent: "/airlock-bench", InitPath: initPath}
	if adjust != nil {
		adjust(&so)
	}
	d, err := daemon.New(context.Background(), daemon.Options{
		Config:    cfg,
		Socket:    sock,
		Sandbox:   so,
		AuditPath: filepath.Join(dir, "audit.db"),
		// Snapshots, of the sections that take them, go with the rest.
		SnapshotStore: filepath.Join(dir, "snapshots"),
	})
	if err != nil {
		os.RemoveAll(dir)
		return nil, "", nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Serve(ctx) }()
	return client.New(sock), sock, func() {
		cancel()
		<-done
		os.RemoveAll(dir)
	}, nil
}

// sessionsHeld opens k sessions (of the tool without a pool, so the warm
// pool's sandboxes are not counted), checks each answers, and reports the
// host memory they hold while idle.
func sessionsHeld(c *client.Client, k int) error {
	ctx := context.Background()
	settle()
	before := memUsed()
	var ids []string
	defer func() {
		for _, id := range ids {
			c.DeleteSession(ctx, id)
		}
	}()
	for range k {
		s, err := c.CreateSession(ctx, api.SessionRequest{Tool: "cold"})
		if err != nil {
			return err
		}
		ids = append(ids, s.ID)
	}
	for _, id := range ids {
		r, err := c.Exec(ctx, id, api.ExecRequest{Argv: []string{"/bin/true"}})
		if err != nil || r.Outcome != result.Exited || r.ExitCode != 0 {
			return fmt.Errorf("session %s: %+v %v", id, r, err)
		}
	}
	settle()
	per := float64(memUsed()-before) / float64(k) / (1 << 20)
	// What the daemon spends while they idle: its own watches (each
	// session's sockets are read every 50-100 ms while it holds any).
	const idleFor = 2 * time.Second
	cpu0 := processCPU()
	time.Sleep(idleFor)
	idleCPU := float64(processCPU()-cpu0) / float64(idleFor)
	fmt.Printf("%d sessions held at once, each having run a command and now idle: all answered; host memory **%.2f MiB per session** (sandbox, egress gateway and session state; used memory as in the idle footprint section); the daemon's CPU while they idle: %.1f %% of a processor.\n\n", k, per, 100*idleCPU)
	return nil
}

// processCPU is the CPU time this process has used, in user and kernel
// mode.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
