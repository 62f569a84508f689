// Command bench measures airlock against its peers, side by side in one run,
// and prints medians, p99s and ratios as a Markdown table:
//
//   - whole process: `airlock run -- /bin/true` vs bubblewrap vs
//     util-linux unshare, interleaved so they see the same machine;
//   - in process: create a sandbox, run /bin/true, destroy it;
//   - throughput: fresh sandboxes per second with 4 concurrent workers;
//   - idle footprint: host memory held by one created, waiting sandbox.
//
// It needs root. Run it with `go run ./bench`.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/airlockhq/airlock/internal/sbinit"
	"github.com/airlockhq/airlock/result"
	"github.com/airlockhq/airlock/sandbox"
)

func main() {
	if sbinit.IsInit() {
		os.Exit(sbinit.Main())
	}
	n := flag.Int("n", 200, "iterations per whole-process command")
	inproc := flag.Int("inproc", 500, "in-process create/run/destroy iterations")
	tput := flag.Duration("throughput", 10*time.Second, "how long to measure throughput")
	idle := flag.Int("idle", 50, "sandboxes held idle to measure the footprint")
	flag.Parse()
	if err := run(*n, *inproc, *tput, *idle); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
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

func run(n, inproc int, tput time.Duration, idle int) error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("needs root")
	}
	if err := ensureBwrap(); err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "airlock-bench")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	bin := filepath.Join(dir, "airlock")
	build := exec.Command("go", "build", "-trimpath", "-o", bin, "./cmd/airlock")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		return fmt.Errorf("build airlock: %v: %s", err, out)
	}
	host, _ := os.Hostname()
	kernel, _ := os.ReadFile("/proc/sys/kernel/osrelease")
	fmt.Printf("# airlock benchmark\n\nMachine: %s, kernel %s, %d CPUs; %s\n\n", host, strings.TrimSpace(string(kernel)), numCPU(), time.Now().UTC().Format("2006-01-02"))

	cmds := []struct {
		name string
		argv []string
	}{
		{"airlock run -- /bin/true", []string{bin, "run", "--state-dir", "/run/airlock-bench", "--cgroup-parent", "/airlock-bench", "--", "/bin/true"}},
		{"bwrap --unshare-all … /bin/true", bwrapArgv()},
		{"unshare --user --map-root-user --pid --fork --mount --net --ipc --uts /bin/true", []string{"unshare", "--user", "--map-root-user", "--pid", "--fork", "--mount", "--net", "--ipc", "--uts", "/bin/true"}},
		{"/bin/true (no isolation, for scale)", []string{"/bin/true"}},
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
	fmt.Printf("## Whole process (%d runs each, interleaved)\n\n| command | p50 | p99 | p50 / bwrap |\n| --- | --- | --- | --- |\n", n)
	for _, s := range res {
		fmt.Printf("| `%s` | %s | %s | %.2f× |\n", s.name, ms(s.pct(0.5)), ms(s.pct(0.99)), float64(s.pct(0.5))/float64(bw))
	}

	ctx := context.Background()
	rt, err := sandbox.New(ctx, sandbox.Options{StateDir: "/run/airlock-bench", CgroupParent: "/airlock-bench"})
	if err != nil {
		return err
	}
	lim := sandbox.DefaultLimits()
	one := func() (create, total time.Duration, err error) {
		start := time.Now()
		sb, err := rt.Create(ctx, sandbox.Spec{Limits: lim})
		if err != nil {
			return 0, 0, err
		}
		create = time.Since(start)
		r := sb.Exec(ctx, sandbox.ExecRequest{Argv: []string{"/bin/true"}})
		if err := sb.Destroy(ctx); err != nil {
			return 0, 0, err
		}
		if r.Outcome != result.Exited || r.ExitCode != 0 {
			return 0, 0, fmt.Errorf("run: %s %d %s", r.Outcome, r.ExitCode, r.Error)
		}
		return create, time.Since(start), nil
	}
	cr, tot := &series{name: "create (until init is ready)"}, &series{name: "create → run /bin/true → destroyed"}
	for range inproc {
		c, t, err := one()
		if err != nil {
			return err
		}
		cr.d, tot.d = append(cr.d, c), append(tot.d, t)
	}
	fmt.Printf("\n## In process (%d sequential sandboxes)\n\n| step | p50 | p99 |\n| --- | --- | --- |\n", inproc)
	for _, s := range []*series{cr, tot} {
		fmt.Printf("| %s | %s | %s |\n", s.name, ms(s.pct(0.5)), ms(s.pct(0.99)))
	}

	var done atomic.Int64
	var wg sync.WaitGroup
	var firstErr atomic.Value
	deadline := time.Now().Add(tput)
	start := time.Now()
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) {
				if _, _, err := one(); err != nil {
					firstErr.CompareAndSwap(nil, err)
					return
				}
				done.Add(1)
			}
		}()
	}
	wg.Wait()
	if e := firstErr.Load(); e != nil {
		return e.(error)
	}
	el := time.Since(start)
	fmt.Printf("\n## Throughput\n\n4 concurrent workers, each creating a sandbox, running `/bin/true` and destroying it: **%.0f sandboxes/s** (%d in %v).\n",
		float64(done.Load())/el.Seconds(), done.Load(), el.Round(time.Millisecond))

	return footprint(ctx, rt, lim, idle)
}

// footprint holds idle sandboxes and reports what they cost the host: the
// drop in MemAvailable (user and kernel memory, page tables, namespaces,
// cgroups) and what their cgroups are charged.
func footprint(ctx context.Context, rt *sandbox.Runtime, lim sandbox.Limits, k int) error {
	settle()
	before := memAvailable()
	var sbs []*sandbox.Sandbox
	defer func() {
		for _, sb := range sbs {
			sb.Destroy(ctx)
		}
	}()
	for range k {
		sb, err := rt.Create(ctx, sandbox.Spec{Limits: lim})
		if err != nil {
			return err
		}
		sbs = append(sbs, sb)
	}
	settle()
	after := memAvailable()
	var rss int64
	for _, sb := range sbs {
		rss += statusKB(sb.InitPid(), "VmRSS:") * 1024
	}
	per := float64(before-after) / float64(k)
	fmt.Printf("\n## Idle footprint\n\n%d sandboxes created and waiting: host MemAvailable fell by **%.2f MiB per sandbox** (init's resident set: %.2f MiB each, most of it the binary's shared pages).\n",
		k, per/(1<<20), float64(rss)/float64(k)/(1<<20))
	return nil
}

func settle() {
	time.Sleep(500 * time.Millisecond)
	_ = os.WriteFile("/proc/sys/vm/drop_caches", []byte("1"), 0)
	time.Sleep(200 * time.Millisecond)
}

func memAvailable() int64 {
	b, _ := os.ReadFile("/proc/meminfo")
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "MemAvailable:"); ok {
			n, _ := strconv.ParseInt(strings.Fields(v)[0], 10, 64)
			return n * 1024
		}
	}
	return 0
}

func statusKB(pid int, field string) int64 {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, field); ok {
			n, _ := strconv.ParseInt(strings.Fields(v)[0], 10, 64)
			return n
		}
	}
	return 0
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
