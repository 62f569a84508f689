//go:build !amd64

package seccomp

// precompiled is empty where no filter is built in: it is compiled at run
// time (see DefaultFilter).
const precompiled = ""
