package state

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// Flock takes an exclusive flock on path, creating the file (mode 0600) but
// not its directory, and waits for it as long as it takes. Closing releases
// it, so does the holder's death. For short critical sections between
// processes; the state itself uses Acquire.
func Flock(path string) (unlock func(), err error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	for {
		err = unix.Flock(int(f.Fd()), unix.LOCK_EX)
		if !errors.Is(err, unix.EINTR) {
			break
		}
	}
	if err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	return func() { _ = f.Close() }, nil
}
