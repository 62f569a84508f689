package forkexec

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/airlockhq/airlock/internal/linux/seccomp"
)

// progAsm builds programs for the tests.
type progAsm struct{ p Prog }

func (a *progAsm) str(s string) Arg {
	a.p.Blobs = append(a.p.Blobs, append([]byte(s), 0))
	return Arg{Kind: ArgBlob, Index: uint32(len(a.p.Blobs) - 1)}
}

func (a *progAsm) data(b []byte) Arg {
	a.p.Blobs = append(a.p.Blobs, b)
	return Arg{Kind: ArgBlob, Index: uint32(len(a.p.Blobs) - 1)}
}

func imm(v uint64) Arg  { return Arg{Kind: ArgImm, Imm: v} }
func slot(i uint32) Arg { return Arg{Kind: ArgSlot, Index: i} }
func atCwd() Arg {
	cwd := int64(unix.AT_FDCWD)
	return imm(uint64(cwd))
}
func (a *progAsm) op(o Op) { a.p.Ops = append(a.p.Ops, o) }

func sys(what string, trap uintptr, args ...Arg) Op {
	o := Op{Trap: trap, Save: NoSave, What: what}
	copy(o.Args[:], args)
	return o
}

// TestProg runs programs in a child before it execs and checks their
// effects, their branches and how a failed op is reported.
func TestProg(t *testing.T) {
	dir := t.TempDir()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()

	a := &progAsm{}
	a.p.NFiles = 1
	sub := filepath.Join(dir, "sub")
	a.op(sys("mkdir sub", unix.SYS_MKDIRAT, atCwd(), a.str(sub), imm(0o700)))
	// A missing directory: ENOENT skips the op after it.
	o := sys("mkdir in a missing directory", unix.SYS_MKDIRAT, atCwd(), a.str(filepath.Join(dir, "nope", "x")), imm(0o700))
	o.Else[0] = Branch{Errno: unix.ENOENT, Skip: 1}
	a.op(o)
	a.op(sys("never run", unix.SYS_MKDIRAT, atCwd(), a.str(filepath.Join(dir, "nope", "y")), imm(0o700)))
	// A file written whole, through a saved descriptor.
	o = sys("create sub/f", unix.SYS_OPENAT, atCwd(), a.str(filepath.Join(sub, "f")), imm(unix.O_WRONLY|unix.O_CREAT|unix.O_CLOEXEC), imm(0o600))
	o.Save = a.p.FirstSave()
	a.op(o)
	f := slot(uint32(a.p.FirstSave()))
	content := []byte("written by the program\n")
	o = sys("write sub/f", unix.SYS_WRITE, f, a.data(content), imm(uint64(len(content))))
	o.Whole = true
	a.op(o)
	a.op(sys("close sub/f", unix.SYS_CLOSE, f))
	// The caller's pipe, through the program's copy of it (slot 0).
	a.op(sys("write the pipe", unix.SYS_WRITE, slot(0), a.data([]byte("pipe")), imm(4)))
	// A success that skips the op after it.
	o = sys("chdir", unix.SYS_CHDIR, a.str(sub))
	o.Skip = 1
	a.op(o)
	a.op(sys("never run either", unix.SYS_MKDIRAT, atCwd(), a.str(filepath.Join(dir, "skipped")), imm(0o700)))

	out, ws, err := run(t, Spec{Path: "/bin/pwd", Argv: []string{"pwd"}, UID: -1, GID: -1, CgroupFD: -1, Prog: &a.p, ProgFiles: []int{int(w.Fd())}})
	if err != nil || ws.ExitStatus() != 0 {
		t.Fatalf("Start: %v, status %v", err, ws)
	}
	if out != sub+"\n" {
		t.Errorf("the program's chdir: pwd says %q, want %q", out, sub)
	}
	if b, err := os.ReadFile(filepath.Join(sub, "f")); err != nil || string(b) != string(content) {
		t.Errorf("sub/f: %q, %v", b, err)
	}
	for _, p := range []string{"nope", "skipped"} {
		if _, err := os.Stat(filepath.Join(dir, p)); err == nil {
			t.Errorf("%s exists: a skipped op ran", p)
		}
	}
	w.Close()
	buf := make([]byte, 16)
	if n, _ := r.Read(buf); string(buf[:n]) != "pipe" {
		t.Errorf("pipe: %q", buf[:n])
	}

	// A failing op is reported by index and name, and nothing after it
	// runs.
	b := &progAsm{}
	b.op(sys("first", unix.SYS_MKDIRAT, atCwd(), b.str(filepath.Join(dir, "first")), imm(0o700)))
	b.op(sys("make a directory that exists", unix.SYS_MKDIRAT, atCwd(), b.str(sub), imm(0o700)))
	b.op(sys("after", unix.SYS_MKDIRAT, atCwd(), b.str(filepath.Join(dir, "after")), imm(0o700)))
	_, _, err = run(t, Spec{Path: "/bin/true", Argv: []string{"true"}, UID: -1, GID: -1, CgroupFD: -1, Prog: &b.p})
	var fe *Error
	if !errors.As(err, &fe) || fe.Step != "setup" || fe.Op != 1 || fe.Errno != unix.EEXIST || fe.What != "make a directory that exists" {
		t.Fatalf("Start: %#v, want op 1 failing with EEXIST", err)
	}
	if !strings.Contains(err.Error(), "make a directory that exists") {
		t.Errorf("error %q does not name the op", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "after")); err == nil {
		t.Error("an op after the failed one ran")
	}
}

// TestProgSeccomp installs a filter from a program: the program the child
// then execs runs under it.
func TestProgSeccomp(t *testing.T) {
	prof := seccomp.DefaultProfile()
	prof.Rules = slices.DeleteFunc(prof.Rules, func(r seccomp.Rule) bool { return r.Name == "uname" })
	filter, err := prof.Compile()
	if err != nil {
		t.Skipf("profile: %v", err)
	}
	a := &progAsm{}
	a.op(sys("no_new_privs", unix.SYS_PRCTL, imm(unix.PR_SET_NO_NEW_PRIVS), imm(1)))
	a.op(Op{Trap: TrapSeccomp, Args: [6]Arg{a.data(seccomp.Encode(filter))}, Save: NoSave, What: "seccomp"})
	out, ws, err := run(t, Spec{Path: "/bin/uname", Argv: []string{"uname"}, UID: -1, GID: -1, CgroupFD: -1, Prog: &a.p})
	if err != nil {
		t.Fatal(err)
	}
	if ws.ExitStatus() == 0 {
		t.Errorf("uname ran under a filter that refuses it: %q", out)
	}
}

// TestProgChecked refuses programs a child could not run safely.
func TestProgChecked(t *testing.T) {
	for name, p := range map[string]*Prog{
		"blob out of range": &Prog{Ops: []Op{{Trap: unix.SYS_CHDIR, Args: [6]Arg{{Kind: ArgBlob, Index: 3}}, Save: NoSave}}},
		"slot out of range": &Prog{Ops: []Op{{Trap: unix.SYS_CLOSE, Args: [6]Arg{{Kind: ArgSlot, Index: maxSlots}}, Save: NoSave}}},
		"save over a file":  &Prog{Ops: []Op{{Trap: unix.SYS_GETPID, Save: 0}}, NFiles: 1},
		"save over the exe": &Prog{Ops: []Op{{Trap: unix.SYS_GETPID, Save: 1}}, NFiles: 1},
		"save out of range": &Prog{Ops: []Op{{Trap: unix.SYS_GETPID, Save: maxSlots}}},
		"unknown kind":      &Prog{Ops: []Op{{Trap: unix.SYS_GETPID, Args: [6]Arg{{Kind: 9}}, Save: NoSave}}},
		"exe without file":  &Prog{Ops: []Op{{Trap: unix.SYS_CLOSE, Args: [6]Arg{{Kind: ArgExe}}, Save: NoSave}}},
		"seccomp, no blob":  &Prog{Ops: []Op{{Trap: TrapSeccomp, Save: NoSave}}},
		"short filter":      &Prog{Ops: []Op{{Trap: TrapSeccomp, Args: [6]Arg{{Kind: ArgBlob}}, Save: NoSave}}, Blobs: [][]byte{{1, 2, 3}}},
		"too many files":    &Prog{NFiles: maxSlots},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Start(Spec{Path: "/bin/true", Argv: []string{"true"}, Files: []int{-1}, UID: -1, GID: -1, CgroupFD: -1, Prog: p, ProgFiles: make([]int, p.NFiles)})
			if err == nil || !strings.HasPrefix(err.Error(), "forkexec: ") {
				t.Errorf("Start: %v, want a refusal", err)
			}
		})
	}
}

// TestProgShared runs one program in children started at once: a program
// serves any number of them, each writing only what is its own.
func TestProgShared(t *testing.T) {
	dir := t.TempDir()
	a := &progAsm{}
	f := a.p.FirstSave()
	o := sys("create f", unix.SYS_OPENAT, atCwd(), a.str(dir+"/f"), imm(unix.O_WRONLY|unix.O_CREAT|unix.O_APPEND|unix.O_CLOEXEC), imm(0o600))
	o.Save = f
	a.op(o)
	o = sys("write f", unix.SYS_WRITE, slot(uint32(f)), a.data([]byte("x")), imm(1))
	o.Whole = true
	a.op(o)
	const n = 8
	errs := make(chan error, n)
	for range n {
		go func() {
			_, _, err := run(t, Spec{Path: "/bin/true", Argv: []string{"true"}, UID: -1, GID: -1, CgroupFD: -1, Prog: &a.p})
			errs <- err
		}()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	if b, err := os.ReadFile(dir + "/f"); err != nil || len(b) != n {
		t.Errorf("f: %q, %v; want %d writes", b, err, n)
	}
	if _, err := Start(Spec{Path: "/bin/true", Argv: []string{"true"}, Files: []int{-1}, UID: -1, GID: -1, CgroupFD: -1, Prog: &a.p, ProgFiles: []int{1}}); err == nil {
		t.Error("a start with files the program does not take was accepted")
	}
}

// TestManyFiles: with a Files list longer than the numbers of the
// caller's own descriptors, mostly -1 (closed in the child), a step that
// fails after the descriptors are in place is still reported as that
// step. The child's end of its status pipe is moved out of their way
// first: closed among them, it read as a successful exec, and a caller
// that shares its memory with the child took back the child's stack while
// the child still ran on it.
func TestManyFiles(t *testing.T) {
	files := make([]int, 300)
	for i := range files {
		files[i] = -1
	}
	a := &progAsm{}
	a.op(sys("mkdir in a missing directory", unix.SYS_MKDIRAT, atCwd(), a.str(filepath.Join(t.TempDir(), "nope", "x")), imm(0o700)))
	_, ws, err := run(t, Spec{Path: "/bin/true", Argv: []string{"true"}, UID: -1, GID: -1, CgroupFD: -1, Files: files, Prog: &a.p})
	var fe *Error
	if !errors.As(err, &fe) || fe.Errno != unix.ENOENT {
		t.Fatalf("Start: %v (status %v), want the program's ENOENT", err, ws)
	}
}
