package forkexec

// SharesMemory reports whether a child cloned with new namespaces (an
// init, held for its id maps) runs on the caller's memory rather than a
// copy of it: on amd64, outside race builds. Where it does not, cloning
// from a process with a large heap costs a copy of its page tables and a
// page fault for every page either writes afterwards.
func SharesMemory() bool { return canShareMemory && !raceBuild }
