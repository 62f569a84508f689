package cgroup

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// fakeV2Tree builds a directory tree that looks like a cgroup2 hierarchy
// to openV2: per level, cgroup.controllers with the given content and an
// empty cgroup.subtree_control. It needs no root, which makes the
// delegation logic testable on any host.
func fakeV2Tree(t *testing.T, levels map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for rel, ctrls := range levels {
		d := filepath.Join(root, rel)
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		for f, content := range map[string]string{"cgroup.controllers": ctrls, "cgroup.subtree_control": ""} {
			if err := os.WriteFile(filepath.Join(d, f), []byte(content), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	return root
}

func TestOpenV2Delegation(t *testing.T) {
	all := "cpuset cpu io memory hugetlb pids rdma misc\n"
	tests := []struct {
		name    string
		levels  map[string]string
		wantErr string
	}{
		{"all available", map[string]string{"": all, "srv": all, "srv/airlock": all}, ""},
		{"memory missing at the root", map[string]string{"": "cpu io pids\n", "srv": all, "srv/airlock": all},
			`cgroup v2 controller "memory" not available under / `},
		{"cpu missing in the middle", map[string]string{"": all, "srv": "memory pids\n", "srv/airlock": all},
			`cgroup v2 controller "cpu" not available under /srv `},
		{"pids missing at the parent", map[string]string{"": all, "srv": all, "srv/airlock": "cpu memory\n"},
			`cgroup v2 controller "pids" not available under /srv/airlock `},
		{"nothing delegated (hybrid unified mount)", map[string]string{"": "hugetlb\n", "srv": "", "srv/airlock": ""},
			`cgroup v2 controller "memory" not available under / `},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			root := fakeV2Tree(t, tc.levels)
			p, err := openV2(root, "/srv/airlock", v2Controllers)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("openV2 error = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("openV2: %v", err)
			}
			for _, rel := range []string{"", "srv", "srv/airlock"} {
				got, err := os.ReadFile(filepath.Join(root, rel, "cgroup.subtree_control"))
				if want := "+memory +pids +cpu"; err != nil || string(got) != want {
					t.Errorf("/%s cgroup.subtree_control = %q, %v; want %q", rel, got, err, want)
				}
			}
			if p.Version() != V2 || p.hasKill || p.hasOOMGroup {
				t.Errorf("parent = version %v, hasKill %v, hasOOMGroup %v; want v2 without features on a fake tree", p.Version(), p.hasKill, p.hasOOMGroup)
			}
		})
	}
}

func TestOpenV2CreatesParent(t *testing.T) {
	root := fakeV2Tree(t, map[string]string{"": "memory pids cpu\n"})
	// Levels below the root are created; in a real cgroup2 mount the
	// kernel fills them with files, here the next level has no
	// cgroup.controllers, so the walk must report that file.
	_, err := openV2(root, "/new/parent", v2Controllers)
	if err == nil || !strings.Contains(err.Error(), filepath.Join(root, "new", "cgroup.controllers")) {
		t.Errorf("openV2 error = %v, want it to name the missing cgroup.controllers of /new", err)
	}
	if _, err := os.Stat(filepath.Join(root, "new")); err != nil {
		t.Errorf("intermediate level not created: %v", err)
	}
	if got, _ := os.ReadFile(filepath.Join(root, "cgroup.subtree_control")); string(got) != "+memory +pids +cpu" {
		t.Errorf("root subtree_control = %q, want %q", got, "+memory +pids +cpu")
	}
}

// realV2Mount returns a cgroup2 mount of this host. On a hybrid host that
// is the unified mount without controllers, which still has everything
// but the controllers: cgroup.events, cgroup.kill, cgroup.freeze,
// cgroup.procs and cpu.stat.
func realV2Mount(t *testing.T) string {
	t.Helper()
	requireRoot(t)
	for _, m := range cgroupMounts(t) {
		if m.fstype == "cgroup2" && m.root == "/" {
			return m.point
		}
	}
	t.Skip("no cgroup2 mount on this host")
	return ""
}

// TestV2MissingControllerOnHost opens the host's cgroup2 mount with the
// controllers airlock needs. On a hybrid host they are bound to v1, so the
// error must name one of them; on a unified host Open works.
func TestV2MissingControllerOnHost(t *testing.T) {
	mount := realV2Mount(t)
	name := testParentName(t)
	t.Cleanup(func() { removeTestParent(t, name) })
	avail, err := os.ReadFile(filepath.Join(mount, "cgroup.controllers"))
	if err != nil {
		t.Fatal(err)
	}
	missing := ""
	for _, c := range v2Controllers {
		if !hasWord(avail, c) {
			missing = c
			break
		}
	}
	_, err = openV2(mount, name, v2Controllers)
	if missing == "" {
		if err != nil {
			t.Errorf("openV2 on a mount with all controllers: %v", err)
		}
		return
	}
	want := `cgroup v2 controller "` + missing + `" not available under /`
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("openV2(%s, %s) error = %v, want one containing %q", mount, name, err, want)
	}
}

// TestV2Lifecycle runs the v2 code paths that need no controller on the
// host's cgroup2 mount: Create, DirFD with CLONE_INTO_CGROUP, Populated,
// Counters (cpu.stat), Kill through cgroup.kill and through the freezer
// fallback, Children, Load and Delete.
func TestV2Lifecycle(t *testing.T) {
	mount := realV2Mount(t)
	name := testParentName(t)
	t.Cleanup(func() { removeTestParent(t, name) })
	p, err := openV2(mount, name, nil)
	if err != nil {
		t.Fatalf("openV2(%s, %s, no controllers): %v", mount, name, err)
	}
	if _, err := p.Create("limited", Limits{MemoryBytes: 1 << 30}); err == nil || !strings.Contains(err.Error(), `"memory" is not enabled`) {
		t.Errorf("Create with a memory limit and no memory controller: %v, want a clear error", err)
	}

	hasKill := p.hasKill
	for _, mode := range []struct {
		name    string
		hasKill bool
	}{{"cgroup.kill", true}, {"freezer fallback", false}} {
		t.Run(mode.name, func(t *testing.T) {
			if mode.hasKill && !hasKill {
				t.Skip("kernel has no cgroup.kill (< 5.14)")
			}
			// Subtests run one after another, so toggling the probed
			// feature on the shared Parent is safe.
			p.hasKill = mode.hasKill
			defer func() { p.hasKill = hasKill }()
			q := p
			id := strings.ReplaceAll(mode.name, ".", "-")
			id = strings.ReplaceAll(id, " ", "-")
			g, err := q.Create(id, Limits{})
			if err != nil {
				t.Fatalf("Create: %v", err)
			}
			if _, err := g.EnterThread(); err == nil {
				t.Error("EnterThread on v2 succeeded, want an error")
			}
			stopped := exec.Command("sleep", "100")
			stubborn := exec.Command("sh", "-c", `trap "" TERM; sleep 100; true`)
			startInGroup(t, g, stopped)
			startInGroup(t, g, stubborn)
			assertInGroup(t, q, stopped.Process.Pid, g)
			if err := unix.Kill(stopped.Process.Pid, unix.SIGSTOP); err != nil {
				t.Fatal(err)
			}
			waitFor(t, "SIGSTOP to take effect", 5*time.Second, func() bool { return procState(stopped.Process.Pid) == "T" })
			if pop, err := g.Populated(); err != nil || !pop {
				t.Errorf("Populated() = %v, %v; want true, nil", pop, err)
			}
			c, err := g.Counters()
			if err != nil {
				t.Fatalf("Counters: %v", err)
			}
			if c.CPUUsageNanos <= 0 || c.CPUUsageNanos%1000 != 0 {
				t.Errorf("Counters().CPUUsageNanos = %d, want a positive multiple of 1000 (exec costs CPU)", c.CPUUsageNanos)
			}
			if ids, err := q.Children(); err != nil || len(ids) != 1 || ids[0] != id {
				t.Errorf("Children() = %q, %v; want [%s]", ids, err, id)
			}
			pids := readPids(g.dirs[0])

			if err := g.Kill(t.Context()); err != nil {
				t.Fatalf("Kill: %v", err)
			}
			if pop, err := g.Populated(); err != nil || pop {
				t.Errorf("Populated() after Kill = %v, %v; want false, nil", pop, err)
			}
			// A killed process leaves the group as it starts to exit, and
			// may still read as running (R) in do_exit a moment later (the
			// emulated guest's moment is long): each is given 5 s to be
			// gone or a zombie.
			for _, pid := range pids {
				deadline := time.Now().Add(5 * time.Second)
				s := procState(pid)
				for s != "" && s != "Z" && s != "X" && time.Now().Before(deadline) {
					time.Sleep(10 * time.Millisecond)
					s = procState(pid)
				}
				if s != "" && s != "Z" && s != "X" {
					t.Errorf("pid %d survived Kill in state %s", pid, s)
				}
			}
			if frozen, err := os.ReadFile(filepath.Join(g.dirs[0], "cgroup.freeze")); err != nil || strings.TrimSpace(string(frozen)) != "0" {
				t.Errorf("cgroup.freeze after Kill = %q, %v; want 0 (thawed)", frozen, err)
			}
			for _, c := range []*exec.Cmd{stopped, stubborn} {
				if err := c.Wait(); !killedBySIGKILL(err) {
					t.Errorf("%v: Wait() = %v, want death by SIGKILL", c.Args, err)
				}
			}
			l, err := q.Load(id)
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			if err := l.Delete(t.Context()); err != nil {
				t.Fatalf("Delete: %v", err)
			}
			if _, err := os.Stat(g.dirs[0]); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("group directory after Delete: %v, want not exist", err)
			}
			if err := g.Delete(t.Context()); err != nil {
				t.Errorf("second Delete: %v", err)
			}
		})
	}
}

// TestV2AddProc covers the v2 fallback placement.
func TestV2AddProc(t *testing.T) {
	mount := realV2Mount(t)
	name := testParentName(t)
	t.Cleanup(func() { removeTestParent(t, name) })
	p, err := openV2(mount, name, nil)
	if err != nil {
		t.Fatal(err)
	}
	g, err := p.Create("addproc", Limits{})
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("sleep", "100")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	if err := g.AddProc(cmd.Process.Pid); err != nil {
		t.Fatalf("AddProc: %v", err)
	}
	if got := readPids(g.dirs[0]); len(got) != 1 || got[0] != cmd.Process.Pid {
		t.Errorf("cgroup.procs = %v, want [%d]", got, cmd.Process.Pid)
	}
	if err := g.Kill(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := g.Delete(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := g.AddProc(cmd.Process.Pid); err == nil || !strings.Contains(err.Error(), strconv.Itoa(cmd.Process.Pid)) {
		t.Errorf("AddProc into a deleted group: %v, want an error naming the pid", err)
	}
}

// TestV2Resources checks what Create writes on v2 for the kernel features
// Open probed: swap.max (as 0) only where swap accounting exists (without
// it the file is missing and writing it would fail every Create),
// oom.group where the kernel has it, and nothing at all when there is no
// limit and no feature.
func TestV2Resources(t *testing.T) {
	mem := limitWrite{0, "memory.max", "1048576"}
	swap := limitWrite{0, "memory.swap.max", "0"}
	oom := limitWrite{0, "memory.oom.group", "1"}
	pids := limitWrite{0, "pids.max", "5"}
	cpu := limitWrite{0, "cpu.max", "50000 100000"}
	tests := []struct {
		name              string
		swapMax, oomGroup bool
		l                 Limits
		want              []limitWrite
	}{
		{"memory, swap accounting", true, true, Limits{MemoryBytes: 1 << 20}, []limitWrite{mem, swap, oom}},
		{"memory, no swap accounting", false, true, Limits{MemoryBytes: 1 << 20}, []limitWrite{mem, oom}},
		{"memory, old kernel", false, false, Limits{MemoryBytes: 1 << 20}, []limitWrite{mem}},
		{"no limits, old kernel", false, false, Limits{}, nil},
		{"no limits, swap accounting", true, false, Limits{}, nil},
		{"pids only, no swap accounting", false, true, Limits{Pids: 5}, []limitWrite{oom, pids}},
		{"all, swap accounting", true, true, Limits{MemoryBytes: 1 << 20, Pids: 5, CPUMilli: 500}, []limitWrite{mem, swap, oom, pids, cpu}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := &Parent{version: V2, ctrls: v2Controllers, hasSwapMax: tc.swapMax, hasOOMGroup: tc.oomGroup}
			got, err := p.v2Resources(tc.l)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("v2Resources(%+v) = %+v, want %+v", tc.l, got, tc.want)
			}
		})
	}
}

// TestV2ResourcesNeedsController checks that a limit whose controller the
// parent does not delegate is refused before anything is made.
func TestV2ResourcesNeedsController(t *testing.T) {
	tests := []struct {
		l    Limits
		want string
	}{
		{Limits{MemoryBytes: 1 << 20}, `"memory" is not enabled`},
		{Limits{Pids: 5}, `"pids" is not enabled`},
		{Limits{CPUMilli: 100}, `"cpu" is not enabled`},
	}
	p := &Parent{version: V2, path: "/airlock"}
	for _, tc := range tests {
		if _, err := p.v2Resources(tc.l); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("v2Resources(%+v) without controllers: %v, want an error containing %q", tc.l, err, tc.want)
		}
	}
}
