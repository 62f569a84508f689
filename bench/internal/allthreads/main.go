// Command allthreads makes, from its locked main thread as airlock-init
// does when it confines itself, as many all-thread system calls as its
// argument says (harmless ones: getpid), and exits. The benchmark runs it
// with 0 and with 3 (init's setresgid, setresuid and Landlock's
// restrict_self), interleaved, to measure what those calls cost a fresh
// Go process.
package main

import (
	"os"
	"runtime"
	"strconv"
	"syscall"
)

func main() {
	runtime.LockOSThread()
	n := 0
	if len(os.Args) > 1 {
		n, _ = strconv.Atoi(os.Args[1])
	}
	for range n {
		if _, _, errno := syscall.AllThreadsSyscall(syscall.SYS_GETPID, 0, 0, 0); errno != 0 {
			os.Exit(1)
		}
	}
}
