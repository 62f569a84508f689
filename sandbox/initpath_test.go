package sandbox

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlockhq/airlock/internal/initproto"
	"github.com/airlockhq/airlock/result"
)

// TestCheckInit refuses init programs that someone other than root could
// replace or change, each case set up for real on the file system.
func TestCheckInit(t *testing.T) {
	requireRoot(t)
	base := t.TempDir()
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	mk := func(dirMode, fileMode os.FileMode, owner int) string {
		dir, err := os.MkdirTemp(base, "d")
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, InitName)
		if err := os.WriteFile(p, []byte("#!/bin/sh\n"), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, fileMode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(p, owner, owner); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(dir, dirMode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	tests := []struct {
		name string
		path string
		want string // "" for accepted
	}{
		{"root's, 0755", mk(0o755, 0o755, 0), ""},
		{"in a sticky world-writable directory", mk(os.ModeSticky|0o777, 0o755, 0), ""},
		{"writable by others", mk(0o755, 0o757, 0), "writable by group or others"},
		{"writable by its group", mk(0o755, 0o775, 0), "writable by group or others"},
		{"someone else's", mk(0o755, 0o755, 1000), "not owned by root"},
		{"in a directory others can change", mk(0o777, 0o755, 0), "writable by group or others"},
		{"not executable", mk(0o755, 0o644, 0), "not an executable file"},
		{"missing", filepath.Join(base, "none", InitName), "no such file"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := checkInit(tc.path)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("checkInit: %v, want accepted", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("checkInit: %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

// TestSelfInitFallback creates a sandbox with no init program installed:
// this test binary calls Child, so it serves as its own init and spawner.
func TestSelfInitFallback(t *testing.T) {
	testRuntime(t)
	rt, err := New(t.Context(), Options{StateDir: testStateDir, CgroupParent: testCgroup})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	if rt.opts.InitPath != selfPath {
		t.Skipf("an init program is installed here (%s): nothing to fall back from", rt.opts.InitPath)
	}
	sb, err := rt.Create(t.Context(), Spec{Limits: DefaultLimits()})
	if err != nil {
		t.Fatal(err)
	}
	tr := traceOf(t, sb)
	r := sb.Exec(t.Context(), ExecRequest{Argv: []string{"echo", "from the fallback"}, Capture: true})
	if err := sb.Destroy(t.Context()); err != nil {
		t.Fatal(err)
	}
	tr.assertGone(t)
	if r.Outcome != result.Exited || string(r.Stdout) != "from the fallback\n" {
		t.Fatalf("got %s %q %s", r.Outcome, r.Stdout, r.Error)
	}
}

// TestInitFromAnotherBuild points the runtime at init programs that are
// not this build's: one that speaks another protocol version, and one
// that is no spawner at all. Create fails with an error that says so. The
// spawner's hello is what carries the version to the host; a runtime that
// clones in process sends it to init in the setup, which init checks.
func TestInitFromAnotherBuild(t *testing.T) {
	testRuntime(t)
	dir := t.TempDir()
	tests := []struct {
		name, script, want string
	}{
		// A SOCK_SEQPACKET socket takes each write as one message: this
		// one is a hello of protocol 1 (one varint byte).
		{"older protocol", `printf '\001' >&3; exec sleep 10`, "different builds: " + dir},
		{"not a spawner", `exit 0`, "did not start as airlock's spawner"},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(dir, fmt.Sprint(i), InitName)
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, []byte("#!/bin/sh\n"+tc.script+"\n"), 0o755); err != nil {
				t.Fatal(err)
			}
			rt, err := New(t.Context(), Options{StateDir: testStateDir, CgroupParent: testCgroup, InitPath: p, spawner: true})
			if err != nil {
				t.Fatal(err)
			}
			defer rt.Close()
			_, err = rt.Create(t.Context(), Spec{Limits: DefaultLimits()})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Create: %v, want an error containing %q", err, tc.want)
			}
			if tc.name == "older protocol" && !errors.Is(err, initproto.ErrVersion) {
				t.Errorf("Create: %v, want initproto.ErrVersion", err)
			}
		})
	}
}
