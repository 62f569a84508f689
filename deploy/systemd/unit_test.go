package systemd

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/client"
	"github.com/airlockhq/airlock/result"
)

// SourceEnv names the directory TestUnitUnderSystemd installs from: a
// tree with bin/ (the three programs, built) and deploy/, as a clone of
// the repository is after the README's build. Only the guest of
// scripts/test-vm --systemd sets it: the test installs airlock into
// /usr/local/bin and /etc, enables a service and adds users.
const SourceEnv = "AIRLOCK_TEST_SYSTEMD_SRC"

const (
	unitName = "airlock.service"
	// svcGroup is the service's cgroup (systemd's ControlGroup).
	svcGroup = "/system.slice/airlock.service"
	// parent is the unit's --cgroup-parent on a cgroup-v2-only host.
	parent = svcGroup + "/sandboxes"
	socket = "/run/airlock/airlock.sock"
	// runscPath is where the gvisor subtest installs runsc, as
	// docs/isolation.md says.
	runscPath = "/usr/local/libexec/airlock/runsc"
)

// installSteps returns the shell commands at the top of the unit: the
// lines indented under "Install (as root):", up to the first blank
// comment line.
func installSteps(t *testing.T, unit string) []string {
	t.Helper()
	var steps []string
	in := false
	for line := range strings.Lines(unit) {
		line = strings.TrimRight(line, "\n")
		switch {
		case strings.Contains(line, "Install (as root):"):
			in = true
		case !in:
		case strings.HasPrefix(line, "#   "):
			steps = append(steps, strings.TrimPrefix(line, "#   "))
		case strings.TrimSpace(line) == "#" && len(steps) > 0:
			return steps
		}
	}
	t.Fatalf("the unit's header has no install steps")
	return nil
}

// TestInstallSteps checks the header the way an operator reads it: every
// step names a file that exists in the repository, and the drop-in for
// hosts with cgroup v1 controllers changes the unit's ExecStart only by
// dropping --cgroup-parent.
func TestInstallSteps(t *testing.T) {
	unit, err := os.ReadFile(unitName)
	if err != nil {
		t.Fatal(err)
	}
	steps := installSteps(t, string(unit))
	files := regexp.MustCompile(`(?:bin|deploy)/[a-z0-9./-]+`)
	for _, s := range steps {
		for _, f := range files.FindAllString(s, -1) {
			if strings.HasPrefix(f, "bin/") {
				if !slices.Contains([]string{"bin/airlock", "bin/airlockd", "bin/airlock-init"}, f) {
					t.Errorf("step %q installs %s, which is not one of the three programs", s, f)
				}
				continue
			}
			if _, err := os.Stat(filepath.Join("../..", f)); err != nil {
				t.Errorf("step %q: %v", s, err)
			}
		}
	}
	execStart := func(b []byte) []string {
		var last string
		for line := range strings.Lines(string(b)) {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "ExecStart="); ok {
				last = v // an empty ExecStart= resets the list; the last one is what runs
			}
		}
		return strings.Fields(last)
	}
	drop, err := os.ReadFile("cgroup-v1.conf")
	if err != nil {
		t.Fatal(err)
	}
	v2, v1 := execStart(unit), execStart(drop)
	if !strings.Contains(string(drop), "\nExecStart=\n") {
		t.Errorf("cgroup-v1.conf does not reset ExecStart (an empty ExecStart= line), so systemd would refuse a second one for Type=exec")
	}
	i := slices.Index(v2, "--cgroup-parent")
	if i < 0 || i+1 >= len(v2) || v2[i+1] != parent {
		t.Fatalf("the unit's ExecStart %q has no --cgroup-parent %s", v2, parent)
	}
	if want := slices.Delete(slices.Clone(v2), i, i+2); !slices.Equal(v1, want) {
		t.Errorf("cgroup-v1.conf runs %q, want the unit's ExecStart without --cgroup-parent: %q", v1, want)
	}
}

// TestUnitUnderSystemd installs airlock as the unit's header says, on a
// host whose PID 1 is systemd, and checks what an operator relies on:
// the service starts; its sandboxes live below its delegated cgroup; the
// socket serves the socket group's members and no one else; a reload
// adds a tool and keeps a session; a restart replaces the daemon and its
// sandboxes; a MemoryMax= on the service becomes the node's memory
// budget; and a stop lets a run in flight finish, then ends every
// sandbox within the stop timeout, leaving no process, cgroup, mount,
// network namespace or uid lock.
func TestUnitUnderSystemd(t *testing.T) {
	src := os.Getenv(SourceEnv)
	if src == "" {
		t.Skipf("installs airlock as a systemd service on this host: runs only where %s is set (the guest of scripts/test-vm --systemd)", SourceEnv)
	}
	if comm, _ := os.ReadFile("/proc/1/comm"); string(comm) != "systemd\n" {
		t.Fatalf("PID 1 is %q, not systemd", comm)
	}
	v2 := exists("/sys/fs/cgroup/cgroup.controllers")
	mountsBefore := hostMounts(t)
	ctx := t.Context()

	unit, err := os.ReadFile(filepath.Join(src, "deploy/systemd", unitName))
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for _, step := range installSteps(t, string(unit)) {
		out, err := shell(ctx, src, step)
		t.Logf("$ %s\n%s", step, out)
		if err != nil {
			t.Fatalf("install step %q: %v", step, err)
		}
	}
	c := client.New(socket)
	waitHealthy(t, c)
	t.Logf("the service answered %.1fs after the install steps began", time.Since(start).Seconds())
	props := show(t, "ActiveState", "SubState", "MainPID", "ControlGroup", "Delegate", "UnitFileState")
	if props["ActiveState"] != "active" || props["SubState"] != "running" || props["UnitFileState"] != "enabled" || props["Delegate"] != "yes" {
		t.Fatalf("after the install steps: %v", props)
	}
	if props["ControlGroup"] != svcGroup {
		t.Fatalf("the service's cgroup is %q, want %s", props["ControlGroup"], svcGroup)
	}
	mainPID := props["MainPID"]
	dropIns := show(t, "DropInPaths")["DropInPaths"]
	if hasDropIn := strings.Contains(dropIns, "cgroup-v1.conf"); hasDropIn == v2 {
		t.Errorf("cgroup v2 only: %v; the unit's drop-ins: %q (cgroup-v1.conf belongs on hosts with v1 controllers only)", v2, dropIns)
	}
	if v2 {
		// The daemon stepped aside into a leaf of its service's group, so
		// that group can hand its controllers down (architecture.md).
		if got, want := procCgroup(t, mainPID), svcGroup+"/airlock.supervisor"; got != want {
			t.Errorf("the daemon (pid %s) is in cgroup %s, want %s", mainPID, got, want)
		}
	}

	// A session, and the pools' warm sandboxes: every sandbox's init is
	// in a group of its own below the unit's --cgroup-parent, and the
	// session's group holds its tool's memory ceiling.
	sess, err := c.CreateSession(ctx, api.SessionRequest{Tool: "sh"})
	if err != nil {
		t.Fatal(err)
	}
	inits := sandboxInits(t)
	if len(inits) < 2 {
		t.Fatalf("%d sandboxes live with a session open and pools warm, want at least 2", len(inits))
	}
	sandboxParent := parent
	if !v2 {
		sandboxParent = "/airlock"
	}
	netnsSeen := map[string]bool{}
	var sessInit string
	for pid, cg := range inits {
		if filepath.Dir(cg) != sandboxParent {
			t.Errorf("sandbox init %s is in cgroup %s, not below %s", pid, cg, sandboxParent)
		}
		if filepath.Base(cg) == sess.SandboxID {
			sessInit = pid
		}
		if ns, err := os.Readlink("/proc/" + pid + "/ns/net"); err == nil {
			netnsSeen[ns] = true
		}
	}
	if sessInit == "" {
		t.Fatalf("no sandbox init is in the session's group %s/%s (inits: %v)", sandboxParent, sess.SandboxID, inits)
	}
	if v2 {
		if got := readTrim(t, "/sys/fs/cgroup"+parent+"/"+sess.SandboxID+"/memory.max"); got != strconv.Itoa(256<<20) {
			t.Errorf("the session's memory.max is %s, want the sh tool's 256MiB", got)
		}
	}

	t.Run("socket group", func(t *testing.T) {
		fi, err := os.Stat(socket)
		if err != nil {
			t.Fatal(err)
		}
		gid := lookupGroup(t, "airlock")
		if st := fi.Sys().(*syscall.Stat_t); fi.Mode()&os.ModeSocket == 0 || fi.Mode().Perm() != 0o660 || st.Uid != 0 || int(st.Gid) != gid {
			t.Fatalf("socket %s: mode %v, owner %d:%d; want a socket, 0660, root:airlock (%d)", socket, fi.Mode(), st.Uid, st.Gid, gid)
		}
		mustShell(t, "id alice >/dev/null 2>&1 || useradd --create-home --groups airlock alice")
		mustShell(t, "id bob >/dev/null 2>&1 || useradd --create-home bob")
		out, err := shell(ctx, "/", "runuser -u alice -- airlock run --tool sh -- sh -c 'echo ran for $(id -un)'")
		if err != nil || !strings.Contains(out, "ran for sandbox") {
			t.Errorf("alice, in group airlock: %v\n%s", err, out)
		}
		out, err = shell(ctx, "/", "runuser -u bob -- airlock run --tool sh -- echo should not run")
		if err == nil || strings.Contains(out, "should not run") || !strings.Contains(strings.ToLower(out), "permission denied") {
			t.Errorf("bob, not in group airlock, was not refused by the socket's permissions: %v\n%s", err, out)
		}
	})

	t.Run("reload", func(t *testing.T) {
		cfg := readTrim(t, "/etc/airlock/airlock.yaml")
		added := strings.Replace(cfg, "tools:\n", "tools:\n  added:\n    description: A tool a reload adds\n    limits: {memory: 64MiB, pids: 16, time: 10s}\n\n", 1)
		if added == cfg {
			t.Fatal("the config has no tools: section to add a tool to")
		}
		if err := os.WriteFile("/etc/airlock/airlock.yaml", []byte(added+"\n"), 0o640); err != nil {
			t.Fatal(err)
		}
		mustShell(t, "systemctl reload airlock")
		deadline := time.Now().Add(60 * time.Second)
		for !hasTool(ctx, c, "added") {
			if time.Now().After(deadline) {
				t.Fatalf("60s after systemctl reload the daemon serves no tool \"added\"")
			}
			time.Sleep(200 * time.Millisecond)
		}
		if out, err := shell(ctx, "/", "airlock run --tool added -- echo added"); err != nil || out != "added\n" {
			t.Errorf("a run of the added tool: %v %q", err, out)
		}
		if pid := show(t, "MainPID")["MainPID"]; pid != mainPID {
			t.Errorf("the daemon's pid went from %s to %s on a reload", mainPID, pid)
		}
		// The session in flight keeps its sandbox.
		res, err := c.Exec(ctx, sess.ID, api.ExecRequest{Argv: []string{"echo", "still here"}})
		if err != nil || string(res.Stdout) != "still here\n" {
			t.Errorf("the session after a reload: %v %+v", err, res)
		}
		if !exists("/proc/" + sessInit) {
			t.Errorf("the session's sandbox init (pid %s) is gone after a reload", sessInit)
		}
	})

	t.Run("gvisor", func(t *testing.T) {
		// runsc installed as docs/isolation.md says, where only root can
		// change it; then a reload adds a tool on gVisor, which the
		// daemon checks by making a gVisor sandbox before it takes the
		// config.
		runsc := filepath.Join(src, "bin", "runsc")
		if !exists(runsc) {
			t.Skipf("no runsc in %s/bin (scripts/test-vm copies the one AIRLOCK_TEST_RUNSC names)", src)
		}
		mustShell(t, "install -D -m 0755 "+runsc+" "+runscPath)
		cfg := readTrim(t, "/etc/airlock/airlock.yaml")
		added := strings.Replace(cfg, "tools:\n", "tools:\n  gv:\n    description: A tool on gVisor\n    isolation: gvisor\n    limits: {memory: 128MiB, pids: 128, time: 60s}\n\n", 1)
		if err := os.WriteFile("/etc/airlock/airlock.yaml", []byte(added+"\n"), 0o640); err != nil {
			t.Fatal(err)
		}
		mustShell(t, "systemctl reload airlock")
		deadline := time.Now().Add(120 * time.Second)
		for !hasTool(ctx, c, "gv") {
			if time.Now().After(deadline) {
				t.Fatalf("120s after systemctl reload the daemon serves no tool \"gv\":\n%s", journal(t))
			}
			time.Sleep(500 * time.Millisecond)
		}
		out, err := shell(ctx, "/", "airlock run --tool gv -- sh -c 'uname -r; id -un'")
		if err != nil || !strings.Contains(out, "gvisor") || !strings.HasSuffix(out, "\nsandbox\n") {
			t.Fatalf("a run of the gvisor tool: %v %q, want gVisor's kernel and the sandbox user", err, out)
		}
		// A memory breach under gVisor, named as on the other backend:
		// the guest's memory and the sentry's own count in memory.max.
		// (Processes are checked on hybrid hosts by the sandbox package;
		// here a fork bomb takes 15 s of TCG.)
		start := time.Now()
		r, err := c.Run(ctx, api.RunRequest{Tool: "gv", Argv: []string{"sh", "-c", "dd if=/dev/zero of=/dev/null bs=200M count=1; echo survived"}})
		if err != nil || r.Outcome != result.LimitExceeded || r.Limit == nil || r.Limit.Name != result.LimitMemory {
			t.Errorf("a memory breach on the gvisor tool: %v %+v", err, r)
		}
		t.Logf("the memory breach: %v", time.Since(start).Round(time.Millisecond))
		// A session's sandbox: runsc, its sentry and its gofer all in the
		// sandbox's cgroup below the unit's parent, with the tool's
		// memory ceiling, so the sentry counts in it.
		gs, err := c.CreateSession(ctx, api.SessionRequest{Tool: "gv"})
		if err != nil {
			t.Fatal(err)
		}
		group := "/sys/fs/cgroup" + parent + "/" + gs.SandboxID
		if !v2 {
			group = "/sys/fs/cgroup/pids/airlock/" + gs.SandboxID
		}
		names := map[string]bool{}
		for _, pid := range strings.Fields(readTrim(t, group+"/cgroup.procs")) {
			if b, err := os.ReadFile("/proc/" + pid + "/cmdline"); err == nil {
				names[filepath.Base(strings.SplitN(string(b), "\x00", 2)[0])] = true
			}
		}
		if !names["runsc"] || !names["runsc-sandbox"] || !names["runsc-gofer"] {
			t.Errorf("the gvisor session's cgroup %s holds %v, want runsc, runsc-sandbox and runsc-gofer", group, names)
		}
		if v2 {
			if got := readTrim(t, group+"/memory.max"); got != strconv.Itoa(128<<20) {
				t.Errorf("the gvisor session's memory.max is %s, want the gv tool's 128MiB", got)
			}
		}
		res, err := c.Exec(ctx, gs.ID, api.ExecRequest{Argv: []string{"sh", "-c", "echo kept > /workspace/f; cat /workspace/f"}})
		if err != nil || string(res.Stdout) != "kept\n" {
			t.Errorf("an exec in the gvisor session: %v %+v", err, res)
		}
		if err := c.DeleteSession(ctx, gs.ID); err != nil {
			t.Fatal(err)
		}
		for deadline := time.Now().Add(30 * time.Second); exists(group); time.Sleep(200 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("the gvisor session's cgroup %s is still there 30s after its end", group)
			}
		}
		// The gv tool's pool keeps gVisor sandboxes warm: the stop below
		// ends them with the rest.
	})

	t.Run("restart", func(t *testing.T) {
		began := time.Now()
		mustShell(t, "systemctl restart airlock")
		waitHealthy(t, c)
		t.Logf("restart took %.1fs", time.Since(began).Seconds())
		if pid := show(t, "MainPID")["MainPID"]; pid == mainPID || pid == "0" {
			t.Errorf("MainPID %s after a restart, was %s", pid, mainPID)
		}
		if exists("/proc/" + sessInit) {
			t.Errorf("the session's sandbox (init pid %s) outlived the daemon that made it", sessInit)
		}
		if exists("/sys/fs/cgroup" + sandboxParent + "/" + sess.SandboxID) {
			t.Errorf("the session's cgroup outlived the daemon that made it")
		}
		if _, err := c.Exec(ctx, sess.ID, api.ExecRequest{Argv: []string{"true"}}); err == nil {
			t.Errorf("the session of the daemon before the restart still runs commands")
		}
		if out, err := shell(ctx, "/", "airlock run --tool sh -- echo after restart"); err != nil || out != "after restart\n" {
			t.Errorf("a run after the restart: %v %q", err, out)
		}
	})

	t.Run("MemoryMax", func(t *testing.T) {
		if !v2 {
			t.Skip("the sandboxes are not below the service on a host with cgroup v1 controllers")
		}
		mustShell(t, "mkdir -p /etc/systemd/system/airlock.service.d && printf '[Service]\\nMemoryMax=1G\\n' >/etc/systemd/system/airlock.service.d/50-memory.conf && systemctl daemon-reload && systemctl restart airlock")
		waitHealthy(t, c)
		if got := readTrim(t, "/sys/fs/cgroup"+svcGroup+"/memory.max"); got != strconv.Itoa(1<<30) {
			t.Fatalf("the service's memory.max is %s after MemoryMax=1G", got)
		}
		// Of a limit above the sandboxes, 80% is theirs (the rest the
		// daemon's): admit.go's budget.
		want := int64(1<<30) / 100 * 80
		if got := metric(t, c, "airlock_capacity_memory_bytes"); got != want {
			t.Errorf("airlock_capacity_memory_bytes is %d under MemoryMax=1G, want %d", got, want)
		}
		mustShell(t, "rm /etc/systemd/system/airlock.service.d/50-memory.conf && systemctl daemon-reload && systemctl restart airlock")
		waitHealthy(t, c)
		if got := metric(t, c, "airlock_capacity_memory_bytes"); got <= want {
			t.Errorf("airlock_capacity_memory_bytes is %d with MemoryMax= gone, want more than %d", got, want)
		}
	})

	t.Run("stop", func(t *testing.T) {
		for pid := range sandboxInits(t) {
			if ns, err := os.Readlink("/proc/" + pid + "/ns/net"); err == nil {
				netnsSeen[ns] = true
			}
		}
		mainPID := show(t, "MainPID")["MainPID"]
		// A run in flight when the stop begins: the daemon lets it finish
		// (serve --grace) before it destroys the sandboxes.
		run := exec.Command("airlock", "run", "--tool", "sh", "--", "sh", "-c", "sleep 6; echo finished")
		var runOut bytes.Buffer
		run.Stdout, run.Stderr = &runOut, &runOut
		if err := run.Start(); err != nil {
			t.Fatal(err)
		}
		waitRunning(t, c)
		began := time.Now()
		mustShell(t, "systemctl stop airlock")
		took := time.Since(began)
		runErr := run.Wait()
		t.Logf("stop took %.1fs with a run in flight", took.Seconds())
		if runErr != nil || runOut.String() != "finished\n" {
			t.Errorf("the run in flight at the stop: %v %q, want it finished", runErr, runOut.String())
		}
		if took > 90*time.Second {
			t.Errorf("stop took %v, past the unit's TimeoutStopSec (90s)", took)
		}
		p := show(t, "ActiveState", "Result", "ExecMainCode", "ExecMainStatus")
		// ExecMainCode 1 is CLD_EXITED: the daemon exited by itself, not
		// by systemd's SIGKILL at the timeout.
		if p["ActiveState"] != "inactive" || p["Result"] != "success" || p["ExecMainCode"] != "1" || p["ExecMainStatus"] != "0" {
			t.Errorf("after the stop: %v, want inactive, success, exited 0", p)
		}
		// Nothing systemd had to kill after the daemon was gone.
		if j, err := shell(ctx, "/", "journalctl --no-pager -o cat _PID=1 | grep -iE 'airlock.*(remains running|killing process)' || true"); err != nil || strings.TrimSpace(j) != "" {
			t.Errorf("systemd killed what the daemon left: %v\n%s", err, j)
		}
		if left := sandboxInits(t); len(left) > 0 {
			t.Errorf("sandbox inits left: %v", left)
		}
		if left := airlockProcs(t); len(left) > 0 {
			t.Errorf("airlock processes left after the stop: %v", left)
		}
		if exists("/proc/" + mainPID) {
			t.Errorf("the daemon (pid %s) is still there", mainPID)
		}
		if v2 && exists("/sys/fs/cgroup"+svcGroup) {
			t.Errorf("the service's cgroup %s is still there", svcGroup)
		}
		if !v2 {
			dirs, _ := filepath.Glob("/sys/fs/cgroup/*/airlock")
			for _, d := range dirs {
				if left := childGroups(t, d); len(left) > 0 {
					t.Errorf("sandbox cgroups left in %s: %v", d, left)
				}
			}
		}
		// The sandboxes' network namespaces: none is held by a process or
		// a bind mount.
		for ns := range netnsSeen {
			if holders := netnsHolders(t, ns); len(holders) > 0 {
				t.Errorf("network namespace %s of a sandbox is still held by %v", ns, holders)
			}
		}
		if added := diff(hostMounts(t), mountsBefore); len(added) > 0 {
			t.Errorf("mounts the service left in the host's namespace: %v", added)
		}
		if held := heldLocks(t, "/run/airlock/ids"); len(held) > 0 {
			t.Errorf("uid range locks still held: %v", held)
		}
		if exists(socket) {
			t.Errorf("the socket %s is still there", socket)
		}
		// gVisor's processes, and the sandboxes' bundles.
		for pid, exe := range procs(t) {
			if exe == runscPath {
				t.Errorf("runsc process %s left after the stop", pid)
			}
		}
		if bundles, _ := filepath.Glob("/run/airlock/gvisor/*/*"); len(bundles) > 0 {
			t.Errorf("gVisor bundles left after the stop: %v", bundles)
		}
	})

	// A stock host gives the shipped unit everything it needs: the
	// daemon warned of nothing and failed nothing in all of the above.
	log := mustShell(t, "journalctl --no-pager -o cat -u airlock")
	t.Logf("the service's journal:\n%s", log)
	for line := range strings.Lines(log) {
		if strings.Contains(line, "level=WARN") || strings.Contains(line, "level=ERROR") {
			t.Errorf("the daemon logged: %s", line)
		}
	}

	// Enabled, the service comes back when the guest boots again; here the
	// guest powers off, which stops it once more through systemd.
	mustShell(t, "systemctl start airlock")
	waitHealthy(t, c)
}

func shell(ctx context.Context, dir, script string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "sh", "-ec", script)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func mustShell(t *testing.T, script string) string {
	t.Helper()
	out, err := shell(t.Context(), "/", script)
	if err != nil {
		t.Fatalf("%s: %v\n%s%s", script, err, out, journal(t))
	}
	return out
}

// journal is the service's recent log, for a failure's message.
func journal(t *testing.T) string {
	out, _ := shell(t.Context(), "/", "journalctl --no-pager -n 40 -u airlock")
	return "\nthe service's journal:\n" + out
}

// show returns the unit's properties.
func show(t *testing.T, props ...string) map[string]string {
	t.Helper()
	out := mustShell(t, "systemctl show "+unitName+" -p "+strings.Join(props, ","))
	m := map[string]string{}
	for line := range strings.Lines(out) {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), "="); ok {
			m[k] = v
		}
	}
	return m
}

func waitHealthy(t *testing.T, c *client.Client) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		err := c.Health(ctx)
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the daemon did not answer on %s within 2 minutes: %v%s", socket, err, journal(t))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// waitRunning waits until the daemon has a run in flight.
func waitRunning(t *testing.T, c *client.Client) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		if a, err := c.PS(t.Context()); err == nil && len(a.Runs) > 0 {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatal("the daemon shows no run in flight")
}

func hasTool(ctx context.Context, c *client.Client, name string) bool {
	tools, err := c.Tools(ctx)
	return err == nil && slices.ContainsFunc(tools, func(x api.Tool) bool { return x.Name == name })
}

// metric reads one gauge of the daemon's /metrics.
func metric(t *testing.T, c *client.Client, name string) int64 {
	t.Helper()
	hc, url := c.Endpoint("/metrics")
	resp, err := hc.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			return n
		}
	}
	t.Fatalf("/metrics has no %s", name)
	return 0
}

func exists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}

func readTrim(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// procCgroup is the cgroup2 path of a process ("0::PATH"), or on a host
// with v1 controllers its memory controller's.
func procCgroup(t *testing.T, pid string) string {
	t.Helper()
	b, err := os.ReadFile("/proc/" + pid + "/cgroup")
	if err != nil {
		return ""
	}
	var unified string
	for line := range strings.Lines(string(b)) {
		f := strings.SplitN(strings.TrimSpace(line), ":", 3)
		if len(f) != 3 {
			continue
		}
		if slices.Contains(strings.Split(f[1], ","), "memory") {
			return f[2]
		}
		if f[0] == "0" {
			unified = f[2]
		}
	}
	return unified
}

// procs returns every process's pid and the target of its /proc/PID/exe.
func procs(t *testing.T) map[string]string {
	t.Helper()
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]string{}
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		exe, _ := os.Readlink("/proc/" + e.Name() + "/exe")
		m[e.Name()] = exe
	}
	return m
}

// sandboxInits maps each sandbox init's pid to its cgroup.
func sandboxInits(t *testing.T) map[string]string {
	t.Helper()
	m := map[string]string{}
	for pid := range procs(t) {
		if comm, _ := os.ReadFile("/proc/" + pid + "/comm"); string(comm) == "airlock-init\n" {
			m[pid] = procCgroup(t, pid)
		}
	}
	return m
}

// airlockProcs lists the processes running one of airlock's programs.
func airlockProcs(t *testing.T) []string {
	t.Helper()
	var left []string
	for pid, exe := range procs(t) {
		if strings.HasPrefix(filepath.Base(exe), "airlock") {
			left = append(left, pid+" "+exe)
		}
	}
	return left
}

func childGroups(t *testing.T, dir string) []string {
	t.Helper()
	var groups []string
	for _, e := range readDir(t, dir) {
		if e.IsDir() {
			groups = append(groups, e.Name())
		}
	}
	return groups
}

// readDir lists dir; nothing when it does not exist.
func readDir(t *testing.T, dir string) []os.DirEntry {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	return ents
}

// netnsHolders lists what holds the network namespace ns ("net:[INODE]"):
// processes in it and nsfs mounts of it.
func netnsHolders(t *testing.T, ns string) []string {
	t.Helper()
	var held []string
	for pid := range procs(t) {
		if got, _ := os.Readlink("/proc/" + pid + "/ns/net"); got == ns {
			held = append(held, "pid "+pid)
		}
	}
	for _, m := range hostMounts(t) {
		if strings.Contains(m, ns) {
			held = append(held, "mount "+m)
		}
	}
	return held
}

// hostMounts lists the mount points and sources of PID 1's mount
// namespace, the host's.
func hostMounts(t *testing.T) []string {
	t.Helper()
	f, err := os.Open("/proc/1/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var ms []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTS ... - FSTYPE SOURCE SUPER
		f := strings.Fields(sc.Text())
		if len(f) < 5 {
			continue
		}
		rest := strings.SplitN(sc.Text(), " - ", 2)
		ms = append(ms, fmt.Sprintf("%s %s (%s)", f[4], f[3], strings.Join(strings.Fields(rest[len(rest)-1])[:1], "")))
	}
	return ms
}

func diff(now, before []string) []string {
	var added []string
	for _, m := range now {
		if !slices.Contains(before, m) {
			added = append(added, m)
		}
	}
	return added
}

// heldLocks lists the files of dir that some process holds a flock on.
func heldLocks(t *testing.T, dir string) []string {
	t.Helper()
	var held []string
	for _, e := range readDir(t, dir) {
		f, err := os.Open(filepath.Join(dir, e.Name()))
		if err != nil {
			continue
		}
		if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
			held = append(held, e.Name())
		}
		f.Close()
	}
	return held
}

func lookupGroup(t *testing.T, name string) int {
	t.Helper()
	g, err := user.LookupGroup(name)
	if err != nil {
		t.Fatal(err)
	}
	gid, err := strconv.Atoi(g.Gid)
	if err != nil {
		t.Fatal(err)
	}
	return gid
}
