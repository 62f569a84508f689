package sandbox

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/testutil"
	"github.com/airlockhq/airlock/result"
	"golang.org/x/sys/unix"
)

func TestMain(m *testing.M) {
	// The sandboxes these tests create re-execute the test binary as their
	// init.
	if code, ok := Child(); ok {
		os.Exit(code)
	}
	code := m.Run()
	// The shared runtime's groups made ahead go with it.
	if rtVal != nil {
		rtVal.Close()
	}
	os.Exit(code)
}

// sandboxGroups lists rt's sandbox cgroups, without those its supply has
// made ahead (which belong to no sandbox yet).
func sandboxGroups(t testing.TB, rt *Runtime) []string {
	t.Helper()
	ids, err := rt.cg.Children()
	if err != nil {
		t.Fatal(err)
	}
	if rt.groups == nil {
		return ids
	}
	ahead := rt.groups.ids()
	return slices.DeleteFunc(ids, func(id string) bool { return slices.Contains(ahead, id) })
}

func requireRoot(t testing.TB) { testutil.RequireRoot(t) }

const testStateDir = "/run/airlock-test-sandbox"

var testCgroup = testutil.CgroupParent("/airlock-test-sandbox")

var (
	rtOnce sync.Once
	rtVal  *Runtime
	rtErr  error
)

func testRuntime(t testing.TB) *Runtime {
	t.Helper()
	requireRoot(t)
	rtOnce.Do(func() {
		rtVal, rtErr = New(t.Context(), Options{StateDir: testStateDir, CgroupParent: testCgroup, InitPath: testutil.InitPath(t), Runsc: os.Getenv(testutil.RunscEnv)})
	})
	if rtErr != nil {
		t.Fatal(rtErr)
	}
	return rtVal
}

// spawnerRuntime is a runtime that clones through the spawner, as where
// clones copy memory (race builds, other architectures).
func spawnerRuntime(t testing.TB) *Runtime {
	t.Helper()
	testRuntime(t)
	rt, err := New(t.Context(), Options{StateDir: testStateDir, CgroupParent: testCgroup, InitPath: testutil.InitPath(t), spawner: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Close() })
	return rt
}

// testProg returns the attack program, built once per test binary.
func testProg(t testing.TB) []byte {
	t.Helper()
	b, err := os.ReadFile(testutil.Binary(t, "github.com/airlockhq/airlock/internal/testprog"))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// withProg wraps args so that the attack program, fed on stdin, is
// installed in /workspace and run with them.
func withProg(args ...string) []string {
	return append([]string{"/bin/sh", "-c", `cat > /workspace/t && chmod +x /workspace/t && exec /workspace/t "$@"`, "sh"}, args...)
}

type runOpts struct {
	limits *Limits
	stdin  []byte
	env    []string
	spec   func(*Spec)
	// during is called with the live sandbox before the command runs.
	during func(*Sandbox)
}

// run creates a sandbox, runs argv, destroys it and checks that nothing
// of it is left on the host.
func run(t *testing.T, o runOpts, argv ...string) *result.Result {
	t.Helper()
	rt := testRuntime(t)
	spec := Spec{Limits: DefaultLimits()}
	spec.Limits.Time = 30e9
	if o.limits != nil {
		spec.Limits = *o.limits
	}
	if o.spec != nil {
		o.spec(&spec)
	}
	// A one-command sandbox is started, not created: Create waits for
	// init, which such a sandbox then starts with (Spec.OneCommand).
	create := rt.Create
	if spec.OneCommand {
		create = rt.Start
	}
	sb, err := create(t.Context(), spec)
	if err != nil {
		t.Fatal(err)
	}
	trace := traceOf(t, sb)
	if o.during != nil {
		o.during(sb)
	}
	req := ExecRequest{Argv: argv, Env: o.env, Capture: true}
	if o.stdin != nil {
		req.Stdin = bytes.NewReader(o.stdin)
	}
	r := sb.Exec(t.Context(), req)
	if err := sb.Destroy(t.Context()); err != nil {
		t.Errorf("Destroy: %v", err)
	}
	trace.assertGone(t)
	return r
}

// attack runs the test program with args and decodes its report.
func attack(t *testing.T, args ...string) (report, *result.Result) {
	t.Helper()
	return attackOn(t, backend{name: IsolationNamespaces}, args...)
}

// attackOn is attack on backend be.
func attackOn(t *testing.T, be backend, args ...string) (report, *result.Result) {
	t.Helper()
	r := run(t, runOpts{stdin: testProg(t), spec: be.spec}, withProg(args...)...)
	var rep report
	line := strings.TrimSpace(string(r.Stdout))
	if r.Outcome == result.Exited && r.ExitCode == 0 {
		if err := json.Unmarshal([]byte(line), &rep); err != nil {
			t.Fatalf("%v: bad report %q (stderr %q): %v", args, line, r.Stderr, err)
		}
	}
	return rep, r
}

type report struct {
	OK    bool   `json:"ok"`
	Errno int    `json:"errno"`
	Error string `json:"error"`
	Value string `json:"value"`
}

// trace records what a sandbox owns on the host, to prove later that all
// of it is gone.
type trace struct {
	id       string
	initPid  int
	uidBase  uint32
	netnsIno uint64
	lock     string
	// bundle is a gVisor sandbox's directory, "" for the other backend.
	bundle string
}

func traceOf(t *testing.T, sb *Sandbox) *trace {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Fstat(int(sb.NetNS().Fd()), &st); err != nil {
		t.Fatal(err)
	}
	return &trace{
		id:       sb.ID(),
		initPid:  sb.InitPid(),
		uidBase:  sb.HostIDBase(),
		netnsIno: st.Ino,
		lock:     filepath.Join(testLockDir(), sb.ID()),
		bundle:   bundleOf(sb),
	}
}

func (tr *trace) assertGone(t *testing.T) {
	t.Helper()
	if paths := cgroupDirs(tr.id); len(paths) > 0 {
		t.Errorf("cgroup of sandbox %s left: %v", tr.id, paths)
	}
	if _, err := os.Stat(tr.lock); !os.IsNotExist(err) {
		t.Errorf("lock file %s left (err %v)", tr.lock, err)
	}
	// The kernel kills a pid namespace's processes once its init is dead,
	// asynchronously, and a parent then reaps them: give that a moment on
	// a loaded machine.
	pids := procsInRange(tr.uidBase)
	for deadline := time.Now().Add(2 * time.Second); len(pids) > 0 && time.Now().Before(deadline); pids = procsInRange(tr.uidBase) {
		time.Sleep(20 * time.Millisecond)
	}
	if len(pids) > 0 {
		t.Errorf("processes of sandbox %s left: %v", tr.id, pids)
	}
	if pids := netnsHolders(tr.netnsIno); len(pids) > 0 {
		t.Errorf("network namespace of sandbox %s still held by %v", tr.id, pids)
	}
	if tr.bundle != "" {
		if _, err := os.Stat(tr.bundle); !os.IsNotExist(err) {
			t.Errorf("gvisor bundle of sandbox %s left (err %v)", tr.id, err)
		}
	}
	if m := hostMountsUnder(testStateDir); len(m) > 0 {
		t.Errorf("mounts left under the state dir: %v", m)
	}
}

// cgroupDirs finds the sandbox's cgroup in any hierarchy.
func cgroupDirs(id string) []string {
	var found []string
	for _, pat := range []string{"/sys/fs/cgroup/*" + testCgroup + "/" + id, "/sys/fs/cgroup" + testCgroup + "/" + id} {
		m, _ := filepath.Glob(pat)
		found = append(found, m...)
	}
	return found
}

// hostPids lists every process on the host.
func hostPids() []int {
	var pids []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		if pid, err := strconv.Atoi(e.Name()); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids
}

// procsInRange lists host processes whose uid lies in the sandbox's range.
func procsInRange(base uint32) []int {
	var pids []int
	for _, pid := range hostPids() {
		uid, ok := procUID(pid)
		if ok && uid >= base && uid < base+idRangeSize {
			pids = append(pids, pid)
		}
	}
	return pids
}

func procUID(pid int) (uint32, bool) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "Uid:"); ok {
			fields := strings.Fields(v)
			if len(fields) > 0 {
				n, err := strconv.ParseUint(fields[0], 10, 32)
				return uint32(n), err == nil
			}
		}
	}
	return 0, false
}

func netnsHolders(ino uint64) []int {
	var pids []int
	for _, pid := range hostPids() {
		var st unix.Stat_t
		if unix.Stat(fmt.Sprintf("/proc/%d/ns/net", pid), &st) == nil && st.Ino == ino {
			pids = append(pids, pid)
		}
	}
	return pids
}

func hostMountsUnder(dir string) []string {
	b, _ := os.ReadFile("/proc/self/mountinfo")
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) > 4 && strings.HasPrefix(f[4], dir) {
			out = append(out, f[4])
		}
	}
	return out
}

// testLockDir holds the tests' sandbox locks (Options.GroupLockDir's
// default, for the tests' cgroup parent).
func testLockDir() string { return groupLockDir("/run/airlock/groups", testCgroup) }
