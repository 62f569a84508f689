//go:build race

package forkexec

// raceBuild: the race detector instruments the wrapper through which a
// child on a stack of its own enters Go code (see cloneOnStack), and its
// runtime would then run in the child on the caller's memory. Race builds
// clone such children as copies.
const raceBuild = true
