package forkexec

import (
	"fmt"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// Prog is a program of system calls that a child runs after its own steps
// (ids, descriptors) and before its exec, with nothing but raw system
// calls: how a sandbox is built before its init starts, as bubblewrap
// builds one before it execs. It is data, prepared by the caller before
// the clone, so that the child needs no allocation, no lock and no Go
// scheduler, and the same program runs whether the child shares the
// caller's memory, is a copy of it, or is cloned by another process that
// received the program (see Spec.Prog).
//
// Ops run in order. Each op is one system call (or one of the pseudo
// calls, see TrapLandlockRule and TrapSeccomp) whose arguments are
// immediates, pointers into Blobs, or slots: descriptors that earlier ops
// returned, or the child's copies of the program's files.
//
// A Prog is not changed once used: one may serve any number of children,
// at once too (what a child writes is its own). An op that fails ends the
// program, and the child reports which op and errno; an op may instead
// name errnos after which the program skips ahead and goes on (a /proc
// entry this kernel lacks, say).
type Prog struct {
	Ops []Op
	// Blobs are the bytes ops point to: NUL-terminated strings, file
	// contents, kernel structs.
	Blobs [][]byte
	// NFiles is how many descriptors of the caller's ops use (ArgSlot 0,
	// 1, ...), given with each start (Spec.ProgFiles): the child uses
	// copies of them, made before it installs its own descriptors, so
	// their numbers never collide.
	NFiles int

	// once resolves the program for children, once (see resolve).
	once sync.Once
	res  *resolved
}

// Op is one system call of a Prog.
type Op struct {
	// Trap is the system call's number, or a pseudo call.
	Trap uintptr
	Args [6]Arg
	// Save, when not NoSave, is the slot the call's result is kept in:
	// one after the slots of the files and of the executable (FirstSave).
	Save int8
	// Whole says the result must equal Args[2] (a write of a whole
	// buffer); a short count fails the op with EIO.
	Whole bool
	// Skip is how many of the following ops a success skips.
	Skip uint8
	// Else lists errnos after which the program skips Skip ops and goes
	// on instead of failing; Errno 0 ends the list.
	Else [2]Branch
	// What says what the op does, for an error that names it ("bind
	// /usr read-only").
	What string
}

// NoSave is Op.Save for a result that is not kept.
const NoSave = -1

// Branch is an alternative way on after an errno.
type Branch struct {
	Errno syscall.Errno
	Skip  uint8
}

// ArgKind says what an Arg is.
type ArgKind uint8

// Arg kinds.
const (
	// ArgImm is Arg.Imm itself.
	ArgImm ArgKind = iota
	// ArgBlob is a pointer to Blobs[Arg.Index] (nil for an empty blob).
	ArgBlob
	// ArgSlot is the value of slot Arg.Index: a copy of file i for i
	// below NFiles, the executable's at NFiles (ArgExe), else a result an
	// op saved.
	ArgSlot
	// ArgExe is the child's copy of the file it will execute
	// (Spec.PathFile), open with O_PATH.
	ArgExe
)

// Arg is one argument of an Op.
type Arg struct {
	Kind  ArgKind
	Index uint32
	Imm   uint64
}

// Pseudo calls: not system calls themselves, but calls the child makes
// with a struct it fills in.
const (
	// TrapLandlockRule is landlock_add_rule(Args[0],
	// LANDLOCK_RULE_PATH_BENEATH, {Args[1], Args[2]}, 0): the struct's
	// allowed rights are an immediate and its descriptor a slot.
	TrapLandlockRule = 1<<20 + iota
	// TrapSeccomp is seccomp(SECCOMP_SET_MODE_FILTER, 0, prog), prog
	// being Blobs[Args[0].Index] as seccomp.Encode packs a filter.
	TrapSeccomp
)

// maxSlots bounds a program's slots; maxOps its length.
const (
	maxSlots = 32
	maxOps   = 1024
)

// check rejects a program the child could not run safely: indices out of
// range, slots out of range, unknown kinds.
func (p *Prog) check(hasExe bool) error {
	if len(p.Ops) > maxOps {
		return fmt.Errorf("forkexec: program of %d ops; at most %d", len(p.Ops), maxOps)
	}
	if p.NFiles < 0 || p.NFiles > maxSlots/2 {
		return fmt.Errorf("forkexec: program uses %d files; at most %d", p.NFiles, maxSlots/2)
	}
	for i, op := range p.Ops {
		if op.Save != NoSave && (op.Save < p.FirstSave() || op.Save >= maxSlots) {
			return fmt.Errorf("forkexec: op %d (%s) saves to slot %d", i, op.What, op.Save)
		}
		for _, a := range op.Args {
			switch a.Kind {
			case ArgImm:
			case ArgBlob:
				if int(a.Index) >= len(p.Blobs) {
					return fmt.Errorf("forkexec: op %d (%s) names blob %d of %d", i, op.What, a.Index, len(p.Blobs))
				}
			case ArgSlot:
				if a.Index >= maxSlots {
					return fmt.Errorf("forkexec: op %d (%s) names slot %d", i, op.What, a.Index)
				}
			case ArgExe:
				if !hasExe {
					return fmt.Errorf("forkexec: op %d (%s) names the executable, and none is open (Spec.PathFile)", i, op.What)
				}
			default:
				return fmt.Errorf("forkexec: op %d (%s): unknown argument kind %d", i, op.What, a.Kind)
			}
		}
		if op.Trap == TrapSeccomp && (op.Args[0].Kind != ArgBlob || len(p.Blobs[op.Args[0].Index])%8 != 0 || len(p.Blobs[op.Args[0].Index]) == 0) {
			return fmt.Errorf("forkexec: op %d (%s): a seccomp filter is a blob of whole instructions", i, op.What)
		}
		if op.Trap == TrapLandlockRule && (op.Args[1].Kind != ArgImm || op.Args[2].Kind == ArgBlob) {
			return fmt.Errorf("forkexec: op %d (%s): a Landlock rule is rights and a descriptor", i, op.What)
		}
	}
	return nil
}

// rop is an Op resolved for the child: pointers are addresses, slots are
// marked in slots (bit i: args[i] is a slot index).
type rop struct {
	trap  uintptr
	args  [6]uintptr
	slots uint8
	save  int8
	whole bool
	skip  uint8
	els   [2]rbranch
}

type rbranch struct {
	errno syscall.Errno
	skip  uint8
}

// resolved is a Prog made ready for one child: everything it points to
// stays reachable from here until the child is done with it.
type resolved struct {
	ops   []rop
	blobs [][]byte
	// fprogs are the struct sock_fprog of TrapSeccomp ops, with the
	// filters they point to.
	fprogs []*unix.SockFprog
}

// exeSlot is the slot of the executable's copy: the one after the files.
func (p *Prog) exeSlot() uintptr { return uintptr(p.NFiles) }

// FirstSave is the first slot an op may save its result in: the ones
// before hold the copies of the files and of the executable.
func (p *Prog) FirstSave() int8 { return int8(p.NFiles) + 1 }

// prepare checks p and returns its form for children, made once: children
// only read it.
func (p *Prog) prepare(hasExe bool) (*resolved, error) {
	if err := p.check(hasExe); err != nil {
		return nil, err
	}
	p.once.Do(func() { p.res = p.resolve() })
	return p.res, nil
}

// resolve makes p's form for children. It must be called after check.
func (p *Prog) resolve() *resolved {
	r := &resolved{ops: make([]rop, len(p.Ops)), blobs: p.Blobs}
	for i, op := range p.Ops {
		o := rop{trap: op.Trap, save: op.Save, whole: op.Whole, skip: op.Skip}
		for j, b := range op.Else {
			o.els[j] = rbranch{errno: b.Errno, skip: b.Skip}
		}
		for j, a := range op.Args {
			switch a.Kind {
			case ArgImm:
				o.args[j] = uintptr(a.Imm)
			case ArgBlob:
				if b := p.Blobs[a.Index]; len(b) > 0 {
					o.args[j] = addrOf(&b[0])
				}
			case ArgSlot:
				o.args[j] = uintptr(a.Index)
				o.slots |= 1 << j
			case ArgExe:
				o.args[j] = p.exeSlot()
				o.slots |= 1 << j
			}
		}
		if op.Trap == TrapSeccomp {
			b := p.Blobs[op.Args[0].Index]
			f := make([]unix.SockFilter, len(b)/8)
			for k := range f {
				q := b[k*8:]
				f[k] = unix.SockFilter{Code: uint16(q[0]) | uint16(q[1])<<8, Jt: q[2], Jf: q[3], K: uint32(q[4]) | uint32(q[5])<<8 | uint32(q[6])<<16 | uint32(q[7])<<24}
			}
			fp := &unix.SockFprog{Len: uint16(len(f)), Filter: &f[0]}
			r.fprogs = append(r.fprogs, fp)
			o.trap = unix.SYS_SECCOMP
			o.args = [6]uintptr{unix.SECCOMP_SET_MODE_FILTER, 0, addrOf(fp)}
			o.slots = 0
		}
		r.ops[i] = o
	}
	return r
}

// stepProg is the first step number of a program's ops in a child's
// report: op i fails as step stepProg+i.
const stepProg = 1 << 8
