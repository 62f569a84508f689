package sandbox

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlockhq/airlock/result"
)

// TestSeed (on both backends) starts two sandboxes, one after the other with ranges of
// their own, from one seed: each sees the seed's files as its user's and
// may change, remove and replace them (a removed directory made again
// is empty), what it writes counts against its disk ceiling, and the
// seed on the host is never changed, whatever a sandbox tries.
func TestSeed(t *testing.T) {
	for _, be := range backends(t) {
		t.Run(be.name, func(t *testing.T) { testSeed(t, be) })
	}
}

func testSeed(t *testing.T, be backend) {
	rt := testRuntime(t)
	if !rt.Seeds() {
		t.Skip("this kernel's tmpfs holds no user.* attributes (Linux 6.6): sandboxes cannot start from a seed; the copy is tested by the node's snapshot tests")
	}
	dir := makeSeed(t, rt)
	owner := rt.SeedOwner()
	lock := filepath.Join(t.TempDir(), "lock")
	if err := os.WriteFile(lock, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	spec := Spec{Limits: DefaultLimits(), Seed: &Seed{Dir: dir, Lock: lock}}
	spec.Limits.Time = 30 * time.Second
	spec.Limits.Disk = 8 << 20
	if be.spec != nil {
		be.spec(&spec)
	}
	exec := func(sb *Sandbox, cmd string) *result.Result {
		return sb.Exec(t.Context(), ExecRequest{Argv: []string{"/bin/sh", "-c", cmd}, Capture: true, KeepAlive: true})
	}
	open := func() (*Sandbox, *trace) {
		t.Helper()
		sb, err := rt.Create(t.Context(), spec)
		if err != nil {
			t.Fatalf("Create: %v", err)
		}
		return sb, traceOf(t, sb)
	}
	sb1, tr1 := open()
	r := exec(sb1, `set -e
cat /workspace/keep /workspace/d/inner /tmp/t
stat -c '%u %U' /workspace/keep /tmp/t
echo new > /workspace/change
rm /workspace/gone
rm -r /workspace/d && mkdir /workspace/d && ls -A /workspace/d
echo mine > /workspace/mine
ls /workspace`)
	if want := "kept\ninner\nt\n1000 sandbox\n1000 sandbox\nchange\nd\nkeep\nmine\n"; r.Outcome != result.Exited || r.ExitCode != 0 || string(r.Stdout) != want {
		t.Fatalf("first sandbox: %s %d %q (stderr %q); want %q", r.Outcome, r.ExitCode, r.Stdout, r.Stderr, want)
	}
	// The seed on the host is as it was; the second sandbox, alive with
	// the first, starts from it too.
	sb2, tr2 := open()
	if sb1.HostIDBase() == sb2.HostIDBase() {
		t.Fatalf("two live sandboxes share id range %d", sb1.HostIDBase())
	}
	r = exec(sb2, "cat /workspace/change /workspace/gone /workspace/d/inner; ls /workspace")
	if want := "old\nx\ninner\nchange\nd\ngone\nkeep\n"; string(r.Stdout) != want {
		t.Errorf("second sandbox: %q (stderr %q); want %q", r.Stdout, r.Stderr, want)
	}
	// Attacks on the seed: the lower layers the mount table names are
	// not reachable as paths (the seed was attached on the scratch
	// tmpfs, which left at the pivot), and no mount of it is writable.
	r = exec(sb2, `: > /tmp/lowers
for l in $(grep -o 'lowerdir=[^,]*' /proc/self/mountinfo | cut -d= -f2); do
  test -e "$l" && echo "reachable: $l"; echo "$l" >> /tmp/lowers
done
wc -l < /tmp/lowers
for p in /workspace/keep /tmp/t; do chmod 777 $p; echo pwned > $p; done; true`)
	// Under gVisor the overlays are the host's, made in runsc's mount
	// namespace: the guest's mount table names none of their layers.
	lowers := "2"
	if be.gvisor {
		lowers = "0"
	}
	if strings.TrimSpace(string(r.Stdout)) != lowers {
		t.Errorf("the seed's layers from the sandbox: %q (stderr %q); want %s, none reachable", r.Stdout, r.Stderr, lowers)
	}
	for rel, want := range map[string]string{"workspace/keep": "kept\n", "workspace/change": "old\n", "workspace/gone": "x\n", "workspace/d/inner": "inner\n", "tmp/t": "t\n"} {
		b, err := os.ReadFile(filepath.Join(dir, rel))
		if err != nil || string(b) != want {
			t.Errorf("seed's %s after the sandboxes wrote: %q %v; want %q", rel, b, err, want)
		}
		st, err := os.Stat(filepath.Join(dir, rel))
		if err == nil && (st.Mode().Perm() != 0o644 || int(st.Sys().(*syscall.Stat_t).Uid) != owner) {
			t.Errorf("seed's %s is now %v owned by %d", rel, st.Mode(), st.Sys().(*syscall.Stat_t).Uid)
		}
	}
	// A write past the disk ceiling, even of a copy of the seed's
	// files, is the disk's breach.
	r = exec(sb2, "head -c 16M /dev/zero > /workspace/keep; sleep 1")
	if r.Outcome != result.LimitExceeded || r.Limit == nil || r.Limit.Name != result.LimitDisk {
		t.Errorf("a write past the disk ceiling: %s %+v %q; want a disk breach", r.Outcome, r.Limit, r.Stderr)
	}
	for _, x := range []struct {
		sb *Sandbox
		tr *trace
	}{{sb1, tr1}, {sb2, tr2}} {
		if err := x.sb.Destroy(t.Context()); err != nil {
			t.Errorf("Destroy: %v", err)
		}
		x.tr.assertGone(t)
	}
}

// TestSeedRefused: a seed that is not a clean path, or lacks one of its
// directories, is refused before anything is made.
func TestSeedRefused(t *testing.T) {
	rt := testRuntime(t)
	empty := t.TempDir()
	for _, sd := range []*Seed{{Dir: "rel"}, {Dir: empty + "/../x"}, {Dir: empty}} {
		spec := Spec{Limits: DefaultLimits(), Seed: sd}
		if sb, err := rt.Create(t.Context(), spec); err == nil {
			sb.Destroy(t.Context())
			t.Errorf("seed %q was accepted", sd.Dir)
		}
	}
}

// makeSeed makes a seed as the snapshot store does: files owned by the
// seed owner, below a root open to all.
func makeSeed(t *testing.T, rt *Runtime) string {
	t.Helper()
	dir := t.TempDir()
	owner := rt.SeedOwner()
	write := func(rel, data string) {
		p := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("workspace/keep", "kept\n")
	write("workspace/change", "old\n")
	write("workspace/gone", "x\n")
	write("workspace/d/inner", "inner\n")
	write("tmp/t", "t\n")
	if err := filepath.Walk(dir, func(p string, _ os.FileInfo, err error) error {
		if err != nil || p == dir {
			return err
		}
		return os.Lchown(p, owner, owner)
	}); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestSeedOnImage: a sandbox whose root is an image starts from a seed
// too; its /workspace (a symlink in the image) is the seed's overlay.
func TestSeedOnImage(t *testing.T) {
	for _, be := range backends(t) {
		t.Run(be.name, func(t *testing.T) { testSeedOnImage(t, be) })
	}
}

func testSeedOnImage(t *testing.T, be backend) {
	rt := testRuntime(t)
	if !rt.Seeds() {
		t.Skip("this kernel's tmpfs holds no user.* attributes (Linux 6.6)")
	}
	root := handImage(t, rt)
	seed := makeSeed(t, rt)
	spec := func(s *Spec) {
		if be.spec != nil {
			be.spec(s)
		}
		s.Image = &Image{Root: root}
		s.Seed = &Seed{Dir: seed}
	}
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"cat", "/workspace/keep"}, "kept\n"},
		{[]string{"stat", "/workspace/d/inner"}, "1000:1000:100644"},
		{[]string{"cat", "/tmp/t"}, "t\n"},
		{[]string{"write", "/workspace/keep", "mine"}, ""},
	} {
		if rep, _ := imageRun(t, spec, append([]string{"/bin/t"}, tt.args...)...); !rep.OK || rep.Value != tt.want {
			t.Errorf("%v: %+v; want %q", tt.args, rep, tt.want)
		}
	}
	if b, err := os.ReadFile(filepath.Join(seed, "workspace/keep")); err != nil || string(b) != "kept\n" {
		t.Errorf("the seed after a sandbox wrote: %q %v", b, err)
	}
}
