//go:build !amd64

package forkexec

// canShareMemory: elsewhere every child is a copy (clone without
// CLONE_VM).
const canShareMemory = false

func vfork(flags, pidfdp uintptr) (pid, errno uintptr) { panic("forkexec: vfork on this architecture") }

func cloneOnStack(trap, a1, a2, a3 uintptr, s *forkSpec) (pid, errno uintptr) {
	panic("forkexec: cloneOnStack on this architecture")
}
