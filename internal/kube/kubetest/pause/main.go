// Command pause is the sandbox ("pause") container of the pods of the
// cluster test (deploy/kubernetes, TestOnKubelet): the kubelet's runtime
// starts one per pod to hold its namespaces. The registry the runtime
// would pull Kubernetes' own from is out of reach, so the test builds
// this as an image instead. Like Kubernetes' pause, it sleeps until
// SIGINT or SIGTERM, and as PID 1 of a pod sharing its PID namespace it
// reaps the orphans given to it. It is never shipped.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sig := make(chan os.Signal, 8)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for s := range sig {
		if s != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			var ws syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
