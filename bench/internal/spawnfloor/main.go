// Command spawnfloor times, inside a sandbox, the kernel's own start of a
// program and its end (fork, exec, wait), as a warm run asks of a sandbox
// that init has already started: the floor of a warm run. Each of -n
// starts comes after -idle of doing nothing, so that the floor can be
// taken in a sandbox as idle as a warm pool's was when claimed (an idle
// guest wakes up slower). It prints one duration a line, in nanoseconds.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"time"
)

func main() {
	n := flag.Int("n", 10, "starts to time")
	idle := flag.Duration("idle", 0, "how long to do nothing before each start")
	prog := flag.String("prog", "/bin/true", "the program to start")
	flag.Parse()
	// One start first, untimed: the program's pages and the guest's
	// caches are as warm as after a sandbox's first command.
	if err := exec.Command(*prog).Run(); err != nil {
		fmt.Fprintln(os.Stderr, "spawnfloor:", err)
		os.Exit(1)
	}
	for range *n {
		time.Sleep(*idle)
		start := time.Now()
		if err := exec.Command(*prog).Run(); err != nil {
			fmt.Fprintln(os.Stderr, "spawnfloor:", err)
			os.Exit(1)
		}
		fmt.Println(time.Since(start).Nanoseconds())
	}
}
