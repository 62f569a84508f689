package sandbox

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/volume"
	"github.com/airlockhq/airlock/result"
)

// TestVolumeAcrossSandboxes attaches one volume to two sandboxes, one
// after the other, each with an id range of its own: what the first
// wrote the second reads as its own user's, and on the host's disk it is
// owned by the plain id 1000 (never a sandbox's host id); a sandbox that
// writes the volume full is a named breach of the disk, with the
// volume's size as the ceiling.
func TestVolumeAcrossSandboxes(t *testing.T) {
	for _, be := range backends(t) {
		t.Run(be.name, func(t *testing.T) { testVolumeAcrossSandboxes(t, be) })
	}
}

func testVolumeAcrossSandboxes(t *testing.T, be backend) {
	rt := testRuntime(t)
	vm, err := volume.Open(filepath.Join(t.TempDir(), "volumes"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { vm.Close() })
	meta, err := vm.Create(t.Context(), volume.Meta{ID: "vol_test", Name: "data", Owner: "local", Size: volume.MinSize, Created: time.Now()})
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	dir, release, err := vm.Use(meta.ID)
	if err != nil {
		t.Fatalf("Use: %v", err)
	}
	spec := Spec{Limits: DefaultLimits(), Volumes: []Volume{{Dir: dir, Target: "/data", Size: meta.Size}}}
	spec.Limits.Time = 30 * time.Second
	if be.spec != nil {
		be.spec(&spec)
	}
	open := func() (*Sandbox, *trace) {
		t.Helper()
		sb, err := rt.Create(t.Context(), spec)
		if err != nil {
			t.Fatalf("Create: %v", err)
		}
		return sb, traceOf(t, sb)
	}
	exec := func(sb *Sandbox, cmd string) *result.Result {
		return sb.Exec(t.Context(), ExecRequest{Argv: []string{"/bin/sh", "-c", cmd}, Capture: true, KeepAlive: true})
	}
	done := func(sb *Sandbox, tr *trace) {
		t.Helper()
		if err := sb.Destroy(t.Context()); err != nil {
			t.Errorf("Destroy: %v", err)
		}
		tr.assertGone(t)
	}
	// The first stays while the second runs: two id ranges at once.
	sb1, tr1 := open()
	r := exec(sb1, "echo kept > /data/f && mkdir /data/d && stat -c '%U %u' /data /data/f")
	if r.Outcome != result.Exited || r.ExitCode != 0 || string(r.Stdout) != "sandbox 1000\nsandbox 1000\n" {
		t.Fatalf("first sandbox: %s %d %q %q", r.Outcome, r.ExitCode, r.Stdout, r.Stderr)
	}
	st, err := os.Stat(filepath.Join(dir, "f"))
	if err != nil {
		t.Fatal(err)
	}
	if uid := st.Sys().(*syscall.Stat_t).Uid; uid != 1000 {
		t.Errorf("on the host's disk the file is owned by %d, want 1000 (not the sandbox's host id)", uid)
	}
	sb2, tr2 := open()
	if sb1.HostIDBase() == sb2.HostIDBase() {
		t.Fatalf("two live sandboxes share id range %d", sb1.HostIDBase())
	}
	r = exec(sb2, "cat /data/f && stat -c '%U' /data/f && touch /data/d/mine")
	if string(r.Stdout) != "kept\nsandbox\n" || r.ExitCode != 0 {
		t.Errorf("second sandbox: %q %q", r.Stdout, r.Stderr)
	}
	done(sb1, tr1)
	done(sb2, tr2)
	runIn := func(cmd string) *result.Result {
		sb, tr := open()
		defer done(sb, tr)
		return exec(sb, cmd)
	}
	// Full: a named breach of the disk, the volume's size its ceiling.
	r = runIn("head -c 64M /dev/zero > /data/big; sleep 1")
	if r.Outcome != result.LimitExceeded || r.Limit == nil || r.Limit.Name != result.LimitDisk || r.Limit.Ceiling != meta.Size {
		t.Errorf("a volume written full: %s %+v %q; want a disk breach at %d", r.Outcome, r.Limit, r.Stderr, meta.Size)
	}
	release()
	if err := vm.Delete(meta.ID); err != nil {
		t.Errorf("Delete: %v", err)
	}
}
