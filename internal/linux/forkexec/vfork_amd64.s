#include "textflag.h"

// func vfork(flags, pidfdp uintptr) (pid, errno uintptr)
//
// clone(flags, 0, pidfdp, 0, 0) for a child that shares the caller's memory
// and stack (CLONE_VM|CLONE_VFORK in flags). The child runs first, on this
// very stack, while the calling thread sleeps in the kernel until the
// child execs or exits. The child returns from here, and the calls it then
// makes overwrite the stack slot that held this function's return address;
// so the address is taken off the stack into R12, which the kernel keeps
// for each of the two, before the call, and put back after it.
TEXT ·vfork(SB),NOSPLIT|NOFRAME,$0-32
	MOVQ	flags+0(FP), DI
	MOVQ	$0, SI
	MOVQ	pidfdp+8(FP), DX
	MOVQ	$0, R10
	MOVQ	$0, R8
	MOVQ	$56, AX // SYS_clone
	POPQ	R12
	SYSCALL
	PUSHQ	R12
	CMPQ	AX, $0xfffffffffffff001
	JLS	vok
	MOVQ	$-1, pid+16(FP)
	NEGQ	AX
	MOVQ	AX, errno+24(FP)
	RET
vok:
	MOVQ	AX, pid+16(FP)
	MOVQ	$0, errno+24(FP)
	RET

// func cloneOnStack(trap, a1, a2, a3 uintptr, s *forkSpec) (pid, errno uintptr)
//
// clone or clone3 (trap) for a child that shares the caller's memory
// (CLONE_VM) but runs on a stack of its own, given in the arguments: the
// caller goes on at once. The child starts on that empty stack with s in
// R12, which the kernel copies from the caller, and calls forkChild, which
// execs or exits.
TEXT ·cloneOnStack(SB),NOSPLIT|NOFRAME,$0-56
	MOVQ	trap+0(FP), AX
	MOVQ	a1+8(FP), DI
	MOVQ	a2+16(FP), SI
	MOVQ	a3+24(FP), DX
	MOVQ	$0, R10
	MOVQ	$0, R8
	MOVQ	s+32(FP), R12
	SYSCALL
	CMPQ	AX, $0
	JEQ	child
	CMPQ	AX, $0xfffffffffffff001
	JLS	cok
	MOVQ	$-1, pid+40(FP)
	NEGQ	AX
	MOVQ	AX, errno+48(FP)
	RET
cok:
	MOVQ	AX, pid+40(FP)
	MOVQ	$0, errno+48(FP)
	RET
child:
	SUBQ	$16, SP
	MOVQ	R12, 0(SP)
	CALL	·forkChild(SB)
die:
	MOVL	$127, DI
	MOVL	$231, AX // SYS_exit_group, should forkChild ever return
	SYSCALL
	JMP	die
