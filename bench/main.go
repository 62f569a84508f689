// Command bench measures airlock against its peers, side by side in one run,
// and prints medians, p99s and ratios as a Markdown table:
//
//   - whole process: `airlock run -- /bin/true` vs bubblewrap vs
//     util-linux unshare, interleaved so they see the same machine;
//   - in process: create a sandbox, run /bin/true, destroy it;
//   - throughput: fresh sandboxes per second with 4 concurrent workers;
//   - floors: steps bwrap does not take (the sandbox's cgroup, init's
//     all-thread system calls), measured alone, and a network namespace;
//   - warm pool: claim → run → result from a warm pool vs a cold create;
//   - idle footprint: host memory held by one created, waiting sandbox;
//   - images: start from an imported image vs the host image, and
//     import throughput;
//   - egress: a request through the sandbox's proxy vs direct, bulk
//     throughput, and many connections held at once;
//   - broker: a brokered call vs a direct one to the same upstream;
//   - daemon: warm and cold runs through the API, and sustained runs;
//   - pause: pausing and resuming a session holding 64 MiB and 512 MiB
//     of touched memory, through the API, vs the kernel's floor (the
//     sandbox's cgroup frozen and thawed directly), interleaved;
//   - snapshot: a session's snapshot (1 MiB and 64 MiB of files), a
//     create from one vs a fresh create of the same tool (both warm),
//     and a fork into 4 vs 4 fresh creates, through the API, interleaved;
//   - sdk: ComputeSDK's method (create → first command, one at a time
//     and 100 at once) through the official E2B SDKs against the native
//     API, and what the warm pool did.
//
// It needs root. Run it with `go run ./bench`.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/airlockhq/airlock/internal/gvisor"
	"github.com/airlockhq/airlock/result"
	"github.com/airlockhq/airlock/sandbox"
)

func main() {
	if code, ok := sandbox.Child(); ok {
		os.Exit(code)
	}
	n := flag.Int("n", 200, "iterations per whole-process command")
	inproc := flag.Int("inproc", 500, "in-process create/run/destroy iterations")
	tput := flag.Duration("throughput", 10*time.Second, "how long to measure throughput")
	idle := flag.Int("idle", 100, "sandboxes held idle to measure the footprint")
	only := flag.String("only", "", "run one section only: process, inproc, throughput, floors, pool, idle, image, build, egress, broker, daemon (sustained: its sustained runs alone), pause, snapshot, e2b, interp, sdk, gvisor or cluster")
	pooled := flag.Int("pool", 300, "warm-pool claims (and cold creates) to time")
	poolIdle := flag.Duration("pool-idle", 10*time.Second, "the adaptive pool's idle time in the pool section's changing load (the daemon's default is 1m)")
	egressN := flag.Int("egress-n", 2000, "requests per path in the egress latency comparison")
	egressSize := flag.Int64("egress-size", 1<<30, "bytes per download in the egress throughput comparison")
	egressConns := flag.Int("egress-conns", 200, "concurrent connections held from one sandbox")
	imageN := flag.Int("image-n", 300, "start-latency runs per case in the image comparison")
	importMB := flag.Int("import-mb", 500, "size in MiB of the image whose import is timed")
	sdkN := flag.Int("sdk-n", 20, "create → first command runs per path, one at a time, in the sdk section")
	sdkWarm := flag.Int("sdk-warm", 10, "the warm pool's target in the sdk section")
	pauseN := flag.Int("pause-n", 100, "pause and resume rounds per memory size in the pause section")
	snapN := flag.Int("snapshot-n", 50, "rounds per case in the snapshot section")
	buildN := flag.Int("build-n", 7, "cold and cached rounds per builder in the build section")
	gvisorN := flag.Int("gvisor-n", 50, "create → run → destroyed rounds per side in the gvisor section")
	runsc := flag.String("runsc", "", "gVisor's runsc for the gvisor section (default: as airlock finds it)")
	gvisorSide := flag.String("gvisor-side", "", "the gvisor section loads one side alone, 4 workers for -throughput, and prints its rate and CPU (for a profiler beside it): airlock, runsc or own")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile here")
	memprofile := flag.String("memprofile", "", "write the allocations' profile here at the end")
	flag.Parse()
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		pprof.StartCPUProfile(f)
		defer pprof.StopCPUProfile()
	}
	gv = gvisorArgs{*gvisorN, *runsc, *gvisorSide}
	err := run(*only, *n, *inproc, *tput, *idle, *pooled, *poolIdle, egressArgs{*egressN, *egressSize, *egressConns}, imageArgs{*imageN, *importMB}, sdkArgs{*sdkN, *sdkWarm}, *pauseN, *snapN, *buildN)
	if *memprofile != "" {
		if f, ferr := os.Create(*memprofile); ferr != nil {
			err = errors.Join(err, ferr)
		} else {
			err = errors.Join(err, pprof.Lookup("allocs").WriteTo(f, 0), f.Close())
		}
	}
	if progAirlock != "" {
		os.RemoveAll(filepath.Dir(progAirlock))
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		pprof.StopCPUProfile()
		os.Exit(1)
	}
}

type series struct {
	name string
	d    []time.Duration
}

func (s *series) pct(p float64) time.Duration {
	d := slices.Clone(s.d)
	slices.Sort(d)
	i := int(p * float64(len(d)-1))
	return d[i]
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d)/1e6) }

type egressArgs struct {
	n     int
	size  int64
	conns int
}

// gvisorArgs size the gvisor section and name its runsc.
type gvisorArgs struct {
	n     int
	runsc string
	side  string
}

var gv gvisorArgs

// sdkArgs size the sdk section: runs one at a time per path, and the
// warm pool's target.
type sdkArgs struct{ n, warm int }

func run(only string, n, inproc int, tput time.Duration, idle, pooled int, poolIdle time.Duration, eg egressArgs, im imageArgs, sa sdkArgs, pauseN, snapN, buildN int) error {
	want := func(s string) bool { return only == "" || only == s }
	if os.Geteuid() != 0 {
		return fmt.Errorf("needs root")
	}
	host, _ := os.Hostname()
	kernel, _ := os.ReadFile("/proc/sys/kernel/osrelease")
	fmt.Printf("# airlock benchmark\n\nMachine: %s, kernel %s, %d CPUs; %s\n\n", host, strings.TrimSpace(string(kernel)), numCPU(), time.Now().UTC().Format("2006-01-02"))
	if only != "egress" && only != "broker" && only != "image" && only != "e2b" && only != "interp" && only != "sdk" && only != "cluster" && only != "pause" && only != "snapshot" && only != "build" && only != "gvisor" {
		if err := peers(n, tput); err != nil {
			return err
		}
		defer printTargets()
	}
	if want("process") {
		if err := wholeProcess(n); err != nil {
			return err
		}
	}
	if want("egress") {
		if err := egressBench(eg.n, eg.size, eg.conns); err != nil {
			return err
		}
	}
	if want("broker") {
		if err := brokerBench(eg.n); err != nil {
			return err
		}
		if err := transparentBench(eg.n); err != nil {
			return err
		}
	}
	if want("daemon") {
		if err := daemonBench(pooled, tput); err != nil {
			return err
		}
	}
	if only == "sustained" {
		if err := sustainedBench(tput); err != nil {
			return err
		}
	}
	if want("pause") {
		if err := pauseBench(pauseN); err != nil {
			return err
		}
	}
	if want("build") {
		if err := buildBench(buildN); err != nil {
			return err
		}
	}
	if want("snapshot") {
		if err := snapshotBench(snapN); err != nil {
			return err
		}
	}
	if want("e2b") {
		if err := e2bBench(min(n, 100)); err != nil {
			return err
		}
	}
	if want("interp") {
		if err := interpBench(min(n, 200)); err != nil {
			return err
		}
	}
	if want("sdk") {
		if err := sdkBench(sa.n, sa.warm); err != nil {
			return err
		}
	}
	if want("gvisor") {
		if _, err := gvisor.Find(gv.runsc); err != nil && only == "" {
			fmt.Printf("\n## gVisor backend\n\nNot measured: %v\n", err)
		} else if err := gvisorBench(gv.n, tput, min(idle, 20), gv.runsc, gv.side); err != nil {
			return err
		}
	}
	if want("cluster") {
		if err := clusterBench(min(n, 300), tput); err != nil {
			return err
		}
	}
	if only == "egress" || only == "broker" || only == "daemon" || only == "gvisor" || only == "e2b" || only == "interp" || only == "sdk" || only == "cluster" || only == "pause" || only == "snapshot" {
		return nil
	}
	ctx := context.Background()
	_, initPath, err := programs()
	if err != nil {
		return err
	}
	rt, err := sandbox.New(ctx, sandbox.Options{StateDir: "/run/airlock-bench", CgroupParent: "/airlock-bench", InitPath: initPath})
	if err != nil {
		return err
	}
	lim := sandbox.DefaultLimits()
	one := func() (st steps, err error) {
		start := time.Now()
		// Start, as airlock run does: the command is queued to init
		// while it starts, and runs the moment init is ready.
		sb, err := rt.Start(ctx, sandbox.Spec{Limits: lim})
		if err != nil {
			return st, err
		}
		st.create = time.Since(start)
		r := sb.Exec(ctx, sandbox.ExecRequest{Argv: []string{"/bin/true"}})
		st.exec = time.Since(start) - st.create
		if err := sb.Destroy(ctx); err != nil {
			return st, err
		}
		if r.Outcome != result.Exited || r.ExitCode != 0 {
			return st, fmt.Errorf("run: %s %d %s", r.Outcome, r.ExitCode, r.Error)
		}
		st.total = time.Since(start)
		st.destroy = st.total - st.create - st.exec
		return st, nil
	}
	if want("inproc") {
		if err := inProcess(one, inproc); err != nil {
			return err
		}
	}
	if want("throughput") {
		if err := throughput(one, tput); err != nil {
			return err
		}
	}
	if want("floors") {
		if err := floors(300); err != nil {
			return err
		}
	}
	if want("pool") {
		if err := poolBench(ctx, rt, lim, pooled); err != nil {
			return err
		}
		if err := adaptiveBench(ctx, rt, lim, poolIdle); err != nil {
			return err
		}
	}
	if want("image") {
		if err := imageBench(ctx, rt, lim, im); err != nil {
			return err
		}
	}
	if want("idle") {
		return footprint(ctx, rt, lim, idle)
	}
	return nil
}

var (
	progOnce              sync.Once
	progAirlock, progInit string
	progErr               error
)

// programs builds airlock, airlockd and airlock-init side by side, as installed,
// once per run, and returns their paths.
func programs() (airlock, init string, err error) {
	progOnce.Do(func() {
		dir, err := os.MkdirTemp("", "airlock-bench")
		if err != nil {
			progErr = err
			return
		}
		build := exec.Command("go", "build", "-trimpath", "-o", dir+"/", "./cmd/airlock", "./cmd/airlockd", "./cmd/airlock-init")
		build.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := build.CombinedOutput(); err != nil {
			progErr = fmt.Errorf("build airlock: %v: %s", err, out)
			return
		}
		progAirlock, progInit = filepath.Join(dir, "airlock"), filepath.Join(dir, "airlock-init")
	})
	return progAirlock, progInit, progErr
}

// wholeProcess times airlock and its peers as whole commands, interleaved
// so that they see the same machine.
func wholeProcess(n int) error {
	if err := ensureBwrap(); err != nil {
		return err
	}
	bin, _, err := programs()
	if err != nil {
		return err
	}
	cmds := []struct {
		name string
		argv []string
	}{
		{"airlock run -- /bin/true", []string{bin, "run", "--state-dir", "/run/airlock-bench", "--cgroup-parent", "/airlock-bench", "--", "/bin/true"}},
		{"bwrap --unshare-all … /bin/true", bwrapArgv()},
		{"unshare --user --map-root-user --pid --fork --mount --net --ipc --uts /bin/true", []string{"unshare", "--user", "--map-root-user", "--pid", "--fork", "--mount", "--net", "--ipc", "--uts", "/bin/true"}},
		{"/bin/true (no isolation, for scale)", []string{"/bin/true"}},
		{"airlock version", []string{bin, "version"}},
		{"empty Go program (for scale)", []string{filepath.Join(filepath.Dir(bin), "empty")}},
	}
	res := make([]*series, len(cmds))
	for i, c := range cmds {
		res[i] = &series{name: c.name}
		// Warm up, and fail early if a peer does not work here.
		if out, err := exec.Command(c.argv[0], c.argv[1:]...).CombinedOutput(); err != nil {
			return fmt.Errorf("%s: %v: %s", c.name, err, out)
		}
	}
	for range n {
		for i, c := range cmds {
			start := time.Now()
			if err := exec.Command(c.argv[0], c.argv[1:]...).Run(); err != nil {
				return fmt.Errorf("%s: %v", c.name, err)
			}
			res[i].d = append(res[i].d, time.Since(start))
		}
	}
	bw := res[1].pct(0.5)
	measured.runP50, measured.version = res[0].pct(0.5), res[4].pct(0.5)
	measured.runBwrapP50, measured.runEmptyGo = bw, res[5].pct(0.5)
	fmt.Printf("## Whole process (%d runs each, interleaved)\n\n| command | p50 | p99 | p50 / bwrap |\n| --- | --- | --- | --- |\n", n)
	for _, s := range res {
		fmt.Printf("| `%s` | %s | %s | %.2f× |\n", s.name, ms(s.pct(0.5)), ms(s.pct(0.99)), float64(s.pct(0.5))/float64(bw))
	}
	return nil
}

// steps are the times of one in-process sandbox's life.
type steps struct{ create, exec, destroy, total time.Duration }

type oneFunc func() (steps, error)

// inProcess times inproc sandboxes in sequence, each followed by one
// whole-process bwrap run: target 1 compares the two series.
func inProcess(one oneFunc, inproc int) error {
	cr, ex, de, tot := &series{name: "start (`Runtime.Start`: until init is starting, its setup sent)"}, &series{name: "run /bin/true (queued at once; until init is ready and the exit reported)"},
		&series{name: "destroy (until gone)"}, &series{name: "create → run /bin/true → destroyed"}
	bw := &series{name: "`bwrap --unshare-all … /bin/true`, whole process, interleaved"}
	for range inproc {
		st, err := one()
		if err != nil {
			return err
		}
		cr.d, ex.d, de.d, tot.d = append(cr.d, st.create), append(ex.d, st.exec), append(de.d, st.destroy), append(tot.d, st.total)
		d, err := bwrapOnce()
		if err != nil {
			return err
		}
		bw.d = append(bw.d, d)
	}
	measured.inprocBwrapP50, measured.inprocBwrapP99 = bw.pct(0.5), bw.pct(0.99)
	fmt.Printf("\n## In process (%d sequential sandboxes, each followed by a bwrap run)\n\n| step | p50 | p99 | p50 / bwrap whole process |\n| --- | --- | --- | --- |\n", inproc)
	for _, s := range []*series{cr, ex, de, tot, bw} {
		fmt.Printf("| %s | %s | %s | %.2f× |\n", s.name, ms(s.pct(0.5)), ms(s.pct(0.99)), float64(s.pct(0.5))/float64(measured.inprocBwrapP50))
	}
	measured.inprocP50, measured.inprocP99 = tot.pct(0.5), tot.pct(0.99)
	return nil
}

// throughput runs 4 workers creating, running and destroying sandboxes,
// in 4 windows of tput/4 alternating with windows of bwrap 4 at a time.
func throughput(one oneFunc, tput time.Duration) error {
	var total int64
	air, bw, airCPU, bwCPU, err := windowsCPU(tput, 4, func(d time.Duration) (int64, time.Duration, error) {
		n, took, err := fourAtOnce(d, func() error {
			_, err := one()
			return err
		})
		total += n
		return n, took, err
	})
	if err != nil {
		return err
	}
	measured.tput, measured.tputBwrap = air, bw
	measured.tputCPU, measured.tputBwrapCPU = airCPU, bwCPU
	fmt.Printf("\n## Throughput\n\n4 concurrent workers, each creating a sandbox, running `/bin/true` and destroying it, in 4 windows of %v alternating with windows of bwrap 4 at a time: **%.0f sandboxes/s** (%d in all); bwrap, 4 at once, in the windows between: %.0f runs/s (%.2f×).\n",
		tput/4, air, total, bw, air/bw)
	fmt.Printf("\nThe whole machine's CPU time (every process and kernel thread, /proc/stat) in those windows: %s per sandbox, %s per bwrap run (its Go driver included, as airlock's loop is in its own).\n",
		ms(airCPU), ms(bwCPU))
	return nil
}

// footprint holds idle sandboxes and reports what they cost the host: the
// growth of the host's used memory (user and kernel memory — processes,
// page tables, namespaces, cgroups, mounts — but not the page cache), the
// median of three rounds.
func footprint(ctx context.Context, rt *sandbox.Runtime, lim sandbox.Limits, k int) error {
	var per, charged []float64
	for range 3 {
		p, c, err := footprintRound(ctx, rt, lim, k)
		if err != nil {
			return err
		}
		per, charged = append(per, p), append(charged, c)
	}
	slices.Sort(per)
	slices.Sort(charged)
	mib := func(f float64) float64 { return f / (1 << 20) }
	measured.idleMiB, measured.idleRan = mib(per[1]), true
	fmt.Printf("\n## Idle footprint\n\n%d sandboxes created and waiting for work: the host's used memory (user and kernel, excluding page cache) "+
		"grew by **%.2f MiB per sandbox** (median of 3 rounds: %.2f, %.2f, %.2f). Their cgroups were charged %.2f MiB each (median), "+
		"which also counts binary pages they were first to read back after the cache was dropped.\n",
		k, mib(per[1]), mib(per[0]), mib(per[1]), mib(per[2]), mib(charged[1]))
	return nil
}

func footprintRound(ctx context.Context, rt *sandbox.Runtime, lim sandbox.Limits, k int) (perSandbox, charged float64, err error) {
	settle()
	before := memUsed()
	var sbs []*sandbox.Sandbox
	defer func() {
		for _, sb := range sbs {
			sb.Destroy(ctx)
		}
	}()
	for range k {
		sb, err := rt.Create(ctx, sandbox.Spec{Limits: lim})
		if err != nil {
			return 0, 0, err
		}
		sbs = append(sbs, sb)
	}
	settle()
	perSandbox = float64(memUsed()-before) / float64(k)
	var sum int64
	for _, sb := range sbs {
		smp, err := sb.Sample()
		if err != nil {
			return 0, 0, err
		}
		sum += smp.MemoryBytes
	}
	return perSandbox, float64(sum) / float64(k), nil
}

func settle() {
	time.Sleep(500 * time.Millisecond)
	_ = os.WriteFile("/proc/sys/vm/drop_caches", []byte("3"), 0)
	time.Sleep(200 * time.Millisecond)
}

// memUsed is what `free` calls used: total minus free, buffers, page cache
// and reclaimable slab.
func memUsed() int64 {
	b, _ := os.ReadFile("/proc/meminfo")
	v := map[string]int64{}
	for _, l := range strings.Split(string(b), "\n") {
		k, rest, ok := strings.Cut(l, ":")
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) > 0 {
			n, _ := strconv.ParseInt(f[0], 10, 64)
			v[k] = n * 1024
		}
	}
	return v["MemTotal"] - v["MemFree"] - v["Buffers"] - v["Cached"] - v["SReclaimable"]
}

func numCPU() int {
	b, _ := os.ReadFile("/proc/cpuinfo")
	return strings.Count(string(b), "processor\t:")
}

func ensureBwrap() error {
	if _, err := exec.LookPath("bwrap"); err == nil {
		return nil
	}
	fmt.Fprintln(os.Stderr, "installing bubblewrap")
	if out, err := exec.Command("sh", "-c", "apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap").CombinedOutput(); err != nil {
		return fmt.Errorf("install bubblewrap: %v: %s", err, out)
	}
	return nil
}

// bwrapArgv gives bubblewrap a root comparable to airlock's: the host's
// system directories read-only, fresh /proc, minimal /dev, a tmpfs /tmp,
// every namespace unshared.
func bwrapArgv() []string {
	argv := []string{"bwrap", "--unshare-all", "--die-with-parent", "--new-session"}
	for _, d := range []string{"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"} {
		fi, err := os.Lstat(d)
		switch {
		case err != nil:
		case fi.Mode()&os.ModeSymlink != 0:
			t, _ := os.Readlink(d)
			argv = append(argv, "--symlink", t, d)
		default:
			argv = append(argv, "--ro-bind", d, d)
		}
	}
	return append(argv, "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "/bin/true")
}
