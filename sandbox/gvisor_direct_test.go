package sandbox

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/sbinit"
	"github.com/airlockhq/airlock/internal/testutil"
	"github.com/airlockhq/airlock/result"
)

// TestOneCommand: a gVisor sandbox made for one command runs it as the
// guest's first process, with no init, as the sandbox's user; one asked
// for before its command, or given one that needs init, starts with
// init; one destroyed before any command leaves nothing, and says it is
// done; a second command is refused.
func TestOneCommand(t *testing.T) {
	bes := oneCommandBackend(t)
	if bes == nil {
		t.Skip("gVisor's tests run where runsc is at hand, and not with -short")
	}
	be := bes[0]
	firstProcess := []string{"sh", "-c", `tr '\0' ' ' < /proc/1/cmdline; echo; id -u; ls /proc | grep -c '^[0-9]'`}

	t.Run("direct", func(t *testing.T) {
		r := run(t, runOpts{spec: be.spec}, firstProcess...)
		lines := strings.Split(strings.TrimSpace(string(r.Stdout)), "\n")
		if r.Outcome != result.Exited || r.ExitCode != 0 || len(lines) != 3 {
			t.Fatalf("got %s %d %q %q %q", r.Outcome, r.ExitCode, r.Error, r.Stdout, r.Stderr)
		}
		// sh, tr, ls and grep: the command's own, and no init.
		if !strings.HasPrefix(lines[0], "sh -c ") || lines[1] != "1000" {
			t.Fatalf("the guest's first process is %q, running as %s: want the command, as 1000", lines[0], lines[1])
		}
	})

	rt := testRuntime(t)
	spec := Spec{Limits: DefaultLimits()}
	be.spec(&spec)
	// start starts a sandbox of spec, destroyed and checked for
	// leftovers at the test's end.
	start := func(t *testing.T, spec Spec) *Sandbox {
		t.Helper()
		sb, err := rt.Start(t.Context(), spec)
		if err != nil {
			t.Fatal(err)
		}
		tr := traceOf(t, sb)
		t.Cleanup(func() {
			if err := sb.Destroy(context.Background()); err != nil {
				t.Error(err)
			}
			tr.assertGone(t)
		})
		return sb
	}

	// What starts the sandbox with init instead.
	for _, tt := range []struct {
		name  string
		limit func(*Limits)
		// before runs before the command; req changes it.
		before func(*Sandbox) error
		req    func(*ExecRequest)
	}{
		{name: "asked for before its command", before: func(sb *Sandbox) error { return sb.AwaitStart(t.Context()) }},
		{name: "a command kept alive", req: func(x *ExecRequest) { x.KeepAlive = true }},
		// The command's own: runsc's start would count in it.
		{name: "a CPU-time ceiling", limit: func(l *Limits) { l.CPUTime = 10 * time.Second }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			spec := spec
			if tt.limit != nil {
				tt.limit(&spec.Limits)
			}
			sb := start(t, spec)
			if tt.before != nil {
				if err := tt.before(sb); err != nil {
					t.Fatal(err)
				}
			}
			x := ExecRequest{Argv: firstProcess, Capture: true}
			if tt.req != nil {
				tt.req(&x)
			}
			r := sb.Exec(t.Context(), x)
			if r.Outcome != result.Exited || !strings.HasPrefix(string(r.Stdout), sbinit.GVisorPath) {
				t.Fatalf("got %s %q %q: want init as the first process", r.Outcome, r.Stdout, r.Error)
			}
			if x.KeepAlive {
				if r := sb.Exec(t.Context(), ExecRequest{Argv: []string{"true"}}); r.Outcome != result.Exited || r.ExitCode != 0 {
					t.Fatalf("second command: %s %d %q", r.Outcome, r.ExitCode, r.Error)
				}
			}
		})
	}

	t.Run("a working directory it may not have", func(t *testing.T) {
		// runsc would make it; init refuses it, as the other backend.
		r := start(t, spec).Exec(t.Context(), ExecRequest{Argv: []string{"pwd"}, Dir: "/workspace/missing", Capture: true})
		if r.Outcome != result.Exited || r.ExitCode != 126 || !strings.Contains(string(r.Stderr), "working directory /workspace/missing") {
			t.Fatalf("got %s %d %q %q, want 126 and init's word", r.Outcome, r.ExitCode, r.Stderr, r.Error)
		}
	})

	t.Run("destroyed before its command", func(t *testing.T) {
		sb, err := rt.Start(t.Context(), spec)
		if err != nil {
			t.Fatal(err)
		}
		tr := traceOf(t, sb)
		if err := sb.Destroy(t.Context()); err != nil {
			t.Fatal(err)
		}
		tr.assertGone(t)
		select {
		case <-sb.Done():
		case <-time.After(time.Second):
			t.Fatal("Done not closed")
		}
		if r := sb.Exec(t.Context(), ExecRequest{Argv: []string{"true"}}); r.Outcome != result.Error {
			t.Fatalf("a command after Destroy: %s", r.Outcome)
		}
	})

	t.Run("one command only", func(t *testing.T) {
		sb := start(t, spec)
		if r := sb.Exec(t.Context(), ExecRequest{Argv: []string{"true"}}); r.Outcome != result.Exited || r.ExitCode != 0 {
			t.Fatalf("first: %s %d %q", r.Outcome, r.ExitCode, r.Error)
		}
		r := sb.Exec(t.Context(), ExecRequest{Argv: []string{"true"}})
		if r.Outcome != result.Error || !strings.Contains(r.Error, ErrDead.Error()) {
			t.Fatalf("second: got %s %q, want %q", r.Outcome, r.Error, ErrDead)
		}
	})
}

// TestOneCommandDescriptors: the descriptor ceiling binds a one-command
// sandbox's command (the guest kernel's RLIMIT_NOFILE), though only init
// could name its breach.
func TestOneCommandDescriptors(t *testing.T) {
	bes := oneCommandBackend(t)
	if bes == nil {
		t.Skip("gVisor's tests run where runsc is at hand, and not with -short")
	}
	r := run(t, runOpts{spec: bes[0].spec, limits: limits(func(l *Limits) { l.FDs = 64 })}, "sh", "-c", "ulimit -n; ulimit -Hn")
	if r.Outcome != result.Exited || string(r.Stdout) != "64\n64\n" {
		t.Fatalf("got %s %q %q, want 64 twice", r.Outcome, r.Stdout, r.Error)
	}
}

// TestGVisorSharedRoot: gVisor sandboxes of the same content share one
// root directory on the host, and still see only their own mounts on it:
// what one writes in its /workspace the other does not see, and the
// shared directory itself holds no mount on the host. Another hostname
// is another root. A runtime's roots go with it, and a sweep removes a
// dead runtime's.
func TestGVisorSharedRoot(t *testing.T) {
	spec := gvisorSpec(t)
	rt, err := New(t.Context(), Options{StateDir: testStateDir, CgroupParent: testCgroup + "-roots", InitPath: testutil.InitPath(t), Runsc: os.Getenv(testutil.RunscEnv)})
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	defer func() {
		if !closed {
			rt.Close()
		}
	}()
	mk := func(hostname string) *Sandbox {
		s := Spec{Limits: DefaultLimits(), Hostname: hostname}
		spec(&s)
		sb, err := rt.Create(t.Context(), s)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { sb.Destroy(context.Background()) })
		return sb
	}
	a, b, c := mk("same"), mk("same"), mk("other")
	if a.gv.root != b.gv.root || a.gv.root == c.gv.root || !strings.HasPrefix(a.gv.root, rt.rootsDir()) {
		t.Fatalf("roots %s, %s, %s: want the first two shared, below %s, and the third another", a.gv.root, b.gv.root, c.gv.root, rt.rootsDir())
	}
	sh := func(sb *Sandbox, script string) string {
		r := sb.Exec(t.Context(), ExecRequest{Argv: []string{"sh", "-c", script}, Capture: true, KeepAlive: true})
		if r.Outcome != result.Exited || r.ExitCode != 0 {
			t.Fatalf("%s: %s %d %q", script, r.Outcome, r.ExitCode, r.Stderr)
		}
		return string(r.Stdout)
	}
	sh(a, "echo a > /workspace/mine")
	if got := sh(b, "ls -A /workspace; hostname"); got != "same\n" {
		t.Fatalf("the second sandbox's /workspace and hostname: %q, want nothing and same", got)
	}
	if got := sh(c, "hostname"); got != "other\n" {
		t.Fatalf("the third's hostname: %q", got)
	}
	if m := hostMountsUnder(rt.rootsDir()); len(m) > 0 {
		t.Fatalf("mounts on the host below the shared roots: %v", m)
	}

	// A runtime that died left its roots, and its lock free.
	dead := filepath.Join(rt.rootsDir(), "0123456789ab")
	if err := os.MkdirAll(filepath.Join(dead, "k"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dead+".lock", nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := rt.sweepRoots(); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{dead, dead + ".lock"} {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s left by the sweep (%v)", p, err)
		}
	}
	if _, err := os.Stat(a.gv.root); err != nil {
		t.Fatalf("the live runtime's root swept: %v", err)
	}
	for _, sb := range []*Sandbox{a, b, c} {
		if err := sb.Destroy(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	root := a.gv.root
	closed = true
	if err := rt.Close(); err != nil {
		t.Fatal(err)
	}
	// Nor the directory of every runtime's roots, empty now (a stopped
	// daemon leaves nothing in its state directory).
	for _, p := range []string{filepath.Dir(root), rt.rootsDir()} {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("%s left after Close (%v)", p, err)
		}
	}
}
