//go:build linux

package seccomp

import (
	"cmp"
	"errors"
	"fmt"
	"slices"

	"golang.org/x/sys/unix"
)

// Layout of struct seccomp_data (include/uapi/linux/seccomp.h).
const (
	offNr             = 0  // int nr
	offArch           = 4  // __u32 arch
	offArgs           = 16 // __u64 args[6]
	sizeofSeccompData = 64
)

// x32SyscallBit is __X32_SYSCALL_BIT: x32 syscalls are numbered from here.
const x32SyscallBit = 0x40000000

// nrSkip is syscall number -1, which no syscall has. A tracer sets it to skip
// a call (strace's fault injection does), and the kernel answers ENOSYS. It
// has the x32 bit set but is not an x32 call, so it gets the default action
// instead of killing the process, as libseccomp also arranges.
const nrSkip = 0xffffffff

// argLow returns the offset in seccomp_data of the low 32 bits of argument
// i. Both supported architectures are little-endian, so the low word comes
// first; the high word (ignored, see Cond) is at argLow(i)+4.
func argLow(i int) uint32 { return offArgs + 8*uint32(i) }

// Classic BPF opcodes used by the compiler.
const (
	opLdAbsW = unix.BPF_LD | unix.BPF_W | unix.BPF_ABS
	opAndK   = unix.BPF_ALU | unix.BPF_AND | unix.BPF_K
	opJa     = unix.BPF_JMP | unix.BPF_JA
	opJeqK   = unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K
	opJgeK   = unix.BPF_JMP | unix.BPF_JGE | unix.BPF_K
	opJsetK  = unix.BPF_JMP | unix.BPF_JSET | unix.BPF_K
	opRetK   = unix.BPF_RET | unix.BPF_K
)

// maxCondJump is the longest forward distance a conditional jump can
// encode: its jt and jf fields are 8 bits wide.
const maxCondJump = 255

// Compile validates p and translates it into a classic BPF program for
// [Install].
//
// The program checks seccomp_data.arch, then (when KillX32 is set) the x32
// bit, then finds the syscall number with a binary search over the sorted
// rule numbers and finally tests arguments for the rules that have Cases.
// Runs of consecutive numbers with the same unconditional outcome, and the
// gaps between rules, are merged into ranges first, so the search tree has
// one leaf per range rather than one per syscall.
func (p *Profile) Compile() ([]unix.SockFilter, error) {
	if err := p.validate(); err != nil {
		return nil, err
	}
	a := &assembler{}

	// Architecture. A syscall number means nothing without it: the i386
	// entry point (int 0x80) uses different numbers for the same calls.
	archOK, killArch := a.newLabel(), a.newLabel()
	a.stmt(opLdAbsW, offArch)
	a.jump(opJeqK, p.AuditArch, archOK, killArch)
	a.bind(killArch)
	a.ret(ActKillProcess)
	a.bind(archOK)

	a.stmt(opLdAbsW, offNr)
	tree := a.newLabel()
	if p.KillX32 {
		// x32 calls arrive with AUDIT_ARCH_X86_64 and nr|0x40000000; a
		// filter that only compared numbers would let them reach
		// syscalls it meant to refuse.
		x32, killX32 := a.newLabel(), a.newLabel()
		a.jump(opJsetK, x32SyscallBit, x32, tree)
		a.bind(x32)
		a.jump(opJeqK, nrSkip, tree, killX32)
		a.bind(killX32)
		a.ret(ActKillProcess)
	}
	a.bind(tree)

	c := compiler{a: a, segs: p.segments()}
	c.search(0, len(c.segs))

	prog, err := a.assemble()
	if err != nil {
		return nil, err
	}
	if len(prog) > unix.BPF_MAXINSNS {
		return nil, fmt.Errorf("seccomp: program has %d instructions, more than the kernel's limit of %d", len(prog), unix.BPF_MAXINSNS)
	}
	if err := verify(prog); err != nil {
		return nil, fmt.Errorf("seccomp: compiler produced an invalid program: %w", err)
	}
	return prog, nil
}

// validate rejects profiles the compiler cannot translate faithfully.
func (p *Profile) validate() error {
	if p.AuditArch == 0 {
		return fmt.Errorf("seccomp: no profile for architecture %q", p.Arch)
	}
	if !p.DefaultAction.valid() {
		return fmt.Errorf("seccomp: invalid default action %v", p.DefaultAction)
	}
	refused := make(map[uint32]string, len(p.Refused))
	for _, s := range p.Refused {
		refused[s.Nr] = s.Name
	}
	seen := make(map[uint32]string, len(p.Rules))
	for _, r := range p.Rules {
		if r.Name == "" {
			return fmt.Errorf("seccomp: rule for syscall %d has no name", r.Nr)
		}
		if prev, ok := seen[r.Nr]; ok {
			return fmt.Errorf("seccomp: rules %s and %s both have number %d", prev, r.Name, r.Nr)
		}
		seen[r.Nr] = r.Name
		if name, ok := refused[r.Nr]; ok {
			return fmt.Errorf("seccomp: rule %s names syscall %d, which the profile refuses as %s", r.Name, r.Nr, name)
		}
		if p.KillX32 && r.Nr&x32SyscallBit != 0 {
			return fmt.Errorf("seccomp: rule %s has number %#x, which the x32 check kills before lookup", r.Name, r.Nr)
		}
		if !r.Action.valid() {
			return fmt.Errorf("seccomp: rule %s: invalid action %v", r.Name, r.Action)
		}
		for i, cs := range r.Cases {
			if len(cs.When) == 0 {
				return fmt.Errorf("seccomp: rule %s: case %d has no conditions", r.Name, i)
			}
			if !cs.Action.valid() {
				return fmt.Errorf("seccomp: rule %s: case %d: invalid action %v", r.Name, i, cs.Action)
			}
			for _, c := range cs.When {
				if err := c.validate(); err != nil {
					return fmt.Errorf("seccomp: rule %s: case %d: %w", r.Name, i, err)
				}
			}
		}
	}
	return nil
}

func (c Cond) validate() error {
	if c.Arg < 0 || c.Arg > 5 {
		return fmt.Errorf("argument index %d out of range 0-5", c.Arg)
	}
	if c.Op != OpIn && c.Op != OpNotIn {
		return fmt.Errorf("argument %d: invalid operator %v", c.Arg, c.Op)
	}
	if len(c.Values) == 0 {
		return fmt.Errorf("argument %d: no values", c.Arg)
	}
	for _, v := range c.Values {
		if v&^c.mask() != 0 {
			return fmt.Errorf("argument %d: value %#x has bits outside mask %#x and can never match", c.Arg, v, c.mask())
		}
	}
	return nil
}

// segment is a range of syscall numbers, from start up to the next
// segment's start, that all get the same outcome: rule (which may have
// Cases) or, if rule is nil, action.
type segment struct {
	start  uint32
	rule   *Rule
	action Action
}

// segments partitions all 2^32 syscall numbers into ranges by outcome,
// merging neighbours whose outcome is the same unconditional action.
func (p *Profile) segments() []segment {
	rules := slices.Clone(p.Rules)
	slices.SortFunc(rules, func(a, b Rule) int { return cmp.Compare(a.Nr, b.Nr) })

	var segs []segment
	add := func(s segment) {
		if n := len(segs); n > 0 {
			last := segs[n-1]
			if last.rule == nil && s.rule == nil && last.action == s.action {
				return // extends the previous range
			}
		}
		segs = append(segs, s)
	}
	uncovered := uint64(0) // first number not in a segment yet
	for i := range rules {
		r := &rules[i]
		if uint64(r.Nr) > uncovered {
			add(segment{start: uint32(uncovered), action: p.DefaultAction})
		}
		if len(r.Cases) == 0 {
			add(segment{start: r.Nr, action: r.Action})
		} else {
			add(segment{start: r.Nr, rule: r})
		}
		uncovered = uint64(r.Nr) + 1
	}
	if uncovered <= 0xffffffff {
		switch {
		case p.FutureFrom == 0:
			add(segment{start: uint32(uncovered), action: p.DefaultAction})
		case uint64(p.FutureFrom) > uncovered:
			add(segment{start: uint32(uncovered), action: p.DefaultAction})
			add(segment{start: p.FutureFrom, action: p.FutureAction})
		default:
			add(segment{start: uint32(uncovered), action: p.FutureAction})
		}
	}
	return segs
}

type compiler struct {
	a    *assembler
	segs []segment
}

// search emits a binary search over segs[lo:hi] for the syscall number in
// the accumulator. Every path through the emitted code ends in a return,
// so the right half can follow the left without a jump over it.
func (c *compiler) search(lo, hi int) {
	if hi-lo == 1 {
		c.leaf(c.segs[lo])
		return
	}
	mid := lo + (hi-lo)/2
	right := c.a.newLabel()
	c.a.jump(opJgeK, c.segs[mid].start, right, next)
	c.search(lo, mid)
	c.a.bind(right)
	c.search(mid, hi)
}

// leaf emits the outcome of one segment: a return, or the argument checks
// of a conditional rule.
func (c *compiler) leaf(s segment) {
	a := c.a
	if s.rule == nil {
		a.ret(s.action)
		return
	}
	for _, cs := range s.rule.Cases {
		nextCase := a.newLabel()
		// The accumulator keeps the last loaded (and masked) argument,
		// so consecutive conditions on the same argument and mask share
		// one load. This only holds within a case: nextCase is reached
		// from several places with different contents.
		loaded, loadedArg, loadedMask := false, 0, uint32(0)
		for _, cond := range cs.When {
			mask := cond.mask()
			if !loaded || loadedArg != cond.Arg || loadedMask != mask {
				a.stmt(opLdAbsW, argLow(cond.Arg))
				if mask != ^uint32(0) {
					a.stmt(opAndK, mask)
				}
				loaded, loadedArg, loadedMask = true, cond.Arg, mask
			}
			holds := a.newLabel()
			for i, v := range cond.Values {
				last := i == len(cond.Values)-1
				switch cond.Op {
				case OpIn:
					// Equal to any value: the condition holds.
					miss := next
					if last {
						miss = nextCase
					}
					a.jump(opJeqK, v, holds, miss)
				case OpNotIn:
					// Equal to any value: the condition fails.
					miss := next
					if last {
						miss = holds
					}
					a.jump(opJeqK, v, nextCase, miss)
				}
			}
			a.bind(holds)
		}
		a.ret(cs.Action)
		a.bind(nextCase)
	}
	a.ret(s.rule.Action)
}

// label names a position in the program being assembled.
type label int

// next, as a jump target, is the instruction after the jump.
const next label = -1

type itemKind uint8

const (
	kindStmt  itemKind = iota // a non-jump instruction
	kindJump                  // a conditional jump
	kindLabel                 // binds a label; emits nothing
)

type item struct {
	kind itemKind
	code uint16
	k    uint32
	// jt and jf are a conditional jump's targets; jt is also the label
	// bound by kindLabel.
	jt, jf label
	// farT and farF record that jt or jf is too far for an 8-bit offset,
	// so the jump goes through a JA trampoline placed right after it.
	farT, farF bool
}

// size is the number of instructions the item emits.
func (it *item) size() int {
	switch it.kind {
	case kindLabel:
		return 0
	case kindJump:
		n := 1
		if it.farT {
			n++
		}
		if it.farF {
			n++
		}
		return n
	}
	return 1
}

// assembler collects instructions with symbolic jump targets and resolves
// them. Classic BPF only jumps forward; conditional jumps reach at most 255
// instructions ahead, so a longer one is rewritten as a short conditional
// jump to an unconditional JA (32-bit offset) that follows it:
//
//	jeq k, far, near   =>   jeq k, +0, near'
//	                        ja  far
//
// The layout is repeated until no jump needs rewriting; each pass only adds
// trampolines, so distances only grow and the loop ends.
type assembler struct {
	items   []item
	nlabels int
}

func (a *assembler) newLabel() label {
	a.nlabels++
	return label(a.nlabels - 1)
}

func (a *assembler) bind(l label) { a.items = append(a.items, item{kind: kindLabel, jt: l}) }

func (a *assembler) stmt(code uint16, k uint32) {
	a.items = append(a.items, item{kind: kindStmt, code: code, k: k})
}

func (a *assembler) ret(act Action) { a.stmt(opRetK, uint32(act)) }

func (a *assembler) jump(code uint16, k uint32, jt, jf label) {
	a.items = append(a.items, item{kind: kindJump, code: code, k: k, jt: jt, jf: jf})
}

// layout returns the position of every item and every label.
func (a *assembler) layout() (pos []int, labels []int, err error) {
	pos = make([]int, len(a.items))
	labels = make([]int, a.nlabels)
	for i := range labels {
		labels[i] = -1
	}
	pc := 0
	for i := range a.items {
		it := &a.items[i]
		pos[i] = pc
		if it.kind == kindLabel {
			if labels[it.jt] >= 0 {
				return nil, nil, fmt.Errorf("seccomp: label %d bound twice", it.jt)
			}
			labels[it.jt] = pc
		}
		pc += it.size()
	}
	return pos, labels, nil
}

// distance returns how far the instruction after position from must jump to
// reach l.
func distance(l label, from, size int, labels []int) (int, error) {
	if l == next {
		return size - 1, nil
	}
	at := labels[l]
	if at < 0 {
		return 0, fmt.Errorf("seccomp: jump to unbound label %d", l)
	}
	d := at - (from + 1)
	if d < 0 {
		return 0, fmt.Errorf("seccomp: backward jump to label %d", l)
	}
	return d, nil
}

func (a *assembler) assemble() ([]unix.SockFilter, error) {
	var pos, labels []int
	for {
		var err error
		pos, labels, err = a.layout()
		if err != nil {
			return nil, err
		}
		changed := false
		for i := range a.items {
			it := &a.items[i]
			if it.kind != kindJump {
				continue
			}
			dt, err := distance(it.jt, pos[i], it.size(), labels)
			if err != nil {
				return nil, err
			}
			df, err := distance(it.jf, pos[i], it.size(), labels)
			if err != nil {
				return nil, err
			}
			if !it.farT && dt > maxCondJump {
				it.farT, changed = true, true
			}
			if !it.farF && df > maxCondJump {
				it.farF, changed = true, true
			}
		}
		if !changed {
			break
		}
	}

	var prog []unix.SockFilter
	emitJa := func(l label) error {
		d, err := distance(l, len(prog), 1, labels)
		if err != nil {
			return err
		}
		prog = append(prog, unix.SockFilter{Code: opJa, K: uint32(d)})
		return nil
	}
	for i := range a.items {
		it := &a.items[i]
		if len(prog) != pos[i] {
			return nil, errors.New("seccomp: assembler layout out of step")
		}
		switch it.kind {
		case kindLabel:
		case kindStmt:
			prog = append(prog, unix.SockFilter{Code: it.code, K: it.k})
		case kindJump:
			// Offsets of near targets are measured from the
			// conditional jump; trampolines sit between it and
			// everything else, so those offsets already skip them.
			var jt, jf int
			if !it.farT {
				jt, _ = distance(it.jt, pos[i], it.size(), labels)
			}
			switch {
			case !it.farF:
				jf, _ = distance(it.jf, pos[i], it.size(), labels)
			case it.farT:
				jf = 1 // skip the jt trampoline
			}
			prog = append(prog, unix.SockFilter{Code: it.code, Jt: uint8(jt), Jf: uint8(jf), K: it.k})
			if it.farT {
				if err := emitJa(it.jt); err != nil {
					return nil, err
				}
			}
			if it.farF {
				if err := emitJa(it.jf); err != nil {
					return nil, err
				}
			}
		}
	}
	return prog, nil
}

// verify checks prog the way the kernel's seccomp verifier would accept it,
// restricted to the instructions this package emits: every load is an
// aligned 32-bit word inside seccomp_data, every jump lands inside the
// program, and the last instruction returns. Since classic BPF jumps only
// forward, that means every run ends in a return.
func verify(prog []unix.SockFilter) error {
	n := len(prog)
	if n == 0 || n > unix.BPF_MAXINSNS {
		return fmt.Errorf("program length %d outside 1-%d", n, unix.BPF_MAXINSNS)
	}
	inside := func(pc int, off uint32) bool { return uint64(pc)+1+uint64(off) < uint64(n) }
	for pc, ins := range prog {
		switch ins.Code {
		case opLdAbsW:
			if ins.K%4 != 0 || ins.K >= sizeofSeccompData {
				return fmt.Errorf("instruction %d: load from offset %d", pc, ins.K)
			}
		case opAndK, opRetK:
		case opJa:
			if !inside(pc, ins.K) {
				return fmt.Errorf("instruction %d: ja +%d leaves the program", pc, ins.K)
			}
		case opJeqK, opJgeK, opJsetK:
			if !inside(pc, uint32(ins.Jt)) || !inside(pc, uint32(ins.Jf)) {
				return fmt.Errorf("instruction %d: jump +%d/+%d leaves the program", pc, ins.Jt, ins.Jf)
			}
		default:
			return fmt.Errorf("instruction %d: unexpected opcode %#x", pc, ins.Code)
		}
	}
	if prog[n-1].Code != opRetK {
		return fmt.Errorf("last instruction %d is not a return", n-1)
	}
	return nil
}
