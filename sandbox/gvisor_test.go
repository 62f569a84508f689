package sandbox

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/testutil"
	"github.com/airlockhq/airlock/result"
)

// backend is one isolation backend the runtime's tests run against.
type backend struct {
	name   string
	gvisor bool
	// direct is gVisor with the command as the container's process.
	direct bool
	spec   func(*Spec)
}

// backends are the namespace backend, and gVisor when runsc is at hand
// (always in CI: testutil.Runsc) and the run is not -short.
func backends(t *testing.T) []backend {
	t.Helper()
	bs := []backend{{name: IsolationNamespaces}}
	// The race detector's pass (-short) leaves gVisor to the plain one:
	// the backend's code is the same, and each of its sandboxes costs a
	// tenth of a second.
	if !testing.Short() && (os.Getenv(testutil.RunscEnv) != "" || os.Getenv("CI") != "") {
		testutil.Runsc(t)
		bs = append(bs, backend{name: IsolationGVisor, gvisor: true, spec: func(s *Spec) { s.Isolation = IsolationGVisor }})
	}
	return bs
}

// oneCommandBackend is gVisor for a sandbox made for one command, whose
// command runs as the container's process (Spec.OneCommand), when runsc
// is at hand and the run is not -short; else nothing.
func oneCommandBackend(t *testing.T) []backend {
	t.Helper()
	if testing.Short() || (os.Getenv(testutil.RunscEnv) == "" && os.Getenv("CI") == "") {
		return nil
	}
	testutil.Runsc(t)
	return []backend{{name: "gvisor-one-command", gvisor: true, direct: true, spec: func(s *Spec) {
		s.Isolation, s.OneCommand = IsolationGVisor, true
	}}}
}

// bundleOf is sb's gVisor bundle, or "".
func bundleOf(sb *Sandbox) string {
	if sb.gv == nil {
		return ""
	}
	return sb.gv.bundle
}

// isolationOf is be's Spec.Isolation.
func isolationOf(be backend) string {
	if be.gvisor {
		return IsolationGVisor
	}
	return ""
}

func gvisorSpec(t *testing.T) func(*Spec) {
	t.Helper()
	testutil.Runsc(t)
	return func(s *Spec) { s.Isolation = IsolationGVisor }
}

// TestGVisorRuns runs a command under gVisor: the guest kernel is
// gVisor's, the command runs as the sandbox's user with the workspace
// writable, and nothing is left.
func TestGVisorRuns(t *testing.T) {
	r := run(t, runOpts{spec: gvisorSpec(t)}, "/bin/sh", "-c", "uname -r; id -u; echo hi > /workspace/f && cat /workspace/f; pwd")
	if r.Outcome != result.Exited || r.ExitCode != 0 {
		t.Fatalf("outcome %s %d: %s %s %s", r.Outcome, r.ExitCode, r.Error, r.Stdout, r.Stderr)
	}
	lines := strings.Split(strings.TrimSpace(string(r.Stdout)), "\n")
	if len(lines) != 4 || !strings.Contains(lines[0], "gvisor") || lines[1] != "1000" || lines[2] != "hi" || lines[3] != HomeDir {
		t.Fatalf("got %q", lines)
	}
}

// TestGVisorInitConfined reads, from a command, the credentials of init
// and its own as the guest kernel holds them: init's real and saved uid
// its own with the commands' as its effective one, the commands' gid, no
// supplementary group, no capability in any set (the ambient one runsc
// started it with dropped), no_new_privs; the command the commands' ids
// and the same nothing.
func TestGVisorInitConfined(t *testing.T) {
	r := run(t, runOpts{spec: gvisorSpec(t)}, "/bin/sh", "-c", "grep -E '^(Uid|Gid|Groups|Cap[A-Za-z]+|NoNewPrivs):' /proc/1/status /proc/self/status")
	if r.Outcome != result.Exited || r.ExitCode != 0 {
		t.Fatalf("outcome %s %d: %s %s %s", r.Outcome, r.ExitCode, r.Error, r.Stdout, r.Stderr)
	}
	got := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(string(r.Stdout)), "\n") {
		k, v, _ := strings.Cut(l, ":\t")
		got[k] = strings.Join(strings.Fields(v), " ")
	}
	none := "0000000000000000"
	want := map[string]string{
		"/proc/1/status:Uid": "65535 1000 65535 1000", "/proc/1/status:Gid": "1000 1000 1000 1000",
		"/proc/self/status:Uid": "1000 1000 1000 1000", "/proc/self/status:Gid": "1000 1000 1000 1000",
	}
	for _, f := range []string{"/proc/1/status", "/proc/self/status"} {
		want[f+":Groups"] = ""
		want[f+":NoNewPrivs"] = "1"
		for _, c := range []string{"CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"} {
			want[f+":"+c] = none
		}
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %q, want %q", k, got[k], v)
		}
	}
	if t.Failed() {
		t.Logf("the guest said:\n%s", r.Stdout)
	}
}

// TestGVisorNamespaces: the sentry is in the sandbox's network namespace
// and the gofer in the runtime's one empty namespace for gofers, shared
// by two sandboxes, and neither in the host's.
func TestGVisorNamespaces(t *testing.T) {
	rt := testRuntime(t)
	spec := Spec{Limits: DefaultLimits()}
	gvisorSpec(t)(&spec)
	netOf := func(pid int) string {
		t.Helper()
		l, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/net", pid))
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	host := netOf(os.Getpid())
	var gofers []string
	for range 2 {
		sb, err := rt.Create(t.Context(), spec)
		if err != nil {
			t.Fatal(err)
		}
		defer sb.Destroy(t.Context())
		pids, err := sb.group.Procs()
		if err != nil {
			t.Fatal(err)
		}
		var st unix.Stat_t
		if err := unix.Fstat(int(sb.netns.Fd()), &st); err != nil {
			t.Fatal(err)
		}
		own := fmt.Sprintf("net:[%d]", st.Ino)
		seen := map[string]string{}
		for _, p := range pids {
			b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", p))
			if err != nil {
				continue
			}
			seen[strings.SplitN(string(b), "\x00", 2)[0]] = netOf(p)
		}
		if seen["runsc-sandbox"] != own {
			t.Errorf("the sentry's network namespace is %q, want the sandbox's %s (%v)", seen["runsc-sandbox"], own, seen)
		}
		g := seen["runsc-gofer"]
		if g == "" || g == host || g == own {
			t.Errorf("the gofer's network namespace is %q (host %s, sandbox %s)", g, host, own)
		}
		gofers = append(gofers, g)
	}
	if gofers[0] != gofers[1] {
		t.Errorf("two sandboxes' gofers are in namespaces %v, want the runtime's one", gofers)
	}
}

// TestGVisorImageRoot runs TestImageRoot's cases that apply on gVisor
// (not as root) against the same hand-made image: the
// image's files with its owners (an idmapped mount onto the sandbox's
// range), airlock's /etc files over the image's, its /proc and
// /workspace (symlinks out of the way) hidden by airlock's, the root
// read-only and the workspace writable; a writable root where the user
// may write; and the host reaches the root as the guest sees it
// (OpenRoot), what the guest wrote to it included.
func TestGVisorImageRoot(t *testing.T) {
	rt := testRuntime(t)
	gv := gvisorSpec(t)
	root := handImage(t, rt)
	img := func(s *Spec) { gv(s); s.Image = &Image{Root: root} }
	runImageCases(t, root, imageCases(img))
	// The host's view of the root is the guest's: the image's file,
	// airlock's /etc/hosts, and what a command wrote to a writable root.
	spec := Spec{Limits: DefaultLimits()}
	img(&spec)
	spec.Image.Writable = true
	sb, err := rt.Create(t.Context(), spec)
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Destroy(t.Context())
	if r := sb.Exec(t.Context(), ExecRequest{Argv: []string{"/bin/t", "write", "/home/user/new", "guest\n"}, Capture: true, KeepAlive: true}); r.Outcome != result.Exited || r.ExitCode != 0 || !strings.Contains(string(r.Stdout), `"ok":true`) {
		t.Fatalf("write /home/user/new: %s %d %s %s", r.Outcome, r.ExitCode, r.Stdout, r.Error)
	}
	dir, err := sb.OpenRoot()
	if err != nil {
		t.Fatal(err)
	}
	defer dir.Close()
	for name, want := range map[string]string{"etc/os-release": "ID=handmade\n", "etc/hosts": "127.0.0.1\tlocalhost sandbox\n::1\tlocalhost ip6-localhost ip6-loopback\n", "home/user/new": "guest\n"} {
		fd, err := unix.Openat(int(dir.Fd()), name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			t.Errorf("%s through OpenRoot: %v", name, err)
			continue
		}
		f := os.NewFile(uintptr(fd), name)
		b, err := io.ReadAll(f)
		f.Close()
		if err != nil || string(b) != want {
			t.Errorf("%s through OpenRoot: %q %v, want %q", name, b, err, want)
		}
	}
}

// TestGVisorWritableImageRootIsBounded: what a command writes to a
// writable image root under gVisor lands on the scratch tmpfs and counts
// against the disk ceiling, named with its post-mortem.
func TestGVisorWritableImageRootIsBounded(t *testing.T) {
	rt := testRuntime(t)
	gv := gvisorSpec(t)
	root := handImage(t, rt)
	lim := DefaultLimits()
	lim.Disk, lim.Time = 4<<20, 30e9
	r := run(t, runOpts{limits: &lim, spec: func(s *Spec) { gv(s); s.Image = &Image{Root: root, Writable: true} }},
		"/bin/t", "fill", "/home/user/big", "100000000")
	if r.Outcome != result.LimitExceeded || r.Limit == nil || r.Limit.Name != result.LimitDisk {
		t.Fatalf("got %s %+v (%s), want the disk ceiling", r.Outcome, r.Limit, r.Stdout)
	}
	if _, err := os.Stat(filepath.Join(root, "home/user/big")); !os.IsNotExist(err) {
		t.Errorf("the write reached the stored image: %v", err)
	}
	if pm := r.PostMortem; pm == nil || len(pm.Files) == 0 || pm.Files[0].Path != "/home/user/big" || pm.Files[0].Bytes < 1<<20 {
		t.Errorf("post-mortem %+v, want /home/user/big first", pm)
	}
}

// TestGVisorRefuses: what the gVisor backend does not do is refused by
// name, before anything is made.
func TestGVisorRefuses(t *testing.T) {
	rt := testRuntime(t)
	testutil.Runsc(t)
	tests := []struct {
		name string
		mod  func(*Spec)
		want string
	}{
		{"root", func(s *Spec) { s.User = &User{} }, "commands as root: not available with isolation gvisor"},
		{"small memory", func(s *Spec) { s.Limits.Memory = 32 << 20 }, "needs 64 MiB at least"},
		{"few pids", func(s *Spec) { s.Limits.Pids = 32 }, "needs 64 at least"},
		{"unknown backend", func(s *Spec) { s.Isolation = "firecracker" }, `isolation "firecracker"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec := Spec{Limits: DefaultLimits(), Isolation: IsolationGVisor}
			tt.mod(&spec)
			before := sandboxGroups(t, rt)
			sb, err := rt.Create(t.Context(), spec)
			if err == nil {
				sb.Destroy(t.Context())
				t.Fatal("created")
			}
			var ue *UnsupportedError
			if !errors.Is(err, errdefs.ErrInvalid) || !strings.Contains(err.Error(), tt.want) || (tt.name != "unknown backend") != errors.As(err, &ue) {
				t.Fatalf("got %v, want an invalid-input error naming %q", err, tt.want)
			}
			if after := sandboxGroups(t, rt); len(after) != len(before) {
				t.Fatalf("cgroups %v, before %v", after, before)
			}
		})
	}
	t.Run("no runsc", func(t *testing.T) {
		rt2, err := New(t.Context(), Options{StateDir: testStateDir, CgroupParent: testCgroup, InitPath: testutil.InitPath(t), Runsc: "/nonexistent/runsc"})
		if err != nil {
			t.Fatal(err)
		}
		defer rt2.Close()
		_, err = rt2.Create(t.Context(), Spec{Limits: DefaultLimits(), Isolation: IsolationGVisor})
		if err == nil || !strings.Contains(err.Error(), "isolation gvisor") || !strings.Contains(err.Error(), "/nonexistent/runsc") {
			t.Fatalf("got %v", err)
		}
	})
}

// TestGVisorDiskPostMortem: a disk breach's post-mortem names the files
// under the paths the guest sees them at (the scratch tmpfs holds
// /workspace and /tmp as directories of its root), and says why it lists
// no process.
func TestGVisorDiskPostMortem(t *testing.T) {
	r := run(t, runOpts{limits: limits(func(l *Limits) { l.Disk = 16 << 20 }), spec: gvisorSpec(t)}, "/bin/sh", "-c",
		`mkdir -p /tmp/cache && head -c 2000000 /dev/zero > /workspace/decoy.bin && head -c 100000000 /dev/zero > /tmp/cache/big.bin; sleep 15`)
	if r.Outcome != result.LimitExceeded || r.Limit.Name != result.LimitDisk || r.PostMortem == nil {
		t.Fatalf("got %s %+v %+v", r.Outcome, r.Limit, r.PostMortem)
	}
	pm := r.PostMortem
	var paths []string
	for _, f := range pm.Files {
		paths = append(paths, f.Path)
	}
	if len(paths) < 2 || paths[0] != "/tmp/cache/big.bin" || paths[1] != "/workspace/decoy.bin" {
		t.Errorf("files %q", paths)
	}
	if len(pm.Processes) != 0 || !strings.Contains(pm.Note, "under gVisor the commands' processes are not the host's") {
		t.Errorf("processes %+v, note %q", pm.Processes, pm.Note)
	}
}

// TestNoteDescriptors: init's word on a guest process's descriptors is
// a breach only at the ceiling, and the first count is the one kept.
func TestNoteDescriptors(t *testing.T) {
	tests := []struct {
		name    string
		counts  []int
		ceiling int64
		want    int64
	}{
		{"at the ceiling", []int{64}, 64, 64},
		{"below it", []int{63}, 64, 0},
		{"none", []int{0}, 64, 0},
		{"no ceiling", []int{5}, 0, 0},
		{"the first kept", []int{64, 80}, 64, 64},
		{"a low count then a breach", []int{3, 64}, 64, 64},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var g gvisorState
			for _, n := range tt.counts {
				g.noteDescriptors(n, tt.ceiling)
			}
			if got := g.fdsHeld.Load(); got != tt.want {
				t.Fatalf("held %d, want %d", got, tt.want)
			}
		})
	}
}

// TestPrewarm: a pool's sandbox is readied for its first command, on
// gVisor by a start of `true` that leaves nothing behind (no process, no
// file in the writable directories) and makes the next start no slower;
// on the namespace backend it does nothing.
func TestPrewarm(t *testing.T) {
	for _, be := range backends(t) {
		t.Run(be.name, func(t *testing.T) {
			sb, err := testRuntime(t).Create(t.Context(), Spec{Limits: DefaultLimits(), Isolation: isolationOf(be)})
			if err != nil {
				t.Fatal(err)
			}
			defer sb.Destroy(t.Context())
			if err := sb.Prewarm(t.Context()); err != nil {
				t.Fatal(err)
			}
			r := sb.Exec(t.Context(), ExecRequest{Argv: []string{"sh", "-c", "ps -eo args= | grep -vc -e '^ps' -e '^sh' -e '^grep' -e 'airlock-init'; ls -A /tmp /workspace"}, Capture: true, KeepAlive: true})
			if r.Outcome != result.Exited || string(r.Stdout) != "0\n/tmp:\n\n/workspace:\n" {
				t.Fatalf("after Prewarm: %s %q %q %q", r.Outcome, r.Stdout, r.Stderr, r.Error)
			}
		})
	}
}
