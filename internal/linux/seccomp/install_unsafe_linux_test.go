package seccomp

import "unsafe"

// addr is p as a raw system call's argument, for the probes that pass the
// kernel a pointer to a value the caller keeps live until the call returns.
func addr[T any](p *T) uintptr {
	return uintptr(unsafe.Pointer(p))
}
