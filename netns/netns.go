// Package netns runs code in a Linux network namespace.
package netns

import (
	"fmt"
	"os"
	"runtime"

	"golang.org/x/sys/unix"
)

// Do runs fn on an OS thread moved into the network namespace at path
// (such as /run/netns/NAME): what fn execs inherits the namespace, the
// sockets it opens are made there, and /proc/sys/net is that
// namespace's. The thread is never handed back to the scheduler: it ends
// with its goroutine, so nothing else ever runs in the namespace by
// accident.
func Do(path string, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		f, err := os.Open(path)
		if err != nil {
			errc <- fmt.Errorf("network namespace: %w", err)
			return
		}
		defer f.Close()
		if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("enter network namespace %s: %w", path, err)
			return
		}
		errc <- fn()
	}()
	return <-errc
}
