package forkexec

import "unsafe"

// addrOf is p's address as a raw system call argument. The caller keeps
// *p on the heap and reachable for as long as a child may pass the
// address to the kernel: a resolved program holds its blobs and filters,
// a forkSpec its stack.
func addrOf[T any](p *T) uintptr {
	return uintptr(unsafe.Pointer(p))
}
