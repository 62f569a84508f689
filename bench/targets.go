package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// measured collects the figures the targets compare, as the sections
// measure them; zero means not measured in this run.
var measured struct {
	// Peers, measured in this run.
	bwrapP50, bwrapP99 time.Duration
	bwrapPar           float64 // runs/s, 4 parallel whole-process runs
	emptyGo            time.Duration
	// airlock.
	inprocP50, inprocP99 time.Duration
	runP50               time.Duration
	// The peers as each section measured them alongside airlock's own
	// figures (run by run, or window by window): every target compares
	// with these, so that a state of the machine one section leaves
	// behind (thousands of TIME_WAIT sockets after the egress section,
	// which make every network namespace's teardown slower) weighs on
	// both sides alike. Zero falls back to the peers measured first.
	runBwrapP50, runEmptyGo        time.Duration
	inprocBwrapP50, inprocBwrapP99 time.Duration
	tputBwrap, sustainedBwrap      float64
	warmBwrapP50                   time.Duration
	tput                           float64
	// The whole machine's CPU per sandbox and per bwrap run in the
	// throughput windows, and the cgroup step's alone (floors).
	tputCPU, tputBwrapCPU, cgroupCPU time.Duration
	warmAPI                          time.Duration
	mcpOver                          time.Duration
	mcpClient                        time.Duration // the clients' own share of mcpOver
	sustained                        float64
	version                          time.Duration
	idleMiB                          float64
	idleRan                          bool
	// The gvisor section: create → run → destroyed p50 on gVisor, with
	// runsc directly and on the namespace backend; sandboxes/s; a warm
	// run through the API on each backend.
	// gvOwn... are runsc's with a cgroup and a network namespace of its
	// own per sandbox (runscPeer.runOwn).
	gvCreate, gvRunscCreate, gvNSCreate, gvOwnCreate time.Duration
	gvTput, gvRunscTput, gvOwnTput                   float64
	gvWarm, gvNSWarm                                 time.Duration
	// gvSpawnFloor is the guest kernel's own start of /bin/true, one
	// after another; gvIdleSpawnFloor after as long idle as the warm
	// runs' pooled sandboxes.
	gvSpawnFloor, gvIdleSpawnFloor time.Duration
}

var peersOnce sync.Once

// peers measures the peers every target is relative to, once per run:
// bwrap's whole-process p50 and p99 over n sequential runs, bwrap's
// runs/s with 4 running at once for d, and an empty Go program.
func peers(n int, d time.Duration) error {
	var err error
	peersOnce.Do(func() { err = measurePeers(n, d) })
	return err
}

func measurePeers(n int, d time.Duration) error {
	if err := ensureBwrap(); err != nil {
		return err
	}
	empty, err := emptyProgram()
	if err != nil {
		return err
	}
	bw := bwrapArgv()
	if out, err := exec.Command(bw[0], bw[1:]...).CombinedOutput(); err != nil {
		return fmt.Errorf("bwrap: %v: %s", err, out)
	}
	seq, eg := &series{}, &series{}
	for range n {
		for _, c := range []struct {
			s    *series
			argv []string
		}{{seq, bw}, {eg, []string{empty}}} {
			start := time.Now()
			if err := exec.Command(c.argv[0], c.argv[1:]...).Run(); err != nil {
				return fmt.Errorf("%v: %v", c.argv, err)
			}
			c.s.d = append(c.s.d, time.Since(start))
		}
	}
	measured.bwrapP50, measured.bwrapP99, measured.emptyGo = seq.pct(0.5), seq.pct(0.99), eg.pct(0.5)
	done, el := bwrapParallel(d)
	measured.bwrapPar = float64(done) / el.Seconds()
	fmt.Printf("## Peers, measured in this run\n\n| peer | figure |\n| --- | --- |\n")
	fmt.Printf("| `bwrap --unshare-all … /bin/true`, whole process, %d runs | p50 %s, p99 %s |\n", n, ms(measured.bwrapP50), ms(measured.bwrapP99))
	fmt.Printf("| the same, 4 running at once for %s | %.0f runs/s |\n", d, measured.bwrapPar)
	fmt.Printf("| an empty Go program (`func main() {}`, static) | p50 %s |\n\n", ms(measured.emptyGo))
	return nil
}

// bwrapOnce times one whole-process bwrap run of /bin/true.
func bwrapOnce() (time.Duration, error) {
	bw := bwrapArgv()
	start := time.Now()
	if err := exec.Command(bw[0], bw[1:]...).Run(); err != nil {
		return 0, fmt.Errorf("bwrap: %v", err)
	}
	return time.Since(start), nil
}

// bwrapParallel runs bwrap's /bin/true 4 at a time for d and returns how
// many runs ended and in how long.
func bwrapParallel(d time.Duration) (int64, time.Duration) {
	bw := bwrapArgv()
	n, took, _ := fourAtOnce(d, func() error {
		_ = exec.Command(bw[0], bw[1:]...).Run()
		return nil
	})
	return n, took
}

// fourAtOnce calls fn on 4 goroutines, each again and again until d has
// passed, and returns how many calls succeeded and in how long. An error
// stops its goroutine, and the first is returned once all have stopped.
func fourAtOnce(d time.Duration, fn func() error) (int64, time.Duration, error) {
	var done atomic.Int64
	var wg sync.WaitGroup
	var firstErr atomic.Value
	start := time.Now()
	stop := start.Add(d)
	for range 4 {
		wg.Go(func() {
			for time.Now().Before(stop) {
				if err := fn(); err != nil {
					firstErr.CompareAndSwap(nil, err)
					return
				}
				done.Add(1)
			}
		})
	}
	wg.Wait()
	if err, _ := firstErr.Load().(error); err != nil {
		return 0, 0, err
	}
	return done.Load(), time.Since(start), nil
}

// windowsCPU alternates k windows of airlock's load (own) with k of
// bwrap's 4-parallel runs, each of d/k, and returns both rates in runs/s
// (the two see the same machine, a window apart), and the whole machine's
// CPU time (every process and kernel thread, from /proc/stat) per run on
// each side: what a run costs wherever its work lands.
func windowsCPU(d time.Duration, k int, own func(time.Duration) (int64, time.Duration, error)) (air, bw float64, airCPU, bwCPU time.Duration, err error) {
	sides, err := windowsOf(d, k, own, func(d time.Duration) (int64, time.Duration, error) {
		n, el := bwrapParallel(d)
		return n, el, nil
	})
	if err != nil {
		return 0, 0, 0, 0, err
	}
	return sides[0].rate, sides[1].rate, sides[0].cpu, sides[1].cpu, nil
}

// window is one load's share of windowsOf: its rate in runs/s, per run
// the whole machine's CPU time, context switches and interprocessor
// interrupts, and the share of the processors' time left idle.
type window struct {
	rate       float64
	cpu        time.Duration
	ctxt, ipis float64
	idle       float64
}

// windowsOf runs k rounds of the loads, each a window of d/k in turn, and
// returns each load's rate and its machine counters per run over its
// windows.
func windowsOf(d time.Duration, k int, loads ...func(time.Duration) (int64, time.Duration, error)) ([]window, error) {
	n := make([]int64, len(loads))
	el := make([]time.Duration, len(loads))
	sum := make([]machineCount, len(loads))
	for range k {
		for i, load := range loads {
			c0 := readMachine()
			runs, took, err := load(d / time.Duration(k))
			if err != nil {
				return nil, err
			}
			n[i], el[i], sum[i] = n[i]+runs, el[i]+took, sum[i].add(readMachine().sub(c0))
		}
	}
	out := make([]window, len(loads))
	for i := range loads {
		runs := max(n[i], 1)
		out[i] = window{rate: float64(n[i]) / el[i].Seconds(), cpu: sum[i].busy / time.Duration(runs),
			ctxt: float64(sum[i].ctxt) / float64(runs), ipis: float64(sum[i].ipis) / float64(runs),
			idle: max(0, 1-float64(sum[i].busy)/(float64(el[i])*float64(runtime.NumCPU())))}
	}
	return out, nil
}

// machineCount is what the whole machine has done: its busy CPU time
// (machineBusy), its context switches (/proc/stat's ctxt) and the
// interprocessor interrupts its processors took (/proc/interrupts'
// rescheduling, function call and TLB shootdown lines: in a VM each is
// an exit to the hypervisor, a cost no process's CPU time shows whole).
type machineCount struct {
	busy       time.Duration
	ctxt, ipis int64
}

func (a machineCount) add(b machineCount) machineCount {
	return machineCount{a.busy + b.busy, a.ctxt + b.ctxt, a.ipis + b.ipis}
}

func (a machineCount) sub(b machineCount) machineCount {
	return machineCount{a.busy - b.busy, a.ctxt - b.ctxt, a.ipis - b.ipis}
}

func readMachine() machineCount {
	m := machineCount{busy: machineBusy()}
	if b, err := os.ReadFile("/proc/stat"); err == nil {
		for line := range strings.Lines(string(b)) {
			if v, ok := strings.CutPrefix(line, "ctxt "); ok {
				m.ctxt, _ = strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			}
		}
	}
	if b, err := os.ReadFile("/proc/interrupts"); err == nil {
		for line := range strings.Lines(string(b)) {
			f := strings.Fields(line)
			if len(f) == 0 || (f[0] != "RES:" && f[0] != "CAL:" && f[0] != "TLB:") {
				continue
			}
			for _, c := range f[1:] {
				v, err := strconv.ParseInt(c, 10, 64)
				if err != nil {
					break // the description after the counts
				}
				m.ipis += v
			}
		}
	}
	return m
}

// machineBusy is the CPU time the whole machine has spent on anything
// but idle and waiting for I/O, from the first line of /proc/stat (in
// USER_HZ ticks, 100 per second on Linux).
func machineBusy() time.Duration {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	var ticks int64
	for i, f := range strings.Fields(line)[1:] {
		if i == 3 || i == 4 { // idle, iowait
			continue
		}
		v, _ := strconv.ParseInt(f, 10, 64)
		ticks += v
	}
	return time.Duration(ticks) * 10 * time.Millisecond
}

// or returns v, or fallback when v is zero.
func or[T time.Duration | float64](v, fallback T) T {
	if v == 0 {
		return fallback
	}
	return v
}

// emptyProgram builds a static Go program that does nothing.
func emptyProgram() (string, error) {
	return helperProgram("empty", "./bench/internal/truebin")
}

// helperProgram builds the static Go program pkg as name, beside the
// programs under test.
func helperProgram(name, pkg string) (string, error) {
	air, _, err := programs()
	if err != nil {
		return "", err
	}
	p := filepath.Join(filepath.Dir(air), name)
	build := exec.Command("go", "build", "-trimpath", "-o", p, pkg)
	build.Env = append(build.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build %s: %v: %s", pkg, err, out)
	}
	return p, nil
}

// printTargets prints every target measured in this run, as the ratio the
// performance issue sets, with its verdict.
func printTargets() {
	m := measured
	if m.bwrapP50 == 0 {
		return
	}
	type row struct {
		name, got, want string
		ok, have        bool
	}
	ratio := func(a, b time.Duration) float64 { return float64(a) / float64(b) }
	bwP50, bwP99 := or(m.inprocBwrapP50, m.bwrapP50), or(m.inprocBwrapP99, m.bwrapP99)
	tputBw, sustBw, warmBw := or(m.tputBwrap, m.bwrapPar), or(m.sustainedBwrap, m.bwrapPar), or(m.warmBwrapP50, m.bwrapP50)
	rows := []row{
		{"1. in process create → run → destroyed, p50 (p99)", fmt.Sprintf("%.2f× (%.2f×) bwrap", ratio(m.inprocP50, bwP50), ratio(m.inprocP99, bwP99)), "≤ 1.0× (≤ 2.0×)",
			ratio(m.inprocP50, bwP50) <= 1 && ratio(m.inprocP99, bwP99) <= 2, m.inprocP50 > 0},
		{"2. `airlock run -- /bin/true`, p50", fmt.Sprintf("%.2f× bwrap", ratio(m.runP50, m.runBwrapP50)), "≤ 2.0×", ratio(m.runP50, m.runBwrapP50) <= 2, m.runP50 > 0},
		{"3. fresh sandboxes/s, 4 workers", fmt.Sprintf("%.2f× bwrap's 4-parallel runs/s", m.tput/tputBw), "≥ 1.0×", m.tput >= tputBw, m.tput > 0},
		{"4. warm run through the API, p50", fmt.Sprintf("%.2f× bwrap", ratio(m.warmAPI, warmBw)), "≤ 0.5×", ratio(m.warmAPI, warmBw) <= 0.5, m.warmAPI > 0},
		{"5. MCP tools/call over the API, p50", fmt.Sprintf("%s (the clients' own: %s)", ms(m.mcpOver), ms(m.mcpClient)), "≤ 0.30 ms", m.mcpOver <= 300*time.Microsecond, m.mcpOver != 0},
		{"6. sustained API runs/s, 4 clients", fmt.Sprintf("%.2f× bwrap's 4-parallel runs/s", m.sustained/sustBw), "≥ 0.9×", m.sustained >= 0.9*sustBw, m.sustained > 0},
		{"7. `airlock version`, p50", fmt.Sprintf("%.2f× an empty Go program", ratio(m.version, m.runEmptyGo)), "≤ 2.0×", ratio(m.version, m.runEmptyGo) <= 2, m.version > 0},
		{"8. idle warm sandbox", fmt.Sprintf("%.2f MiB", m.idleMiB), "≤ 0.75 MiB", m.idleMiB <= 0.75, m.idleRan},
	}
	fmt.Printf("\n## Targets\n\n| target | measured | wanted | |\n| --- | --- | --- | --- |\n")
	for _, r := range rows {
		if !r.have {
			continue
		}
		verdict := "met"
		if !r.ok {
			verdict = "**not met**"
		}
		if r.name[0] == '8' && m.idleMiB <= 0 {
			// The host's used memory fell while the sandboxes were
			// made (something else freed memory): no reading.
			r.got += " (host memory fell meanwhile)"
			verdict = "**no reading**"
		}
		fmt.Printf("| %s | %s | %s | %s |\n", r.name, r.got, r.want, verdict)
	}
	if m.tputCPU > 0 && m.tputBwrapCPU > 0 && m.cgroupCPU > 0 {
		// Target 3 is a matter of CPU: the machine is saturated either
		// way. What a sandbox costs less the one step bwrap does not take
		// at all, measured alone in this run.
		less := m.tputCPU - m.cgroupCPU
		fmt.Printf("\nTarget 3 by CPU: a sandbox cost the machine %s, a bwrap run %s (%.2f×); the cgroup step alone (made, opened, read, removed; this process's CPU, its kernel threads' release work not counted) %s, and a sandbox less it %s (%.2f× a bwrap run).\n",
			ms(m.tputCPU), ms(m.tputBwrapCPU), float64(m.tputCPU)/float64(m.tputBwrapCPU), ms(m.cgroupCPU), ms(less), float64(less)/float64(m.tputBwrapCPU))
	}
}
