// Command pause is the bundle's pod sandbox image (registry.k8s.io/pause):
// the first process of every pod. It holds the pod's namespaces open,
// reaps the orphans the kernel hands it as PID 1, and exits on SIGINT or
// SIGTERM, as upstream's pause does.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for s := range sigs {
		if s != syscall.SIGCHLD {
			os.Exit(0)
		}
		reap()
	}
}

// reap collects every exited child; one SIGCHLD may stand for several.
func reap() {
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		if pid <= 0 || err != nil {
			return
		}
	}
}
