package cli

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/internal/testutil"
	"github.com/airlockhq/airlock/result"
	"golang.org/x/sys/unix"
)

// TestServeAsDelegatedService runs the real `airlock serve` as systemd
// runs a unit with Delegate=yes (and no DelegateSubgroup=): alone in the
// service's cgroup, which offers the memory, pids and cpu controllers but
// has enabled none, with --cgroup-parent below it. cgroup v2 hands
// controllers only to the children of a group without processes, so the
// daemon has to step into a leaf of its own. Checked from the host: where
// the daemon ended up, the limits of its sandboxes, a limit enforced, and
// nothing left after SIGTERM. It needs a cgroup-v2-only host
// (scripts/test-vm boots one).
func TestServeAsDelegatedService(t *testing.T) {
	requireRoot(t)
	const cg = "/sys/fs/cgroup"
	ctrls, err := os.ReadFile(cg + "/cgroup.controllers")
	if _, v1 := os.Stat(cg + "/memory"); err != nil || v1 == nil || !strings.Contains(string(ctrls), "memory") {
		t.Skip("needs a cgroup-v2-only host with the memory controller (scripts/test-vm boots one)")
	}
	// The slice above the service hands it the controllers, as systemd
	// does; then the service's cgroup, empty.
	slice := testutil.CgroupParent("/airlock-test-cli-slice")
	svc := slice + "/airlock.service"
	t.Cleanup(func() { removeCgroupTree(t, cg+slice) })
	for _, level := range append([]string{""}, ancestors(slice)...) {
		if err := os.MkdirAll(cg+level, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(cg+level+"/cgroup.subtree_control", []byte("+memory +pids +cpu"), 0); err != nil {
			t.Fatalf("delegate %s: %v", level, err)
		}
	}
	if err := os.Mkdir(cg+svc, 0o755); err != nil {
		t.Fatal(err)
	}
	svcFD, err := unix.Open(cg+svc, unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(svcFD)

	parent := svc + "/sandboxes"
	cfg := writeConfig(t, "tools:\n  sh:\n    pool: {warm: 2}\n    limits: {memory: 48MiB, pids: 24}\n")
	sock := filepath.Join(t.TempDir(), "airlock.sock")
	cmd := exec.Command(airlockBin(t), "serve", "--config", cfg, "--socket", sock, "--audit", filepath.Join(t.TempDir(), "audit.db"),
		"--state-dir", "/run/airlock-test-cli", "--cgroup-parent", parent)
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: svcFD}
	var logs bytes.Buffer
	cmd.Stderr = &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	c := waitForDaemon(t, sock, &logs, 60*time.Second)

	own, err := os.ReadFile("/proc/" + strconv.Itoa(cmd.Process.Pid) + "/cgroup")
	if want := "0::" + svc + "/airlock.supervisor\n"; err != nil || string(own) != want {
		t.Errorf("daemon's cgroup = %q, %v; want %q", own, err, want)
	}
	if !strings.Contains(logs.String(), "moved this process into a cgroup of its own") {
		t.Errorf("the daemon did not log its move:\n%s", logs.String())
	}
	if procs, _ := os.ReadFile(cg + svc + "/cgroup.procs"); len(bytes.TrimSpace(procs)) != 0 {
		t.Errorf("the service's own cgroup still holds %q", procs)
	}
	r, err := c.Run(t.Context(), api.RunRequest{Tool: "sh", Argv: []string{"cat", "/proc/self/cgroup"}})
	if err != nil || r.Outcome != result.Exited || string(r.Stdout) != "0::/\n" {
		t.Fatalf("run: %+v %v", r, err)
	}
	// A warm sandbox waits below the parent with the tool's ceilings. The
	// pool is refilling meanwhile and the first run's sandbox is being
	// removed, so a directory may vanish or still be filling in its limits
	// between the listing and the read: look until one shows the ceiling.
	var seen []string
	found := false
	for deadline := time.Now().Add(30 * time.Second); !found && time.Now().Before(deadline); {
		boxes, _ := filepath.Glob(cg + parent + "/*/memory.max")
		for _, f := range boxes {
			b, err := os.ReadFile(f)
			if err != nil {
				continue
			}
			v := strings.TrimSpace(string(b))
			if v == "50331648" {
				found = true
				break
			}
			if len(seen) < 10 {
				seen = append(seen, filepath.Base(filepath.Dir(f))+"="+v)
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !found {
		t.Fatalf("no sandbox cgroup under %s with memory.max 50331648; saw %q", parent, seen)
	}
	r, err = c.Run(t.Context(), api.RunRequest{Tool: "sh", Argv: []string{"sh", "-c", `b() { b | b & }; b; sleep 15`}})
	if err != nil || r.Outcome != result.LimitExceeded || r.Limit == nil || r.Limit.Name != result.LimitPids {
		t.Fatalf("fork bomb: %+v %v", r, err)
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("daemon exit: %v\n%s", err, logs.String())
	}
	ents, _ := os.ReadDir(cg + parent)
	for _, e := range ents {
		if e.IsDir() {
			t.Errorf("sandbox cgroup left: %s", e.Name())
		}
	}
}

// ancestors returns the cgroup paths from the first level below the root
// down to and including p.
func ancestors(p string) []string {
	var out []string
	for i := 1; i <= len(p); i++ {
		if i == len(p) || p[i] == '/' {
			out = append(out, p[:i])
		}
	}
	return out
}

// removeCgroupTree kills what is left in a cgroup tree and removes it,
// deepest first.
func removeCgroupTree(t *testing.T, dir string) {
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if e.IsDir() {
			removeCgroupTree(t, filepath.Join(dir, e.Name()))
		}
	}
	_ = os.WriteFile(filepath.Join(dir, "cgroup.kill"), []byte("1"), 0)
	for range 200 {
		if err := unix.Rmdir(dir); err == nil || err == unix.ENOENT {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Errorf("cleanup: cannot remove %s", dir)
}
