package forkexec

import (
	"errors"
	"os"
	"strconv"
	"testing"

	"golang.org/x/sys/unix"
)

// A held child may run on the caller's memory while the caller goes on:
// the spec it reads must stay as it was at the clone. (The caller once
// marked its own ends of the pipes closed in the spec, and a child that
// read it late skipped the hold, or reported a failure nowhere.)
func TestSpecUntouchedAfterClone(t *testing.T) {
	c, err := Start(Spec{Path: "/bin/true", Argv: []string{"true"}, Files: []int{-1}, Hold: true, UID: -1, GID: -1, CgroupFD: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Kill()
	if c.s.errW < 0 || c.s.syncR < 0 || c.s.syncW < 0 {
		t.Fatalf("spec changed after the clone: errW %d syncR %d syncW %d", c.s.errW, c.s.syncR, c.s.syncW)
	}
	if err := c.Release(); err != nil {
		t.Fatal(err)
	}
	if c.s.errW < 0 || c.s.syncR < 0 || c.s.syncW < 0 {
		t.Fatalf("spec changed by the release: errW %d syncR %d syncW %d", c.s.errW, c.s.syncR, c.s.syncW)
	}
}

// TestHeldInNamespaces starts held children the way the spawner starts
// inits (new namespaces, a sibling, id maps written while held), many
// times over.
func TestHeldInNamespaces(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	for i := range 200 {
		c, err := Start(Spec{Path: "/bin/true", Argv: []string{"true"}, Files: []int{-1}, Hold: true, Sibling: i%2 == 0,
			UID: 0, GID: 0, ClearGroups: true, CgroupFD: -1,
			Flags: unix.CLONE_NEWUSER | unix.CLONE_NEWNS | unix.CLONE_NEWPID | unix.CLONE_NEWIPC | unix.CLONE_NEWUTS})
		if err != nil {
			t.Fatal(i, err)
		}
		line := []byte("0 100000 65536\n")
		dir := "/proc/" + strconv.Itoa(c.Pid) + "/"
		for _, f := range []string{"uid_map", "gid_map"} {
			if err = os.WriteFile(dir+f, line, 0); err != nil {
				t.Fatal(i, f, err)
			}
		}
		if err := c.Release(); err != nil {
			t.Fatal(i, "release: ", err)
		}
		if i%2 == 1 {
			var ws unix.WaitStatus
			if _, err := unix.Wait4(c.Pid, &ws, 0, nil); err != nil {
				t.Fatal(err)
			}
			if ws.ExitStatus() != 0 {
				t.Fatalf("%d: child ended with %v", i, ws)
			}
		}
		unix.Close(c.PidFD)
	}
}

// TestLetThenExecd lets held children go without waiting, as the sandbox
// runtime does, and asks afterwards: one that execs, one whose exec fails
// (its step and errno come back, and it is left for the caller to reap),
// and one killed before it was asked.
func TestLetThenExecd(t *testing.T) {
	tests := []struct {
		name, path string
		kill       bool
		wantErr    error
		wantStatus int
	}{
		{name: "execs", path: "/bin/true", wantStatus: 0},
		{name: "exec fails", path: "/nonexistent/true", wantErr: unix.ENOENT, wantStatus: 127},
		{name: "killed first", path: "/bin/sleep", kill: true, wantStatus: -1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Start(Spec{Path: tc.path, Argv: []string{"x", "10"}, Files: []int{-1}, Hold: true, UID: -1, GID: -1, CgroupFD: -1})
			if err != nil {
				t.Fatal(err)
			}
			defer unix.Close(c.PidFD)
			if err := c.Execd(); err == nil {
				t.Fatal("Execd before Let succeeded")
			}
			if err := c.Let(); err != nil {
				t.Fatal(err)
			}
			if tc.kill {
				if err := unix.PidfdSendSignal(c.PidFD, unix.SIGKILL, nil, 0); err != nil {
					t.Fatal(err)
				}
			}
			err = c.Execd()
			var fe *Error
			switch {
			case tc.wantErr == nil && err != nil:
				t.Fatalf("Execd: %v", err)
			case tc.wantErr != nil && (!errors.As(err, &fe) || fe.Step != "exec" || fe.Errno != tc.wantErr):
				t.Fatalf("Execd: %v, want exec: %v", err, tc.wantErr)
			}
			if err := c.Execd(); err == nil {
				t.Error("second Execd succeeded")
			}
			// Execd reaps nothing: the child is the caller's to reap.
			var ws unix.WaitStatus
			if _, err := unix.Wait4(c.Pid, &ws, 0, nil); err != nil {
				t.Fatalf("wait4: %v", err)
			}
			if got := ws.ExitStatus(); got != tc.wantStatus || tc.kill != ws.Signaled() {
				t.Fatalf("child ended with %v, want status %d (killed %v)", ws, tc.wantStatus, tc.kill)
			}
		})
	}
}
