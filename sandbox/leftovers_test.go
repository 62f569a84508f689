package sandbox

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/testutil"

	"golang.org/x/sys/unix"

	"github.com/airlockhq/airlock/internal/spawner"
	"github.com/airlockhq/airlock/result"
)

// TestSurvivors starts processes that try to outlive the command; run()
// asserts that none of them, nor anything else of the sandbox, remains.
func TestSurvivors(t *testing.T) {
	tests := []struct {
		name string
		argv []string
	}{
		{"setsid", []string{"sh", "-c", "setsid sleep 100 & echo started"}},
		{"double fork", []string{"sh", "-c", "(sh -c 'sleep 100 &' &); echo started"}},
		{"nohup ignoring hangup", []string{"sh", "-c", "trap '' HUP TERM; nohup sleep 100 >/dev/null 2>&1 & echo started"}},
		{"racing forks", []string{"sh", "-c", "for i in 1 2 3 4 5 6 7 8; do (while :; do sleep 1 & done) & done; sleep 0.2; echo started"}},
		{"stopped child", []string{"sh", "-c", "sleep 100 & kill -STOP $!; echo started"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := run(t, runOpts{}, tt.argv...)
			if r.Outcome != result.Exited && r.Outcome != result.LimitExceeded {
				t.Fatalf("got %s: %s %s", r.Outcome, r.Error, r.Stderr)
			}
		})
	}
}

// TestSweepAfterCrash kills an airlock process that owns a live sandbox
// and checks that the next runtime removes everything it left: a sweep,
// or a one-shot runtime (airlock run), which sweeps while its own
// sandbox's command runs.
func TestSweepAfterCrash(t *testing.T) {
	t.Run("gvisor", func(t *testing.T) {
		be := backends(t)
		if len(be) < 2 {
			t.Skip("no runsc")
		}
		tr := crashedHolderOn(t, be[1])
		if n, err := testRuntime(t).Sweep(t.Context()); err != nil || n < 1 {
			t.Errorf("swept %d sandboxes (%v), want >= 1", n, err)
		}
		tr.assertGone(t)
	})
	t.Run("sweep", func(t *testing.T) {
		tr := crashedHolder(t)
		rt := testRuntime(t)
		n, err := rt.Sweep(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if n < 1 {
			t.Errorf("swept %d sandboxes, want >= 1", n)
		}
		tr.assertGone(t)
	})
	t.Run("one-shot run", func(t *testing.T) {
		tr := crashedHolder(t)
		rt, err := New(t.Context(), Options{StateDir: testStateDir, CgroupParent: testCgroup, InitPath: testutil.InitPath(t), OneShot: true})
		if err != nil {
			t.Fatal(err)
		}
		if len(cgroupDirs(tr.id)) == 0 {
			t.Fatal("a one-shot runtime swept before its sandbox")
		}
		sb, err := rt.Create(t.Context(), Spec{Limits: DefaultLimits()})
		if err != nil {
			t.Fatal(err)
		}
		if r := sb.Exec(t.Context(), ExecRequest{Argv: []string{"true"}}); r.Outcome != result.Exited || r.ExitCode != 0 {
			t.Fatalf("true: %s %d %s", r.Outcome, r.ExitCode, r.Error)
		}
		if err := sb.Destroy(t.Context()); err != nil {
			t.Fatal(err)
		}
		if err := rt.Close(); err != nil {
			t.Fatal(err)
		}
		tr.assertGone(t)
	})
}

// crashedHolder runs TestHoldSandbox in a process of its own, kills it
// while it holds a live sandbox, and returns what that sandbox left.
func crashedHolder(t *testing.T) *trace { return crashedHolderOn(t, backend{}) }

// crashedHolderOn is crashedHolder for a sandbox of backend be.
func crashedHolderOn(t *testing.T, be backend) *trace {
	t.Helper()
	testRuntime(t)
	cmd := exec.Command(os.Args[0], "-test.run=^TestHoldSandbox$")
	cmd.Env = append(os.Environ(), "AIRLOCK_TEST_HOLD=1", "AIRLOCK_TEST_HOLD_ISOLATION="+isolationOf(be))
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(out)
	var id, bundle string
	var pid int
	var base uint32
	for sc.Scan() {
		if _, err := fmt.Sscanf(sc.Text(), "holding %s %d %d %s", &id, &pid, &base, &bundle); err == nil {
			break
		}
	}
	if id == "" {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatal("holder did not report a sandbox")
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	// Pdeathsig takes init down with its parent; the cgroup and lock file
	// stay behind until a sweep.
	deadline := time.Now().Add(5 * time.Second)
	for unix.Kill(pid, 0) == nil && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if len(cgroupDirs(id)) == 0 {
		t.Fatalf("crashed holder left no cgroup to sweep; test is not testing anything")
	}
	tr := &trace{id: id, initPid: pid, uidBase: base, lock: filepath.Join(testLockDir(), id)}
	if bundle != "-" {
		if _, err := os.Stat(bundle); err != nil {
			t.Fatalf("crashed holder left no gvisor bundle to sweep: %v", err)
		}
		tr.bundle = bundle
	}
	return tr
}

// TestHoldSandbox is the crashing holder of TestSweepAfterCrash.
func TestHoldSandbox(t *testing.T) {
	if os.Getenv("AIRLOCK_TEST_HOLD") != "1" {
		t.Skip("helper for TestSweepAfterCrash")
	}
	rt, err := New(t.Context(), Options{StateDir: testStateDir, CgroupParent: testCgroup, InitPath: testutil.InitPath(t), Runsc: os.Getenv(testutil.RunscEnv)})
	if err != nil {
		t.Fatal(err)
	}
	sb, err := rt.Create(t.Context(), Spec{Limits: DefaultLimits(), Isolation: os.Getenv("AIRLOCK_TEST_HOLD_ISOLATION")})
	if err != nil {
		t.Fatal(err)
	}
	bundle := "-"
	if sb.gv != nil {
		bundle = sb.gv.bundle
	}
	fmt.Printf("holding %s %d %d %s\n", sb.ID(), sb.InitPid(), sb.HostIDBase(), bundle)
	go sb.Exec(t.Context(), ExecRequest{Argv: []string{"sleep", "100"}})
	time.Sleep(time.Minute)
}

// TestSoak runs many sandboxes one after another and checks that the host
// ends with none of their cgroups, namespaces, mounts or processes.
func TestSoak(t *testing.T) {
	rt := testRuntime(t)
	n := 2000
	if testing.Short() {
		n = 200
	}
	before := countChildren()
	start := time.Now()
	for i := range n {
		sb, err := rt.Create(t.Context(), Spec{Limits: DefaultLimits()})
		if err != nil {
			t.Fatalf("run %d: %v", i, err)
		}
		r := sb.Exec(t.Context(), ExecRequest{Argv: []string{"/bin/true"}})
		if err := sb.Destroy(t.Context()); err != nil {
			t.Fatalf("run %d: %v", i, err)
		}
		if r.Outcome != result.Exited || r.ExitCode != 0 {
			t.Fatalf("run %d: %s %d %s", i, r.Outcome, r.ExitCode, r.Error)
		}
	}
	t.Logf("%d sequential runs in %v", n, time.Since(start))
	if ids := sandboxGroups(t, rt); len(ids) != 0 {
		t.Errorf("%d sandbox cgroups left: %v", len(ids), ids)
	}
	if m := hostMountsUnder(testStateDir); len(m) > 0 {
		t.Errorf("mounts left: %v", m)
	}
	ents, _ := os.ReadDir(testLockDir())
	ents = slices.DeleteFunc(ents, func(e os.DirEntry) bool { return slices.Contains(rt.groups.ids(), e.Name()) })
	if len(ents) != 0 {
		t.Errorf("%d lock files left", len(ents))
	}
	if after := countChildren(); after > before {
		t.Errorf("this process has %d children after the soak, %d before", after, before)
	}
	if n := countSandboxProcs(); n > 0 {
		t.Errorf("%d sandbox processes remain on the host", n)
	}
}

// countChildren counts this process's children: inits are cloned as
// them (and the spawner's as siblings of the spawner). Processes of other
// packages' tests, running meanwhile, are not counted; what might escape
// as an orphan is in a sandbox cgroup (countSandboxProcs).
func countChildren() int {
	me := strconv.Itoa(os.Getpid())
	n := 0
	for _, pid := range hostPids() {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces and parentheses.
		if i := strings.LastIndexByte(string(b), ')'); i >= 0 {
			if f := strings.Fields(string(b[i+1:])); len(f) > 1 && f[1] == me {
				n++
			}
		}
	}
	return n
}

// countSandboxProcs counts processes whose uid is in the sandbox id space.
// countSandboxProcs counts the processes of this package's sandboxes: a
// sandbox uid, in a cgroup below the tests' parent (other packages' tests
// may be running sandboxes of their own meanwhile).
func countSandboxProcs() int {
	n := 0
	for _, pid := range hostPids() {
		if uid, ok := procUID(pid); !ok || uid < 1<<30 {
			continue
		}
		if b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup"); err == nil && strings.Contains(string(b), testCgroup+"/") {
			n++
		}
	}
	return n
}

// TestSpawnerRestart kills the spawner; a sandbox created before keeps
// working (its init is the host's child), and the next Create starts a new
// spawner.
func TestSpawnerRestart(t *testing.T) {
	rt := spawnerRuntime(t)
	before, err := rt.Create(t.Context(), Spec{Limits: DefaultLimits()})
	if err != nil {
		t.Fatal(err)
	}
	defer before.Destroy(t.Context())
	rt.spawner.mu.Lock()
	p := rt.spawner.proc
	rt.spawner.mu.Unlock()
	if p == nil {
		t.Fatal("no spawner running after Create")
	}
	if err := p.Kill(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	if r := before.Exec(t.Context(), ExecRequest{Argv: []string{"true"}}); r.Outcome != result.Exited || r.ExitCode != 0 {
		t.Fatalf("sandbox created before the spawner died: %s %s", r.Outcome, r.Error)
	}
	after, err := rt.Create(t.Context(), Spec{Limits: DefaultLimits()})
	if err != nil {
		t.Fatalf("Create after the spawner died: %v", err)
	}
	r := after.Exec(t.Context(), ExecRequest{Argv: []string{"echo", "again"}, Capture: true})
	after.Destroy(t.Context())
	if string(r.Stdout) != "again\n" {
		t.Fatalf("after the spawner died: %s %q %s", r.Outcome, r.Stdout, r.Error)
	}
}

// TestConcurrentRuns creates, uses and destroys sandboxes from several
// goroutines at once (the race detector run covers the shared runtime).
func TestConcurrentRuns(t *testing.T) {
	rt := testRuntime(t)
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 5 {
				sb, err := rt.Create(t.Context(), Spec{Limits: DefaultLimits()})
				if err != nil {
					errs <- err
					return
				}
				msg := fmt.Sprintf("w%d-%d", w, i)
				r := sb.Exec(t.Context(), ExecRequest{Argv: []string{"echo", msg}, Capture: true})
				smp, serr := sb.Sample()
				if err := sb.Destroy(t.Context()); err != nil {
					errs <- err
					return
				}
				if string(r.Stdout) != msg+"\n" {
					errs <- fmt.Errorf("%s: got %s %q %s", msg, r.Outcome, r.Stdout, r.Error)
					return
				}
				if serr == nil && smp.MemoryBytes <= 0 {
					errs <- fmt.Errorf("%s: sample %+v has no memory", msg, smp)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// TestSpawnerRefusesBadRequest sends the spawner a request without the
// descriptors it needs: it must answer with an error and keep serving.
func TestSpawnerRefusesBadRequest(t *testing.T) {
	rt := spawnerRuntime(t)
	_, _, err := rt.spawner.spawn(spawner.Request{Path: "/proc/self/exe", Arg0: "x", IDBase: 1 << 30, IDSize: 1}, []int{0})
	if err == nil || !strings.Contains(err.Error(), "descriptors") {
		t.Fatalf("got %v, want an error about descriptors", err)
	}
	if r := run(t, runOpts{}, "true"); r.Outcome != result.Exited || r.ExitCode != 0 {
		t.Fatalf("after a bad request: %s %s", r.Outcome, r.Error)
	}
}

// TestCreateCanceled creates with contexts that end before and while init
// starts: Create fails with the context's error and leaves nothing behind.
func TestCreateCanceled(t *testing.T) {
	rt := testRuntime(t)
	checkLeft := nothingLeft(t, rt)
	for _, d := range []time.Duration{0, 500 * time.Microsecond, time.Millisecond, 2 * time.Millisecond} {
		ctx, cancel := context.WithTimeout(t.Context(), d)
		sb, err := rt.Create(ctx, Spec{Limits: DefaultLimits()})
		cancel()
		if err == nil {
			if d == 0 {
				t.Errorf("Create with an ended context succeeded")
			}
			// Ready before the deadline: a sandbox like any other.
			if err := sb.Destroy(t.Context()); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Create with a %v deadline: %v, want the context's error", d, err)
		}
	}
	checkLeft()
}

// nothingLeft notes rt's sandbox cgroups and this package's sandbox
// processes, and returns a check that there are no more of either.
func nothingLeft(t *testing.T, rt *Runtime) func() {
	t.Helper()
	before := sandboxGroups(t, rt)
	procs := countSandboxProcs()
	return func() {
		t.Helper()
		after := sandboxGroups(t, rt)
		if len(after) != len(before) {
			t.Errorf("cgroups %v after, %v before", after, before)
		}
		if n := countSandboxProcs(); n != procs {
			t.Errorf("%d sandbox processes after, %d before", n, procs)
		}
	}
}

// TestOnStart: Spec.OnStart runs while init starts, with the sandbox's id
// and network namespace; its error fails the Create and leaves nothing.
func TestOnStart(t *testing.T) {
	rt := testRuntime(t)
	checkLeft := nothingLeft(t, rt)
	var seenID string
	var seenNS bool
	sb, err := rt.Create(t.Context(), Spec{Limits: DefaultLimits(), OnStart: func(sb *Sandbox) error {
		seenID, seenNS = sb.ID(), sb.NetNS() != nil
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	if seenID != sb.ID() || !seenNS {
		t.Errorf("OnStart saw id %q (want %q), a namespace: %v", seenID, sb.ID(), seenNS)
	}
	if err := sb.Destroy(t.Context()); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("attach failed")
	if _, err := rt.Create(t.Context(), Spec{Limits: DefaultLimits(), OnStart: func(*Sandbox) error { return boom }}); !errors.Is(err, boom) {
		t.Errorf("Create with a failing OnStart: %v, want its error", err)
	}
	checkLeft()
}

// TestGroupsMadeAhead: a runtime makes the next sandbox's cgroup while the
// last one runs, with the last one's limits; a sandbox with those limits
// gets it, one with others gets a new group while the one made ahead waits
// for its limits; beyond prepGroups limits the oldest is removed, and
// Close removes what nobody took, lock files included.
func TestGroupsMadeAhead(t *testing.T) {
	requireRoot(t)
	rt, err := New(t.Context(), Options{StateDir: testStateDir, CgroupParent: testCgroup, InitPath: testutil.InitPath(t)})
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	defer func() {
		if !closed {
			rt.Close()
		}
	}()
	// ready waits until n groups are ready and returns their ids.
	ready := func(n int) []string {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			ids := rt.groups.readyIDs()
			if len(ids) == n && len(rt.groups.ids()) == n {
				return ids
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d groups ready (%v), want %d", len(ids), ids, n)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	run := func(l Limits) string {
		t.Helper()
		sb, err := rt.Create(t.Context(), Spec{Limits: l})
		if err != nil {
			t.Fatal(err)
		}
		r := sb.Exec(t.Context(), ExecRequest{Argv: []string{"/bin/true"}})
		if r.Outcome != result.Exited || r.ExitCode != 0 {
			t.Fatalf("run: %s %d %s", r.Outcome, r.ExitCode, r.Error)
		}
		if err := sb.Destroy(t.Context()); err != nil {
			t.Fatal(err)
		}
		return sb.ID()
	}
	gone := func(id string) bool {
		_, err := rt.cg.Load(id)
		_, serr := os.Stat(filepath.Join(testLockDir(), id))
		return err != nil && serr != nil
	}
	if ids := rt.groups.ids(); len(ids) != 0 {
		t.Fatalf("groups made before any sandbox said which limits: %v", ids)
	}
	small := DefaultLimits()
	small.Memory, small.Pids = 48<<20, 40
	run(small)
	next := ready(1)[0]
	// Made with the last sandbox's limits.
	checked := 0
	for _, m := range []string{"/sys/fs/cgroup/memory", "/sys/fs/cgroup"} {
		dir := filepath.Join(m, testCgroup, next)
		for file, want := range map[string]string{"memory.limit_in_bytes": "50331648", "memory.max": "50331648", "pids.max": "40"} {
			b, err := os.ReadFile(filepath.Join(dir, file))
			if err != nil {
				continue // the other version's file, or pids in its own v1 hierarchy
			}
			checked++
			if got := strings.TrimSpace(string(b)); got != want {
				t.Errorf("%s of the group made ahead is %s, want %s", file, got, want)
			}
		}
	}
	if checked == 0 {
		t.Fatalf("group %s made ahead has no memory limit file", next)
	}
	if got := run(small); got != next {
		t.Errorf("the sandbox got id %s, not the group made ahead (%s)", got, next)
	}
	// Other limits: a group of their own; the one made ahead for the
	// first stays for them.
	kept := ready(1)[0]
	if got := run(DefaultLimits()); got == kept {
		t.Errorf("a sandbox with other limits got the group made for %+v", small)
	}
	ready(2)
	if got := run(small); got != kept {
		t.Errorf("the sandbox got id %s, not the group kept for its limits (%s)", got, kept)
	}
	// Beyond prepGroups limits the oldest goes.
	oldest := ready(2)[0]
	for i := range prepGroups {
		l := DefaultLimits()
		l.Pids = int64(50 + i)
		run(l)
	}
	ready(prepGroups)
	if !gone(oldest) {
		t.Errorf("the oldest group made ahead (%s) outlived %d newer limits", oldest, prepGroups)
	}
	last := ready(prepGroups)
	if err := rt.Close(); err != nil {
		t.Fatal(err)
	}
	closed = true
	for _, id := range last {
		if !gone(id) {
			t.Errorf("Close left the group made ahead %s or its lock file", id)
		}
	}
}

// TestSweepBesideLiveTeardown sweeps from a second runtime, over and over,
// while the first creates and destroys sandboxes: a sandbox whose owner
// removes it between the sweeper's listing and its lock is not a leftover,
// and the sweep must neither fail on it nor disturb the owner. Parallel
// one-shot runs (airlock run beside airlock run) meet this constantly.
func TestSweepBesideLiveTeardown(t *testing.T) {
	owner := testRuntime(t)
	sweeper, err := New(t.Context(), Options{StateDir: testStateDir, CgroupParent: testCgroup, InitPath: testutil.InitPath(t), OneShot: true})
	if err != nil {
		t.Fatal(err)
	}
	defer sweeper.Close()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	var failures []string
	fail := func(s string) {
		mu.Lock()
		failures = append(failures, s)
		mu.Unlock()
	}
	for range 2 {
		wg.Go(func() {
			for i := 0; i < 60; i++ {
				sb, err := owner.Create(t.Context(), Spec{Limits: DefaultLimits()})
				if err != nil {
					fail("create: " + err.Error())
					return
				}
				if err := sb.Destroy(t.Context()); err != nil {
					fail("destroy: " + err.Error())
				}
			}
		})
	}
	sweeps := 0
	go func() { wg.Wait(); close(stop) }()
	for done := false; !done; {
		select {
		case <-stop:
			done = true
		default:
		}
		n, err := sweeper.Sweep(t.Context())
		sweeps++
		if err != nil {
			fail("sweep: " + err.Error())
		}
		if n != 0 {
			fail(fmt.Sprintf("sweep removed %d live sandboxes", n))
		}
	}
	if len(failures) > 0 {
		t.Fatalf("%d failures over %d sweeps, first: %s", len(failures), sweeps, failures[0])
	}
	t.Logf("%d sweeps beside 120 sandboxes", sweeps)
}

// TestSweepOtherStateDir runs a second runtime with a state directory of
// its own but the same cgroup parent (two daemons configured apart, both
// on the default cgroup parent): its sweep must leave the first runtime's
// live sandbox alone.
func TestSweepOtherStateDir(t *testing.T) {
	owner := testRuntime(t)
	sb, err := owner.Create(t.Context(), Spec{Limits: DefaultLimits()})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Destroy(context.Background())
	other := t.TempDir()
	// The sandboxes' users must pass through the state directory's
	// parents (CheckStateDir); t.TempDir makes its own 0700.
	if err := os.Chmod(filepath.Dir(other), 0o711); err != nil {
		t.Fatal(err)
	}
	rt, err := New(t.Context(), Options{StateDir: other, CgroupParent: testCgroup, InitPath: testutil.InitPath(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	if n, err := rt.Sweep(t.Context()); n != 0 || err != nil {
		t.Errorf("the other runtime swept %d sandboxes (%v)", n, err)
	}
	if r := sb.Exec(t.Context(), ExecRequest{Argv: []string{"true"}}); r.Outcome != result.Exited || r.ExitCode != 0 {
		t.Fatalf("the live sandbox after the other runtime's sweep: %s %d %s", r.Outcome, r.ExitCode, r.Error)
	}
}
