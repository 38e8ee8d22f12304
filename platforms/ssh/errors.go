package ssh

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// ErrUnreachable is matched (errors.Is) by Dial's error when it gave up
// waiting for a machine to answer over SSH.
var ErrUnreachable = errors.New("not reachable over SSH")

// ErrAuth is matched (errors.Is) by every *AuthError: sshd refused the
// cluster key.
var ErrAuth = errors.New("sshd refused transit's key")

// AuthError is sshd refusing the cluster key. Dial retries it only within
// Config.AuthWindow of the machine's launch.
type AuthError struct {
	Target Target
	Addr   string // host:port dialed
	User   string
	// Key is the SHA256 fingerprint of the key offered; KeyFile, when
	// known, is the public key file holding it.
	Key     string
	KeyFile string
	// SinceLaunch is how long after the machine's launch the key was last
	// refused; 0 when the launch time is unknown.
	SinceLaunch time.Duration
	Err         error // from the SSH handshake
}

// Error says which machine refused which key, and what to do.
func (e *AuthError) Error() string {
	key := e.Key
	if e.KeyFile != "" {
		key += " (" + e.KeyFile + ")"
	}
	still := ""
	if e.SinceLaunch > 0 {
		still = fmt.Sprintf(", still %s after launch", e.SinceLaunch.Round(time.Second))
	}
	return fmt.Sprintf("%s (%s): %s for user %s%s: %v; the machine does not have the cluster key %s in %s's authorized_keys: "+
		"check that its image installs the launch key for %s (cloud-init's log on the machine says why not), "+
		"or terminate the machine so that transit launches another",
		e.Target.label(), e.Addr, ErrAuth, e.User, still, e.Err, key, e.User, e.User)
}

// Is makes errors.Is(err, ErrAuth) true.
func (e *AuthError) Is(target error) bool { return target == ErrAuth }

// Unwrap returns the handshake error.
func (e *AuthError) Unwrap() error { return e.Err }

// RunError is a remote command that failed: it exited non-zero, died from
// a signal, lost its connection or was cancelled. It keeps the command's
// output.
type RunError struct {
	Target Target
	Name   string // what the command does, e.g. "install docker"
	// ExitStatus is the command's exit status, or -1 when it died from a
	// signal, the connection dropped or ctx ended.
	ExitStatus int
	Stdout     string
	Stderr     string
	// Err is why there is no exit status (ctx.Err(), the signal, the
	// connection error); nil when the command exited non-zero.
	Err error
}

// tailLines is how many lines of output a RunError message shows.
const tailLines = 20

// maxLineLen is where a RunError message cuts long output lines.
const maxLineLen = 300

// Error is "<node>: <name> failed (exit N): <output>", the output being
// the last lines of stderr, or of stdout when stderr is empty.
func (e *RunError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %s failed", e.Target.label(), e.Name)
	if e.Err != nil {
		fmt.Fprintf(&b, ": %v", e.Err)
	} else {
		fmt.Fprintf(&b, " (exit %d)", e.ExitStatus)
	}
	out := e.Stderr
	if strings.TrimSpace(out) == "" {
		out = e.Stdout
	}
	lines, total := tail(out, tailLines)
	switch {
	case len(lines) == 0:
	case len(lines) == 1:
		b.WriteString(": " + lines[0])
	default:
		if total > len(lines) {
			fmt.Fprintf(&b, " (last %d of %d lines)", len(lines), total)
		}
		b.WriteString(":")
		for _, l := range lines {
			b.WriteString("\n    " + l)
		}
	}
	return b.String()
}

// Unwrap returns Err.
func (e *RunError) Unwrap() error { return e.Err }

// tail returns the last n non-blank-trailing lines of s, each cut to
// maxLineLen, and how many lines s has.
func tail(s string, n int) (lines []string, total int) {
	s = strings.TrimRight(strings.ReplaceAll(s, "\r\n", "\n"), " \t\r\n")
	if s == "" {
		return nil, 0
	}
	all := strings.Split(s, "\n")
	total = len(all)
	if len(all) > n {
		all = all[len(all)-n:]
	}
	for i, l := range all {
		l = strings.TrimRight(l, " \t\r")
		if r := []rune(l); len(r) > maxLineLen {
			l = string(r[:maxLineLen]) + "…"
		}
		all[i] = l
	}
	return all, total
}
