package cgroup

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/testutil"

	"golang.org/x/sys/unix"
)

// helperEnv makes the test binary act as a child process instead of
// running tests; see TestMain.
const helperEnv = "CGROUP_TEST_HELPER"

func TestMain(m *testing.M) {
	switch os.Getenv(helperEnv) {
	case "alloc":
		allocHelper()
	case "aside":
		asideHelper()
	}
	os.Exit(m.Run())
}

// allocHelper allocates and touches 256 MiB, keeping all of it reachable,
// so that a group with a smaller memory limit has to OOM-kill it. A shell
// pipeline into tmpfs would not do: tmpfs pages are charged to the group
// but no process has to die for them.
func allocHelper() {
	var keep [][]byte
	for range 256 {
		b := make([]byte, 1<<20)
		for i := 0; i < len(b); i += 4096 {
			b[i] = 1
		}
		keep = append(keep, b)
	}
	runtime.KeepAlive(keep)
	os.Exit(0)
}

// requireRoot skips tests that create real cgroups.
func requireRoot(t testing.TB) { testutil.RequireRoot(t) }

// testParentName returns a parent path no other run uses.
func testParentName(t testing.TB) string {
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	return testutil.CgroupParent("/airlock-test-" + hex.EncodeToString(b[:]))
}

// openTestParent opens a fresh parent and arranges for it, and anything
// left in it, to be removed when the test ends, passed or not.
func openTestParent(t testing.TB) *Parent {
	t.Helper()
	requireRoot(t)
	name := testParentName(t)
	// Registered before Open: a failing Open may already have created
	// directories.
	t.Cleanup(func() { removeTestParent(t, name) })
	p, err := Open(name)
	if err != nil {
		t.Fatalf("Open(%q): %v", name, err)
	}
	return p
}

// cgroupMounts returns every cgroup and cgroup2 mount point of the host.
func cgroupMounts(t testing.TB) []mountEntry {
	t.Helper()
	m, err := readMountInfo()
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// removeTestParent deletes the parent name and its children in every
// cgroup hierarchy of the host, killing whatever still runs there. It
// deliberately does not use the package under test, so a bug there
// cannot leave test groups behind on the host.
func removeTestParent(t testing.TB, name string) {
	t.Helper()
	for _, m := range cgroupMounts(t) {
		dir := filepath.Join(m.point, name)
		if _, err := os.Stat(dir); err != nil {
			continue
		}
		if err := removeTree(dir); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	}
}

// removeTree empties and removes one cgroup directory, depth first.
func removeTree(dir string) error {
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if e.IsDir() {
			if err := removeTree(filepath.Join(dir, e.Name())); err != nil {
				return err
			}
		}
	}
	// Thaw first: frozen tasks do not die.
	_ = os.WriteFile(filepath.Join(dir, "freezer.state"), []byte("THAWED"), 0)
	_ = os.WriteFile(filepath.Join(dir, "cgroup.freeze"), []byte("0"), 0)
	deadline := time.Now().Add(10 * time.Second)
	for {
		for _, pid := range readPids(dir) {
			_ = unix.Kill(pid, unix.SIGKILL)
		}
		err := unix.Rmdir(dir)
		if err == nil || err == unix.ENOENT {
			return nil
		}
		if time.Now().After(deadline) {
			return &os.PathError{Op: "rmdir", Path: dir, Err: err}
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// readPids returns the pids listed in dir/cgroup.procs.
func readPids(dir string) []int {
	data, _ := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	var pids []int
	for _, f := range strings.Fields(string(data)) {
		if pid, err := strconv.Atoi(f); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids
}

// startInGroup starts cmd so that it is born inside g: through
// CLONE_INTO_CGROUP on v2, from a thread visiting the group on v1. The
// process is killed and reaped when the test ends.
func startInGroup(t *testing.T, g *Group, cmd *exec.Cmd) {
	t.Helper()
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	var err error
	if g.Version() == V2 {
		fd, ferr := g.DirFD()
		if ferr != nil {
			t.Fatalf("DirFD: %v", ferr)
		}
		cmd.SysProcAttr.UseCgroupFD, cmd.SysProcAttr.CgroupFD = true, fd
		err = cmd.Start()
		unix.Close(fd)
	} else {
		err = startFromGroupThread(g, cmd)
	}
	if err != nil {
		t.Fatalf("start %v: %v", cmd.Args, err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
}

// startFromGroupThread runs cmd.Start on a locked thread that has entered
// g. It runs on its own goroutine so that a failed leave can abandon the
// thread (exit without unlocking) instead of returning it to the runtime
// in the wrong cgroups.
func startFromGroupThread(g *Group, cmd *exec.Cmd) error {
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		leave, err := g.EnterThread()
		if err != nil {
			runtime.UnlockOSThread()
			done <- err
			return
		}
		startErr := cmd.Start()
		if err := leave(); err != nil {
			done <- errors.Join(startErr, err)
			return // still locked: the runtime discards the thread
		}
		runtime.UnlockOSThread()
		done <- startErr
	}()
	return <-done
}

// procState returns the state letter of /proc/<pid>/stat, or "" when the
// process is gone.
func procState(pid int) string {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return ""
	}
	// The command name may contain spaces and parentheses; the state
	// follows the last ')'.
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 >= len(s) {
		return ""
	}
	return s[i+2 : i+3]
}

// procExiting reports whether pid has begun to exit: PF_EXITING in the
// flags of /proc/<pid>/stat, set at the start of the kernel's exit path,
// before the task leaves its cgroups. A task that left a group by exiting
// has it; one moved out of the group does not.
func procExiting(pid int) bool {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return false
	}
	// state ppid pgrp session tty_nr tpgid flags
	f := strings.Fields(s[i+1:])
	if len(f) < 7 {
		return false
	}
	flags, err := strconv.ParseUint(f[6], 10, 64)
	return err == nil && flags&pfExiting != 0
}

// pfExiting is the kernel's PF_EXITING task flag.
const pfExiting = 0x4

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, what string, d time.Duration, cond func() bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), d)
	defer cancel()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("timed out after %v waiting for %s", d, what)
		case <-time.After(2 * time.Millisecond):
		}
	}
}

// readTrim returns a file's content without surrounding space.
func readTrim(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(data))
}

// killedBySIGKILL reports whether a Wait error says the process died of
// SIGKILL.
func killedBySIGKILL(err error) bool {
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return false
	}
	ws, ok := ee.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL
}
