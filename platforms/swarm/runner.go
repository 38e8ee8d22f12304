package swarm

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/cloudtransit/transit/districts"
	"github.com/cloudtransit/transit/platforms/ssh"
)

// runner runs a POSIX sh script as root on a node. stdin, when not nil, is
// the script's standard input: the way secrets reach a node, since they
// never belong in a command line. It returns the script's stdout; a
// failing script's error carries its stderr (an *ssh.RunError over SSH).
// Tests put a fake between the driver and SSH here.
type runner interface {
	Run(ctx context.Context, n districts.Node, name, script string, stdin []byte) (string, error)
}

// Waits for dialing a node. A machine launched a moment ago gets the SSH
// config's long wait while it boots; one that answered before, in this run
// or as a member in an earlier one, gets knownWait: a dead master then
// stalls nobody for minutes.
const (
	knownWait = 10 * time.Second
	knownDial = 5 * time.Second
)

// sessionsPerConn bounds the sessions the driver opens at once on one
// connection, below OpenSSH's default MaxSessions (10): the control loop
// labels many nodes at once, all through one manager.
const sessionsPerConn = 8

// session is one SSH connection as sshRunner uses it (*ssh.Client).
type session interface {
	Run(ctx context.Context, name, script string) (string, error)
	Close() error
}

// sshRunner runs scripts over SSH, one connection per node reused for the
// whole run (a drain polls a manager every second), until Close.
type sshRunner struct {
	cfg  ssh.Config
	dial func(ctx context.Context, cfg ssh.Config, t ssh.Target) (session, error)

	mu       sync.Mutex
	conns    map[string]*conn
	answered map[string]bool // targets that answered once
	closed   bool
}

// conn is a node's connection, or the dial that makes it.
type conn struct {
	dialed chan struct{} // closed once the dial ended
	s      session
	err    error
	slots  chan struct{} // sessions in use
}

func newSSHRunner(cfg ssh.Config) *sshRunner {
	return &sshRunner{
		cfg: cfg,
		dial: func(ctx context.Context, cfg ssh.Config, t ssh.Target) (session, error) {
			return ssh.Dial(ctx, cfg, t)
		},
		conns:    map[string]*conn{},
		answered: map[string]bool{},
	}
}

// connKey names a node's connection: a new machine or address is a new
// connection.
func connKey(t ssh.Target) string { return t.HostID + "\x00" + t.Addr }

// fresh says n may still be booting: launched, not yet a member.
func fresh(n districts.Node) bool {
	return n.Phase == "" || n.Phase == districts.PhaseLaunched
}

// Run runs script on n over n's connection, dialing it first if needed.
// A reused connection that turns out broken before the script could start
// is dropped and the script runs once on a new one.
func (r *sshRunner) Run(ctx context.Context, n districts.Node, name, script string, stdin []byte) (string, error) {
	full, err := withStdin(script, stdin)
	if err != nil {
		return "", fmt.Errorf("%s: %s: %w", n.ID, name, err)
	}
	for attempt := 0; ; attempt++ {
		c, reused, err := r.conn(ctx, n)
		if err != nil {
			return "", err
		}
		out, err := r.runOn(ctx, c, name, full)
		if err == nil || !broken(ctx, err) {
			return out, err
		}
		r.drop(target(n), c)
		if !reused || attempt > 0 || !silent(err) {
			return out, err
		}
	}
}

// runOn runs script on c once a session slot is free.
func (r *sshRunner) runOn(ctx context.Context, c *conn, name, script string) (string, error) {
	select {
	case c.slots <- struct{}{}:
	case <-ctx.Done():
		return "", fmt.Errorf("%s: wait for a free ssh session: %w", name, ctx.Err())
	}
	defer func() { <-c.slots }()
	return c.s.Run(ctx, name, script)
}

// conn returns n's connection; reused says it was made before this call.
func (r *sshRunner) conn(ctx context.Context, n districts.Node) (*conn, bool, error) {
	t := target(n)
	key := connKey(t)
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil, false, fmt.Errorf("%s: the swarm driver is closed", n.ID)
	}
	if c, ok := r.conns[key]; ok {
		r.mu.Unlock()
		select {
		case <-c.dialed:
		case <-ctx.Done():
			return nil, false, fmt.Errorf("%s: wait for the ssh connection: %w", n.ID, ctx.Err())
		}
		if c.err == nil {
			return c, true, nil
		}
		if ctx.Err() == nil && (errors.Is(c.err, context.Canceled) || errors.Is(c.err, context.DeadlineExceeded)) {
			return r.conn(ctx, n) // the dial was cut short for its own caller
		}
		return nil, false, c.err
	}
	c := &conn{dialed: make(chan struct{}), slots: make(chan struct{}, sessionsPerConn)}
	r.conns[key] = c
	cfg := r.cfg
	if !fresh(n) || r.answered[key] {
		cfg.WaitTimeout = min(cfg.WaitTimeout, knownWait)
		if cfg.WaitTimeout <= 0 {
			cfg.WaitTimeout = knownWait
		}
		cfg.DialTimeout = min(cfg.DialTimeout, knownDial)
		if cfg.DialTimeout <= 0 {
			cfg.DialTimeout = knownDial
		}
	}
	r.mu.Unlock()

	c.s, c.err = r.dial(ctx, cfg, t)
	r.mu.Lock()
	switch {
	case c.err != nil:
		if r.conns[key] == c {
			delete(r.conns, key)
		}
	case r.closed:
		// Closed while dialing: nobody would close this one.
		_ = c.s.Close()
		c.s, c.err = nil, fmt.Errorf("%s: the swarm driver is closed", n.ID)
	default:
		r.answered[key] = true
	}
	r.mu.Unlock()
	close(c.dialed)
	if c.err != nil {
		return nil, false, c.err
	}
	return c, false, nil
}

// drop forgets and closes t's connection c, unless it was replaced.
func (r *sshRunner) drop(t ssh.Target, c *conn) {
	r.mu.Lock()
	if r.conns[connKey(t)] == c {
		delete(r.conns, connKey(t))
	}
	r.mu.Unlock()
	_ = c.s.Close() // broken already; closing again is harmless
}

// Close closes every connection.
func (r *sshRunner) Close() error {
	r.mu.Lock()
	conns := r.conns
	r.conns = map[string]*conn{}
	r.closed = true
	r.mu.Unlock()
	var errs []error
	for _, c := range conns {
		<-c.dialed
		if c.err == nil {
			if err := c.s.Close(); err != nil && !isClosed(err) {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

func isClosed(err error) bool {
	return strings.Contains(err.Error(), "use of closed network connection")
}

// broken says a failed run lost its session or connection (no exit status)
// while its caller still waits: the connection must not be reused.
func broken(ctx context.Context, err error) bool {
	var re *ssh.RunError
	return ctx.Err() == nil && errors.As(err, &re) && re.ExitStatus == -1
}

// silent says the failed run printed nothing, so the script most likely
// never started and may run again.
func silent(err error) bool {
	var re *ssh.RunError
	return errors.As(err, &re) && re.Stdout == "" && re.Stderr == ""
}

// stdinEnd ends the here-document that carries a script's stdin.
const stdinEnd = "TRANSIT_STDIN_END"

// withStdin returns script with stdin as its standard input: a quoted
// here-document inside the script, which itself travels on the SSH
// session's stdin. The data thus never appears in a command line or the
// node's process list, and the shell expands nothing in it.
func withStdin(script string, stdin []byte) (string, error) {
	if stdin == nil {
		return script, nil
	}
	data := string(stdin)
	if !strings.HasSuffix(data, "\n") {
		data += "\n"
	}
	if strings.HasPrefix(data, stdinEnd+"\n") || strings.Contains(data, "\n"+stdinEnd+"\n") {
		return "", fmt.Errorf("stdin holds the line %s that ends it", stdinEnd)
	}
	return "{\n" + script + "\n} <<'" + stdinEnd + "'\n" + data + stdinEnd + "\n", nil
}

// tokenPattern matches a swarm join token (SWMTKN-1-<ca digest>-<secret>).
var tokenPattern = regexp.MustCompile(`SWMTKN-[0-9]+-[0-9A-Za-z-]+`)

// redactTokens hides every join token in err: the output a failed
// command's *ssh.RunError carries (a token printed before a connection
// dropped would otherwise be its message) and the text of wrapped errors.
func redactTokens(err error) error {
	if err == nil {
		return nil
	}
	var re *ssh.RunError
	//nolint:errorlint // identity on purpose: only the runner's own error may be replaced by a redacted copy; a wrapped one is handled below
	if errors.As(err, &re) && error(re) == err {
		c := *re
		c.Stdout = tokenPattern.ReplaceAllString(c.Stdout, "<redacted>")
		c.Stderr = tokenPattern.ReplaceAllString(c.Stderr, "<redacted>")
		err = &c
	}
	if msg := err.Error(); tokenPattern.MatchString(msg) {
		// Wrapped where the output cannot be reached: keep only the text.
		return errors.New(tokenPattern.ReplaceAllString(msg, "<redacted>"))
	}
	return err
}
