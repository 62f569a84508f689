package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/internal/gvisor"
	"github.com/airlockhq/airlock/internal/linux/cgroup"
	"github.com/airlockhq/airlock/internal/linux/forkexec"
	"github.com/airlockhq/airlock/internal/linux/netns"
	"github.com/airlockhq/airlock/result"
	"github.com/airlockhq/airlock/sandbox"
	"golang.org/x/sys/unix"
)

// gvisorBench prices the gvisor isolation backend, in one run: create →
// run /bin/true → destroyed on both backends and with runsc driven
// directly (the same flags and bundle shape, one `runsc run` of
// /bin/true; and the same again in a cgroup and a network namespace of
// its own, as the four rules make airlock's sandboxes), interleaved; fresh sandboxes/s with 4 workers, in
// alternating windows; a warm run through the API on a tool of each
// backend, interleaved; and the host memory an idle sandbox holds, for
// each and for a detached runsc container.
func gvisorBench(n int, d time.Duration, idle int, runscFlag, side string) error {
	runsc, err := gvisor.Find(runscFlag)
	if err != nil {
		return fmt.Errorf("gvisor section: %w", err)
	}
	_, initPath, err := programs()
	if err != nil {
		return err
	}
	ctx := context.Background()
	rt, err := sandbox.New(ctx, sandbox.Options{StateDir: "/run/airlock-bench", CgroupParent: "/airlock-bench", InitPath: initPath, Runsc: runsc})
	if err != nil {
		return err
	}
	defer rt.Close()
	peer, err := newRunscPeer(runsc)
	if err != nil {
		return err
	}
	defer peer.close()
	lim := sandbox.DefaultLimits()
	one := func(iso string) func() error {
		return func() error {
			sb, err := rt.Start(ctx, sandbox.Spec{Limits: lim, Isolation: iso, OneCommand: true})
			if err != nil {
				return err
			}
			r := sb.Exec(ctx, sandbox.ExecRequest{Argv: []string{"/bin/true"}})
			if err := sb.Destroy(ctx); err != nil {
				return err
			}
			if r.Outcome != result.Exited || r.ExitCode != 0 {
				return fmt.Errorf("run: %s %d %s", r.Outcome, r.ExitCode, r.Error)
			}
			return nil
		}
	}
	cases := []struct {
		s  *series
		fn func() error
	}{
		{&series{name: "airlock, isolation gvisor"}, one(sandbox.IsolationGVisor)},
		{&series{name: "runsc driven directly (`runsc run` of the same bundle shape)"}, peer.run},
		{&series{name: "airlock, isolation namespaces (the default)"}, one("")},
		{&series{name: "runsc driven directly, each in a cgroup and a network namespace of its own (what the four rules add)"}, peer.runOwn},
	}
	if side != "" {
		return gvisorSide(side, d, map[string]func() error{"airlock": cases[0].fn, "runsc": cases[1].fn, "own": cases[3].fn})
	}
	for _, c := range cases {
		if err := c.fn(); err != nil { // warm up, and fail early
			return fmt.Errorf("%s: %w", c.s.name, err)
		}
	}
	for range n {
		for _, c := range cases {
			start := time.Now()
			if err := c.fn(); err != nil {
				return fmt.Errorf("%s: %w", c.s.name, err)
			}
			c.s.d = append(c.s.d, time.Since(start))
		}
	}
	gv, rs, ns, own := cases[0].s, cases[1].s, cases[2].s, cases[3].s
	fmt.Printf("\n## gVisor backend\n\nrunsc %s (%s), platform systrap, no KVM.\n\n", gvisor.Version(runsc), runsc)
	fmt.Printf("### Create → run /bin/true → destroyed (%d of each, interleaved)\n\n| | p50 | p99 | p50 / runsc directly |\n| --- | --- | --- | --- |\n", n)
	for _, s := range []*series{gv, rs, ns, own} {
		fmt.Printf("| %s | %s | %s | %.2f× |\n", s.name, ms(s.pct(0.5)), ms(s.pct(0.99)), float64(s.pct(0.5))/float64(rs.pct(0.5)))
	}
	measured.gvCreate, measured.gvRunscCreate, measured.gvNSCreate, measured.gvOwnCreate = gv.pct(0.5), rs.pct(0.5), ns.pct(0.5), own.pct(0.5)

	// Throughput: 4 workers, windows alternating between the gVisor
	// sides and the namespace backend.
	var loads []func(time.Duration) (int64, time.Duration, error)
	for _, c := range cases {
		loads = append(loads, func(d time.Duration) (int64, time.Duration, error) { return fourAtOnce(d, c.fn) })
	}
	sides, err := windowsOf(d, 4, loads...)
	if err != nil {
		return err
	}
	measured.gvTput, measured.gvRunscTput, measured.gvOwnTput = sides[0].rate, sides[1].rate, sides[3].rate
	fmt.Printf("\n### Fresh sandboxes per second, 4 workers (4 windows of %s each, alternating)\n\n| | sandboxes/s | / runsc directly | machine CPU per sandbox |\n| --- | --- | --- | --- |\n", d/4)
	for i, c := range cases {
		fmt.Printf("| %s | %.1f | %.2f× | %s |\n", c.s.name, sides[i].rate, sides[i].rate/sides[1].rate, ms(sides[i].cpu))
	}

	if err := gvisorWarmAPI(runsc, max(n, 50), peer); err != nil {
		return err
	}
	if err := gvisorIdle(ctx, rt, lim, peer, idle); err != nil {
		return err
	}
	m := measured
	fmt.Printf("\n### gVisor targets\n\n| target | measured | wanted | |\n| --- | --- | --- | --- |\n")
	for _, r := range []struct {
		name, got, want string
		ok              bool
	}{
		{"create → run → destroyed, p50", fmt.Sprintf("%.2f× runsc directly (%.2f× runsc with a cgroup and a network namespace of its own)", float64(m.gvCreate)/float64(m.gvRunscCreate), float64(m.gvCreate)/float64(m.gvOwnCreate)), "≤ 1.0×", m.gvCreate <= m.gvRunscCreate},
		{"fresh sandboxes/s, 4 workers", fmt.Sprintf("%.2f× runsc directly (%.2f× runsc with a cgroup and a network namespace of its own)", m.gvTput/m.gvRunscTput, m.gvTput/m.gvOwnTput), "≥ 1.0×", m.gvTput >= m.gvRunscTput},
		{"warm run through the API, p50", fmt.Sprintf("%.2f× isolation namespaces (the guest's own start of /bin/true alone: %.2f× in a sandbox as idle, %.2f× in a busy one)", float64(m.gvWarm)/float64(m.gvNSWarm), float64(m.gvIdleSpawnFloor)/float64(m.gvNSWarm), float64(m.gvSpawnFloor)/float64(m.gvNSWarm)), "≤ 2.0×", m.gvWarm <= 2*m.gvNSWarm},
	} {
		verdict := "met"
		if !r.ok {
			verdict = "**not met**"
		}
		fmt.Printf("| %s | %s | %s | %s |\n", r.name, r.got, r.want, verdict)
	}
	fmt.Printf("\nThe price of the stronger boundary: create → run → destroyed %.1f×, a warm run through the API %.1f× the namespace backend's.\n",
		float64(m.gvCreate)/float64(m.gvNSCreate), float64(m.gvWarm)/float64(m.gvNSWarm))
	return nil
}

// gvisorSide loads one side of the comparison alone for d, 4 workers,
// and prints its rate and the machine's CPU per sandbox: a profiler run
// beside it (perf record -a) sees that side's work alone.
func gvisorSide(side string, d time.Duration, sides map[string]func() error) error {
	fn, ok := sides[side]
	if !ok {
		return fmt.Errorf("-gvisor-side %q: want airlock, runsc or own", side)
	}
	if err := fn(); err != nil {
		return err
	}
	w, err := windowsOf(d, 1, func(d time.Duration) (int64, time.Duration, error) { return fourAtOnce(d, fn) })
	if err != nil {
		return err
	}
	fmt.Printf("%s: %.1f sandboxes/s; per sandbox, machine CPU %s, %.0f context switches, %.0f interprocessor interrupts\n", side, w[0].rate, ms(w[0].cpu), w[0].ctxt, w[0].ipis)
	return nil
}

// gvisorWarmAPI times a warm run through the API on a tool of each
// backend, interleaved.
func gvisorWarmAPI(runsc string, n int, peer *runscPeer) error {
	c, _, stop, err := startDaemonWith(`
tools:
  ns: {pool: {warm: 4}}
  gv: {isolation: gvisor, pool: {warm: 4}}
`, func(o *sandbox.Options) { o.Runsc = runsc })
	if err != nil {
		return err
	}
	defer stop()
	ctx := context.Background()
	run := func(tool string) (time.Duration, error) {
		start := time.Now()
		r, err := c.Run(ctx, api.RunRequest{Tool: tool, Argv: []string{"/bin/true"}})
		if err != nil {
			return 0, err
		}
		if r.Outcome != result.Exited || r.ExitCode != 0 {
			return 0, fmt.Errorf("%s: %s %d %s", tool, r.Outcome, r.ExitCode, r.Error)
		}
		return time.Since(start), nil
	}
	waitWarm := func() {
		// The pools refill between runs: each run is a warm claim.
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
			ps, err := c.Pools(ctx)
			if err != nil {
				return
			}
			full := true
			for _, p := range ps {
				full = full && p.Idle >= 4
			}
			if full {
				return
			}
		}
	}
	var hitsBefore int64
	gv, ns := &series{name: "tool with isolation gvisor"}, &series{name: "tool with isolation namespaces"}
	// How long the gvisor sandbox a run claims had been idle: the pool
	// hands out its oldest (first in, first out), so with warm: 4 the
	// sandbox made after run k's claim is run k+4's, and it was ready
	// when the wait for full pools after run k returned (give or take
	// the wait's 5 ms).
	var readyAt []time.Time
	idled := &series{}
	for i := range n + 2 {
		for _, s := range []struct {
			tool string
			s    *series
		}{{"gv", gv}, {"ns", ns}} {
			waitWarm()
			if s.tool == "ns" {
				readyAt = append(readyAt, time.Now())
			} else if i >= 4 {
				idled.d = append(idled.d, time.Since(readyAt[i-4]))
			}
			d, err := run(s.tool)
			if err != nil {
				return err
			}
			if i >= 2 { // the first are warm-up
				s.s.d = append(s.s.d, d)
			}
		}
	}
	ps, _ := c.Pools(ctx)
	var misses int64
	for _, p := range ps {
		misses += p.Misses
		hitsBefore += p.Hits
	}
	// The floor: the guest kernel's own start of /bin/true (fork, exec,
	// wait) in a runsc container, timed inside it by spawnfloor, at once
	// after another and after as long idle as the pool's sandboxes were
	// when claimed. Idle, the guest's threads sleep and take longer to
	// wake (this VM's idle processors above all); a warm pool's sandbox
	// is always idle when claimed.
	idle := idled.pct(0.5).Round(10 * time.Millisecond)
	hot, err := peer.spawn(0, 20)
	if err != nil {
		return err
	}
	hot.name = "floor: the guest kernel starting /bin/true and seeing it end, timed inside a runsc container, one start after another"
	slept, err := peer.spawn(idle, 20)
	if err != nil {
		return err
	}
	slept.name = fmt.Sprintf("floor: the same, each start after %s idle (the pool's sandboxes' idle time when claimed, p50)", ms(idle))
	measured.gvWarm, measured.gvNSWarm = gv.pct(0.5), ns.pct(0.5)
	measured.gvSpawnFloor, measured.gvIdleSpawnFloor = hot.pct(0.5), slept.pct(0.5)
	fmt.Printf("\n### Warm run through the API (%d each, interleaved; the pools refilled before each run: %d hits, %d misses)\n\n| | p50 | p99 | p50 / namespaces |\n| --- | --- | --- | --- |\n", n, hitsBefore, misses)
	for _, s := range []*series{gv, ns, hot, slept} {
		fmt.Printf("| %s | %s | %s | %.2f× |\n", s.name, ms(s.pct(0.5)), ms(s.pct(0.99)), float64(s.pct(0.5))/float64(ns.pct(0.5)))
	}
	return nil
}

// gvisorIdle measures the memory k idle sandboxes hold, per sandbox, for
// each backend and for runsc's own detached containers: the proportional
// set size (shared pages divided among their users, the guest's memory
// file included) of every process of each, summed, and the host's used
// memory as in the idle footprint section.
func gvisorIdle(ctx context.Context, rt *sandbox.Runtime, lim sandbox.Limits, peer *runscPeer, k int) error {
	held := func(hold func() ([]int, func(), error)) (pss, used float64, err error) {
		settle()
		before := memUsed()
		var undo []func()
		var roots [][]int
		defer func() {
			for _, u := range undo {
				u()
			}
		}()
		for range k {
			r, u, err := hold()
			if err != nil {
				return 0, 0, err
			}
			undo, roots = append(undo, u), append(roots, r)
		}
		settle()
		used = float64(memUsed()-before) / float64(k) / (1 << 20)
		var sum int64
		for _, r := range roots {
			for _, pid := range descendants(r) {
				sum += pssOf(pid)
			}
		}
		return float64(sum) / float64(k) / (1 << 20), used, nil
	}
	sb := func(iso string) func() ([]int, func(), error) {
		return func() ([]int, func(), error) {
			s, err := rt.Create(ctx, sandbox.Spec{Limits: lim, Isolation: iso})
			if err != nil {
				return nil, nil, err
			}
			return []int{s.InitPid()}, func() { s.Destroy(ctx) }, nil
		}
	}
	gvP, gvU, err := held(sb(sandbox.IsolationGVisor))
	if err != nil {
		return err
	}
	rsP, rsU, err := held(peer.hold)
	if err != nil {
		return err
	}
	nsP, nsU, err := held(sb(""))
	if err != nil {
		return err
	}
	fmt.Printf("\n### Idle memory (%d held at once)\n\nPSS: the proportional set size of every process of each sandbox (shared pages divided among the processes that map them; gVisor's guest memory file included), summed. Used: the host's used memory as in the idle footprint section (page cache and shared memory, the guest's memory file among it, left out).\n\n| | PSS MiB per sandbox | / runsc directly | used MiB per sandbox |\n| --- | --- | --- | --- |\n", k)
	fmt.Printf("| airlock, isolation gvisor (runsc, sentry, gofer; init in the guest) | %.2f | %.2f× | %.2f |\n", gvP, gvP/rsP, gvU)
	fmt.Printf("| runsc directly, a detached container running `sleep` (sentry, gofer) | %.2f | 1.00× | %.2f |\n", rsP, rsU)
	fmt.Printf("| airlock, isolation namespaces (init) | %.2f | %.2f× | %.2f |\n", nsP, nsP/rsP, nsU)
	return nil
}

// descendants are the pids of roots and of every process below them.
func descendants(roots []int) []int {
	children := map[int][]int{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: the comm may hold spaces.
		rest := b[bytes.LastIndexByte(b, ')')+2:]
		f := strings.Fields(string(rest))
		if len(f) > 1 {
			ppid, _ := strconv.Atoi(f[1])
			children[ppid] = append(children[ppid], pid)
		}
	}
	var out []int
	queue := append([]int{}, roots...)
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		out = append(out, p)
		queue = append(queue, children[p]...)
	}
	return out
}

// pssOf is a process's proportional set size in bytes (0 when gone).
func pssOf(pid int) int64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/smaps_rollup")
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "Pss:"); ok {
			f := strings.Fields(v)
			if len(f) > 0 {
				n, _ := strconv.ParseInt(f[0], 10, 64)
				return n << 10
			}
		}
	}
	return 0
}

// runscPeer drives runsc directly: a bundle as airlock's (the host's
// system directories bound read-only by runsc's gofer, a generated /etc,
// the sandbox's ids mapped onto a range of their own, a network namespace
// of its own with only lo, joined with runsc's host network), run with
// airlock's runsc flags.
type runscPeer struct {
	runsc, dir, netns string
	seq               atomic.Int64
	// groups is the parent of runOwn's cgroups.
	groups *cgroup.Parent
}

func newRunscPeer(runsc string) (*runscPeer, error) {
	dir, err := os.MkdirTemp("", "airlock-bench-runsc")
	if err != nil {
		return nil, err
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		return nil, err
	}
	p := &runscPeer{runsc: runsc, dir: dir, netns: "airlock-bench-runsc"}
	build := exec.Command("go", "build", "-trimpath", "-o", filepath.Join(dir, "spawnfloor"), "./bench/internal/spawnfloor")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("build spawnfloor: %v: %s", err, out)
	}
	if out, err := exec.Command("ip", "netns", "add", p.netns).CombinedOutput(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("ip netns add: %v: %s", err, out)
	}
	exec.Command("ip", "-n", p.netns, "link", "set", "lo", "up").Run()
	for _, b := range []struct {
		name string
		args []string
	}{
		{"true", []string{"/bin/true"}},
		{"sleep", []string{"/bin/sleep", "3600"}},
	} {
		if err := p.bundle(b.name, b.args); err != nil {
			p.close()
			return nil, err
		}
	}
	// The same /bin/true in a network namespace passed as runsc's fd 3
	// (see runOwn).
	if err := p.bundleIn("own", "/proc/self/fd/3", []string{"/bin/true"}); err != nil {
		p.close()
		return nil, err
	}
	if p.groups, err = cgroup.Open("/airlock-bench-runsc"); err != nil {
		p.close()
		return nil, err
	}
	return p, nil
}

// runOwn is run with what the four rules make airlock add to every
// sandbox and runsc driven directly leaves out (--ignore-cgroups, one
// network namespace for all): a cgroup of its own with the sandbox's
// limits, which runsc is born in (its sentry and gofer with it), and a
// network namespace of its own (lo up), both made before and removed
// after. It is the peer airlock's create would be measured against if
// it did no more than the rules ask.
func (p *runscPeer) runOwn() error {
	lim := sandbox.DefaultLimits()
	g, err := p.groups.Create("runsc-"+strconv.FormatInt(p.seq.Add(1), 10), cgroup.Limits{MemoryBytes: lim.Memory, Pids: lim.Pids, CPUMilli: lim.CPUMilli})
	if err != nil {
		return err
	}
	defer func() {
		// runsc has reaped its sentry and gofer before it exits; what
		// is left if not is killed, within bounds.
		if !g.TryDelete() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_ = g.Kill(ctx)
			_ = g.Delete(ctx)
		}
	}()
	ns, err := netns.New()
	if err != nil {
		return err
	}
	defer ns.Close()
	null, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer null.Close()
	sp := forkexec.Spec{Path: p.runsc, Argv: append([]string{gvisor.Name}, p.argv("own")...),
		Env:   []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"},
		Files: []int{int(null.Fd()), int(null.Fd()), int(null.Fd()), int(ns.Fd())},
		UID:   -1, GID: -1, CgroupFD: -1, DefaultSignals: true}
	if g.Version() == cgroup.V2 {
		fd, err := g.DirFD()
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		sp.CgroupFD = fd
	} else {
		tasks, err := g.TasksFDs()
		if err != nil {
			return err
		}
		defer func() {
			for _, fd := range tasks {
				unix.Close(fd)
			}
		}()
		sp.CgroupTasks = tasks
	}
	child, err := forkexec.Start(sp)
	if err != nil {
		return fmt.Errorf("runsc run: %w", err)
	}
	defer unix.Close(child.PidFD)
	var ws unix.WaitStatus
	for {
		_, err := unix.Wait4(child.Pid, &ws, 0, nil)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return fmt.Errorf("runsc run: wait: %w", err)
		}
		break
	}
	if !ws.Exited() || ws.ExitStatus() != 0 {
		return fmt.Errorf("runsc run: wait status %#x", ws)
	}
	return nil
}

// spawnFloorPath is where the spawn bundle has bench/internal/spawnfloor.
const spawnFloorPath = "/spawnfloor"

func (p *runscPeer) bundle(name string, args []string) error {
	return p.bundleIn(name, "/run/netns/"+p.netns, args)
}

// bundleIn is bundle with the container in the network namespace at
// netns.
func (p *runscPeer) bundleIn(name, netns string, args []string) error {
	bdir := filepath.Join(p.dir, name)
	root := filepath.Join(bdir, "root")
	c := gvisor.Container{
		Root: root, Cwd: "/", Env: []string{"PATH=/usr/bin:/bin"},
		Args:     args,
		Hostname: "sandbox", IDBase: 3 << 30, IDSize: 65536,
		NetNS:   netns,
		Rlimits: []gvisor.Rlimit{{Type: "RLIMIT_NOFILE", Soft: 1024, Hard: 1024}},
	}
	for _, d := range []string{"proc", "dev", "sys", "tmp", "workspace", "etc"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			return err
		}
	}
	for _, l := range []string{"/bin", "/lib", "/lib64", "/sbin"} {
		if t, err := os.Readlink(l); err == nil {
			os.Symlink(t, filepath.Join(root, l))
		}
	}
	if err := os.WriteFile(filepath.Join(root, "etc/passwd"), []byte("root:x:0:0::/:/bin/sh\n"), 0o644); err != nil {
		return err
	}
	for _, d := range []string{"/usr", "/bin", "/lib", "/lib64", "/sbin"} {
		if fi, err := os.Lstat(d); err == nil && fi.IsDir() {
			os.MkdirAll(filepath.Join(root, d), 0o755)
			c.Mounts = append(c.Mounts, gvisor.Mount{Destination: d, Source: d, Type: "bind", ReadOnly: true})
		}
	}
	if args[0] == spawnFloorPath {
		if err := os.WriteFile(filepath.Join(root, spawnFloorPath), nil, 0o755); err != nil {
			return err
		}
		c.Mounts = append(c.Mounts, gvisor.Mount{Destination: spawnFloorPath, Source: filepath.Join(p.dir, "spawnfloor"), Type: "bind", ReadOnly: true})
	}
	c.Mounts = append(c.Mounts, gvisor.Mount{Destination: "/proc", Type: "proc", Source: "proc"},
		gvisor.Mount{Destination: "/tmp", Type: "tmpfs", Source: "tmpfs", Options: []string{"size=256m"}},
		gvisor.Mount{Destination: "/workspace", Type: "tmpfs", Source: "tmpfs", Options: []string{"size=256m"}})
	b, err := c.Config()
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(bdir, "config.json"), b, 0o644)
}

func (p *runscPeer) argv(bundle string, extra ...string) []string {
	id := "bench-" + strconv.FormatInt(p.seq.Add(1), 10)
	a := append(gvisor.Flags(filepath.Join(p.dir, "state")), "run")
	a = append(a, extra...)
	return append(a, "--bundle", filepath.Join(p.dir, bundle), id)
}

// run is one `runsc run` of /bin/true: created, run, deleted.
func (p *runscPeer) run() error {
	if out, err := exec.Command(p.runsc, p.argv("true")...).CombinedOutput(); err != nil {
		return fmt.Errorf("runsc run: %v: %s", err, out)
	}
	return nil
}

// spawn runs spawnfloor in a container of its own: n starts of /bin/true
// timed by the guest, each after idle.
func (p *runscPeer) spawn(idle time.Duration, n int) (*series, error) {
	if err := p.bundle("spawn", []string{spawnFloorPath, "-n", strconv.Itoa(n), "-idle", idle.String()}); err != nil {
		return nil, err
	}
	out, err := exec.Command(p.runsc, p.argv("spawn")...).Output()
	if err != nil {
		return nil, fmt.Errorf("runsc run: %v", err)
	}
	s := &series{}
	for _, l := range strings.Fields(string(out)) {
		ns, err := strconv.ParseInt(l, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("runsc run: spawnfloor said %q", out)
		}
		s.d = append(s.d, time.Duration(ns))
	}
	if len(s.d) != n {
		return nil, fmt.Errorf("runsc run: spawnfloor said %q", out)
	}
	return s, nil
}

// hold starts a detached container running sleep, and returns its
// processes' roots (runsc's sandbox and gofer processes) and what deletes
// it.
func (p *runscPeer) hold() ([]int, func(), error) {
	a := p.argv("sleep", "--detach")
	id := a[len(a)-1]
	// No pipes: the detached container keeps runsc's standard streams
	// (its own), and a pipe would never end.
	cmd := exec.Command(p.runsc, a...)
	if err := cmd.Run(); err != nil {
		return nil, nil, fmt.Errorf("runsc run --detach: %v", err)
	}
	var roots []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil {
			continue
		}
		args := strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
		if len(args) > 1 && args[len(args)-1] == id && (args[0] == "runsc-sandbox" || args[0] == "runsc-gofer") {
			pid, _ := strconv.Atoi(e.Name())
			roots = append(roots, pid)
		}
	}
	if len(roots) == 0 {
		return nil, nil, fmt.Errorf("runsc run --detach: no process of container %s", id)
	}
	return roots, func() {
		exec.Command(p.runsc, append(gvisor.Flags(filepath.Join(p.dir, "state")), "delete", "--force", id)...).Run()
	}, nil
}

func (p *runscPeer) close() {
	if p.groups != nil {
		p.groups.Close()
	}
	exec.Command("ip", "netns", "del", p.netns).Run()
	exec.Command("umount", "-l", filepath.Join(p.dir, "state", "null-netns")).Run()
	os.RemoveAll(p.dir)
}
