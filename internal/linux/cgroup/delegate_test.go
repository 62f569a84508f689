package cgroup

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// asideHelper is the process of TestV2StepsAside: it opens the parent
// named in its environment, as a daemon would at start, creates one
// sandbox group, reports, and waits for its stdin to close.
func asideHelper() {
	if os.Getenv("CGROUP_TEST_NS") == "1" {
		// A container: born in its own cgroup and mount namespaces, it
		// mounts the hierarchy as it sees it, rooted at its cgroup.
		if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
			fmt.Printf("error %s\n", err)
			os.Exit(1)
		}
		// The kernel refuses a second mount of the same hierarchy on
		// the same point (EBUSY): the host's view goes first.
		if err := unix.Unmount(unifiedRoot, unix.MNT_DETACH); err != nil {
			fmt.Printf("error %s\n", err)
			os.Exit(1)
		}
		if err := unix.Mount("cgroup2", unifiedRoot, "cgroup2", 0, ""); err != nil {
			fmt.Printf("error mount cgroup2: %s\n", err)
			os.Exit(1)
		}
	}
	p, err := Open(os.Getenv("CGROUP_TEST_PARENT"))
	if err != nil {
		fmt.Printf("error %s\n", err)
		os.Exit(1)
	}
	g, err := p.Create("sandbox1", Limits{MemoryBytes: 64 << 20, Pids: 16})
	if err != nil {
		fmt.Printf("error %s\n", err)
		os.Exit(1)
	}
	ids, _ := p.Children()
	fmt.Printf("moved %q children %q\n", p.Moved(), ids)
	_, _ = io.Copy(io.Discard, os.Stdin)
	if err := g.Delete(context.Background()); err != nil {
		os.Exit(1)
	}
	os.Exit(0)
}

// requireV2Controllers skips a test unless this host is cgroup v2 only,
// with the memory, pids and cpu controllers at its root: a real v2 host,
// such as the guest of scripts/test-vm.
func requireV2Controllers(t *testing.T) {
	t.Helper()
	requireRoot(t)
	if v, err := Detect(); err != nil || v != V2 {
		t.Skip("needs a cgroup-v2-only host (scripts/test-vm boots one)")
	}
	data, err := os.ReadFile(filepath.Join(unifiedRoot, "cgroup.controllers"))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range v2Controllers {
		if !hasWord(data, c) {
			t.Skipf("the cgroup v2 root offers no %s controller", c)
		}
	}
}

func TestParseOwnV2(t *testing.T) {
	tests := []struct {
		in, want string
		ok       bool
	}{
		{"0::/system.slice/airlock.service\n", "/system.slice/airlock.service", true},
		{"12:pids:/user.slice\n1:name=systemd:/x\n0::/init.scope\n", "/init.scope", true},
		{"0::/\n", "/", true},
		{"0::/a:b\n", "/a:b", true},
		{"12:pids:/user.slice\n", "", false},
		{"", "", false},
	}
	for _, tc := range tests {
		got, err := parseOwnV2([]byte(tc.in))
		if got != tc.want || (err == nil) != tc.ok {
			t.Errorf("parseOwnV2(%q) = %q, %v; want %q, ok %v", tc.in, got, err, tc.want, tc.ok)
		}
	}
}

// TestV2StepsAside runs a process as systemd runs a service with
// Delegate=yes: alone in the service's cgroup, which offers the controllers
// but has enabled none, with the cgroup parent below (or at) that cgroup.
// cgroup v2 refuses controllers to the children of a group that holds
// processes, so the process must step into a leaf of its own first. It
// is checked from the host where the process ended up, that the parent
// delegates, and that the sandbox group got its limits. The same holds
// for a container at the root of its cgroup namespace (a pod with its own
// /sys/fs/cgroup). A second process in the service's cgroup is an error
// that says so.
func TestV2StepsAside(t *testing.T) {
	requireV2Controllers(t)
	top := testParentName(t)
	t.Cleanup(func() { removeTestParent(t, top) })
	// The service's own parent hands it the controllers, as systemd does
	// for a unit with Delegate=yes.
	if _, err := Open(top); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name      string
		parent    string // below the service's cgroup
		neighbour bool   // another process in the service's cgroup
		container bool   // at the root of its own cgroup namespace
	}{
		{"parent below the service", "/sandboxes", false, false},
		{"parent is the service", "", false, false},
		{"another process in the way", "/sandboxes", true, false},
		{"container at its namespace's root", "/sandboxes", false, true},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			svc := fmt.Sprintf("%s/svc%d", top, i)
			svcDir := filepath.Join(unifiedRoot, svc)
			if err := os.Mkdir(svcDir, 0o755); err != nil {
				t.Fatal(err)
			}
			dirFD, err := unix.Open(svcDir, unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer unix.Close(dirFD)
			born := &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: dirFD}
			if tc.neighbour {
				n := exec.Command("sleep", "100")
				n.SysProcAttr = born
				if err := n.Start(); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = n.Process.Kill(); _ = n.Wait() })
			}
			exe, err := os.Executable()
			if err != nil {
				t.Fatal(err)
			}
			h := exec.Command(exe)
			h.Env = append(os.Environ(), helperEnv+"=aside", "CGROUP_TEST_PARENT="+svc+tc.parent)
			h.SysProcAttr = born
			// What the helper sees of its own cgroup: the service's, or
			// "/" in a namespace rooted there.
			seen := svc
			if tc.container {
				seen = ""
				h.Env = append(os.Environ(), helperEnv+"=aside", "CGROUP_TEST_PARENT="+tc.parent, "CGROUP_TEST_NS=1")
				h.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: dirFD, Cloneflags: unix.CLONE_NEWCGROUP | unix.CLONE_NEWNS}
			}
			h.Stderr = os.Stderr
			stdin, err := h.StdinPipe()
			if err != nil {
				t.Fatal(err)
			}
			stdout, err := h.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := h.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = h.Process.Kill(); _ = h.Wait() })
			line, _ := bufio.NewReader(stdout).ReadString('\n')
			leaf := svc + "/" + SupervisorGroup

			if tc.neighbour {
				if !strings.HasPrefix(line, "error ") || !strings.Contains(line, "other processes are still in "+svc) {
					t.Fatalf("helper said %q, want an error naming the other processes in %s", line, svc)
				}
				if got := readTrim(t, filepath.Join(svcDir, "cgroup.subtree_control")); got != "" {
					t.Errorf("%s/cgroup.subtree_control = %q, want nothing enabled", svc, got)
				}
				return
			}
			if want := fmt.Sprintf("moved %q children [\"sandbox1\"]\n", seen+"/"+SupervisorGroup); line != want {
				t.Fatalf("helper said %q, want %q", line, want)
			}
			// From the host: the process is in its leaf, nothing else is
			// in the service's own cgroup, and the controllers are on.
			own, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", h.Process.Pid))
			if err != nil {
				t.Fatal(err)
			}
			if got, _ := parseOwnV2(own); got != leaf {
				t.Errorf("helper's cgroup = %q, want %q", got, leaf)
			}
			if pids := readPids(svcDir); len(pids) != 0 {
				t.Errorf("%s still holds processes %v", svc, pids)
			}
			enabled, err := os.ReadFile(filepath.Join(svcDir, "cgroup.subtree_control"))
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range v2Controllers {
				if !hasWord(enabled, c) {
					t.Errorf("%s/cgroup.subtree_control = %q, want %s enabled", svc, enabled, c)
				}
			}
			sb := filepath.Join(unifiedRoot, svc+tc.parent, "sandbox1")
			if got := readTrim(t, filepath.Join(sb, "memory.max")); got != "67108864" {
				t.Errorf("sandbox memory.max = %q, want 67108864", got)
			}
			if got := readTrim(t, filepath.Join(sb, "pids.max")); got != "16" {
				t.Errorf("sandbox pids.max = %q, want 16", got)
			}
			ents, _ := os.ReadDir(filepath.Join(unifiedRoot, svc+tc.parent))
			var dirs []string
			for _, e := range ents {
				if e.IsDir() {
					dirs = append(dirs, e.Name())
				}
			}
			if tc.parent == "" && !slices.Contains(dirs, SupervisorGroup) {
				t.Errorf("groups in %s = %q, want %s among them", svc, dirs, SupervisorGroup)
			}
			stdin.Close()
			if err := h.Wait(); err != nil {
				t.Errorf("helper: %v", err)
			}
		})
	}
}
