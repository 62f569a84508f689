package forkexec

// canShareMemory: a child may run on the caller's memory (see vfork and
// cloneOnStack).
const canShareMemory = true

// vfork is in vfork_amd64.s.
func vfork(flags, pidfdp uintptr) (pid, errno uintptr)

// cloneOnStack is in vfork_amd64.s.
func cloneOnStack(trap, a1, a2, a3 uintptr, s *forkSpec) (pid, errno uintptr)
