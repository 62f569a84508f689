//go:build linux

package seccomp

import (
	"encoding/binary"
	"fmt"
	"slices"
	"sync"
	"testing"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// seccompData is struct seccomp_data as the filter sees it.
type seccompData struct {
	nr   uint32
	arch uint32
	ip   uint64
	args [6]uint64
}

// words returns seccomp_data as the sixteen 32-bit words the filter can
// load, in the order they lie in memory on a little-endian machine: the low
// word of each 64-bit field comes first.
func (d seccompData) words() [sizeofSeccompData / 4]uint32 {
	var w [sizeofSeccompData / 4]uint32
	w[offNr/4] = d.nr
	w[offArch/4] = d.arch
	w[2], w[3] = uint32(d.ip), uint32(d.ip>>32)
	for i, a := range d.args {
		w[argLow(i)/4] = uint32(a)
		w[argLow(i)/4+1] = uint32(a >> 32)
	}
	return w
}

// emulate runs prog over d the way the kernel does and returns the value of
// the RET that ends it. It fails if the program loads outside seccomp_data,
// uses an opcode the compiler never emits, or runs off its end.
func emulate(prog []unix.SockFilter, d seccompData) (uint32, error) {
	mem := d.words()
	var acc uint32
	pc := 0
	for steps := 0; ; steps++ {
		if pc < 0 || pc >= len(prog) {
			return 0, fmt.Errorf("ran off the program at pc %d", pc)
		}
		if steps > len(prog) {
			return 0, fmt.Errorf("more steps than instructions: a backward jump")
		}
		ins := prog[pc]
		pc++
		cond := false
		switch ins.Code {
		case opLdAbsW:
			if ins.K%4 != 0 || ins.K >= sizeofSeccompData {
				return 0, fmt.Errorf("pc %d: load from offset %d", pc-1, ins.K)
			}
			acc = mem[ins.K/4]
			continue
		case opAndK:
			acc &= ins.K
			continue
		case opRetK:
			return ins.K, nil
		case opJa:
			pc += int(ins.K)
			continue
		case opJeqK:
			cond = acc == ins.K
		case opJgeK:
			cond = acc >= ins.K
		case opJsetK:
			cond = acc&ins.K != 0
		default:
			return 0, fmt.Errorf("pc %d: unknown opcode %#x", pc-1, ins.Code)
		}
		if cond {
			pc += int(ins.Jt)
		} else {
			pc += int(ins.Jf)
		}
	}
}

// vmRun runs prog in golang.org/x/net/bpf's VM, an independent classic BPF
// implementation. That VM loads words big-endian (network order), so the
// words of seccomp_data are laid out big-endian for it; since the program
// only makes aligned 32-bit loads, each load then sees exactly the value the
// kernel would.
func vmRun(prog []unix.SockFilter, d seccompData) (uint32, error) {
	vm, err := vmFor(prog)
	if err != nil {
		return 0, err
	}
	w := d.words()
	buf := make([]byte, 0, sizeofSeccompData)
	for _, x := range w {
		buf = binary.BigEndian.AppendUint32(buf, x)
	}
	out, err := vm.Run(buf)
	return uint32(out), err
}

// vms caches one VM per program, keyed by the program's first instruction.
var vms sync.Map

func vmFor(prog []unix.SockFilter) (*bpf.VM, error) {
	if vm, ok := vms.Load(&prog[0]); ok {
		return vm.(*bpf.VM), nil
	}
	raw := make([]bpf.RawInstruction, len(prog))
	for i, ins := range prog {
		raw[i] = bpf.RawInstruction{Op: ins.Code, Jt: ins.Jt, Jf: ins.Jf, K: ins.K}
	}
	insns, ok := bpf.Disassemble(raw)
	if !ok {
		return nil, fmt.Errorf("x/net/bpf cannot decode every instruction")
	}
	vm, err := bpf.NewVM(insns)
	if err != nil {
		return nil, err
	}
	vms.Store(&prog[0], vm)
	return vm, nil
}

// reference decides d straight from the profile data, without BPF: the
// specification the compiled program must match.
func reference(p *Profile, d seccompData) Action {
	if d.arch != p.AuditArch {
		return ActKillProcess
	}
	if p.KillX32 && d.nr&x32SyscallBit != 0 && d.nr != nrSkip {
		return ActKillProcess
	}
	for _, r := range p.Rules {
		if r.Nr != d.nr {
			continue
		}
	cases:
		for _, cs := range r.Cases {
			for _, c := range cs.When {
				v := uint32(d.args[c.Arg]) & c.mask()
				if slices.Contains(c.Values, v) != (c.Op == OpIn) {
					continue cases
				}
			}
			return cs.Action
		}
		return r.Action
	}
	if p.FutureFrom != 0 && d.nr >= p.FutureFrom {
		return p.FutureAction
	}
	return p.DefaultAction
}

// check runs d through the emulator and the x/net/bpf VM and compares both
// with the reference; it returns the agreed action.
func check(t testing.TB, p *Profile, prog []unix.SockFilter, d seccompData) Action {
	t.Helper()
	got, err := emulate(prog, d)
	if err != nil {
		t.Fatalf("emulate(%+v): %v", d, err)
	}
	vm, err := vmRun(prog, d)
	if err != nil {
		t.Fatalf("x/net/bpf VM(%+v): %v", d, err)
	}
	if vm != got {
		t.Fatalf("%+v: emulator returned %v, x/net/bpf VM %v", d, Action(got), Action(vm))
	}
	if want := reference(p, d); Action(got) != want {
		t.Fatalf("%+v: program returned %v, profile says %v", d, Action(got), want)
	}
	return Action(got)
}
