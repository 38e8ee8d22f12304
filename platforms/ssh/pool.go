package ssh

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"strings"
	"sync"
	"time"

	gossh "golang.org/x/crypto/ssh"

	"github.com/cloudtransit/transit/districts"
)

// Waits for dialing a node. A machine launched a moment ago gets the SSH
// config's long wait while it boots; one that answered before, in this run
// or as a member in an earlier one, gets knownWait: a dead master then
// stalls nobody for minutes.
const (
	knownWait = 10 * time.Second
	knownDial = 5 * time.Second
)

// sessionsPerConn bounds the sessions a Pool opens at once on one
// connection, below OpenSSH's default MaxSessions (10): a platform driver
// labels many nodes at once, all through one manager. Forwarded
// connections are not sessions and take no slot.
const sessionsPerConn = 8

// NodeTarget is how a Pool dials n: its public address, else its private
// one, with its provider id as the host key's name and its creation time
// as its launch (a refused key is retried while cloud-init may still be
// writing authorized_keys).
func NodeTarget(n districts.Node) Target {
	addr := n.PublicIP
	if addr == "" {
		addr = n.PrivateIP
	}
	return Target{HostID: n.ProviderID, Name: n.ID, Addr: addr, LaunchedAt: n.CreatedAt}
}

// Pool runs scripts on cluster nodes, uploads files to them and forwards
// connections through them over SSH, keeping one connection per node (see
// NodeTarget) for the whole run (a drain polls a manager every second),
// until Close. It is safe for concurrent use; concurrent callers for one
// node share its dial, and at most 8 sessions (scripts, uploads) run at
// once on a connection, the others waiting for a free one.
//
// A node that answered before, in this run or as a member in an earlier
// one (its Phase is past districts.PhaseLaunched), is dialed with short
// waits (10s, 5s per attempt) instead of Config's boot-time ones, so that
// a dead node stalls nobody for minutes. A reused connection found broken
// is dropped; the call runs once more on a new connection when nothing of
// it reached the node (see Run, Upload, DialContext).
type Pool struct {
	cfg   Config
	owner string
	dial  func(ctx context.Context, cfg Config, t Target) (nodeConn, error)

	mu       sync.Mutex
	conns    map[string]*poolConn
	answered map[string]bool // connection keys of targets that answered once
	closed   bool
}

// nodeConn is one SSH connection as a Pool uses it: a *Client; tests put
// fakes here.
type nodeConn interface {
	Run(ctx context.Context, name, script string) (string, error)
	UploadFrom(ctx context.Context, path string, mode fs.FileMode, content io.Reader, size int64) error
	DialContext(ctx context.Context, network, addr string) (net.Conn, error)
	Close() error
}

// poolConn is a node's connection, or the dial that makes it.
type poolConn struct {
	key    string
	dialed chan struct{} // closed once the dial ended
	c      nodeConn
	err    error
	slots  chan struct{} // sessions in use
}

// NewPool returns a Pool dialing nodes with cfg. owner names its user in
// errors: "<owner> is closed".
func NewPool(cfg Config, owner string) *Pool {
	return &Pool{
		cfg:   cfg,
		owner: owner,
		dial: func(ctx context.Context, cfg Config, t Target) (nodeConn, error) {
			return Dial(ctx, cfg, t)
		},
		conns:    map[string]*poolConn{},
		answered: map[string]bool{},
	}
}

// Run runs the POSIX sh script as Client.Run does on n, and returns its
// stdout; name says what it does, for messages. stdin, when not nil, is
// the script's standard input: the way secrets reach a node, since they
// never belong in a command line. It travels inside the script (see
// withStdin), so it must not hold the line TRANSIT_STDIN_END. A failing
// script's error is a *RunError carrying its output.
//
// A reused connection that turns out broken before the script printed
// anything (most likely before it started) is dropped and the script runs
// once more on a new one.
func (p *Pool) Run(ctx context.Context, n districts.Node, name, script string, stdin []byte) (string, error) {
	full, err := withStdin(script, stdin)
	if err != nil {
		return "", fmt.Errorf("%s: %s: %w", n.ID, name, err)
	}
	return retry(ctx, p, n, func(c *poolConn) (string, error) {
		if err := c.acquire(ctx, n, name); err != nil {
			return "", err
		}
		defer c.release()
		return c.c.Run(ctx, name, full)
	}, func(err error) bool { return sessionLost(ctx, err) }, silent)
}

// Upload writes size bytes of content to path on n with mode, atomically,
// as Client.UploadFrom does, streaming content through one of the
// connection's sessions. A reused connection found broken is dropped; the
// upload runs once more on a new one only if content was not read from
// yet, since a reader cannot be rewound.
func (p *Pool) Upload(ctx context.Context, n districts.Node, path string, mode fs.FileMode, content io.Reader, size int64) error {
	read := false // content was read from
	_, err := retry(ctx, p, n, func(c *poolConn) (struct{}, error) {
		name := "upload " + path
		if err := c.acquire(ctx, n, name); err != nil {
			return struct{}{}, err
		}
		defer c.release()
		g := &gatedReader{r: content}
		err := c.c.UploadFrom(ctx, path, mode, g, size)
		read = g.stop()
		return struct{}{}, err
	}, func(err error) bool { return sessionLost(ctx, err) }, func(error) bool { return !read })
	return err
}

// DialContext opens a connection from n to addr (host:port as n sees it,
// such as a master's API server on 127.0.0.1:6443 or etcd) through n's
// SSH connection, as Client.DialContext does: ctx bounds the dial only,
// and closing the connection closes only its channel. The connection ends
// when the Pool closes. Forwarded connections take no session slot. A
// reused connection on which the channel could not be opened is dropped
// and the dial runs once more on a new one.
func (p *Pool) DialContext(ctx context.Context, n districts.Node, network, addr string) (net.Conn, error) {
	if err := checkForward(network, addr); err != nil {
		return nil, fmt.Errorf("%s: forward to %s: %w", n.ID, addr, err)
	}
	return retry(ctx, p, n, func(c *poolConn) (net.Conn, error) {
		return c.c.DialContext(ctx, network, addr)
	}, func(err error) bool { return forwardLost(ctx, err) }, func(error) bool { return true })
}

// retry runs op on n's connection, dialing it first if needed. When op
// fails because the connection is gone (lost), the connection is dropped;
// when it was reused and op may run again (again: nothing of it reached
// the node), op runs once more on a new connection.
func retry[T any](ctx context.Context, p *Pool, n districts.Node, op func(*poolConn) (T, error), lost, again func(error) bool) (T, error) {
	for attempt := 0; ; attempt++ {
		c, reused, err := p.conn(ctx, n)
		if err != nil {
			var zero T
			return zero, err
		}
		v, err := op(c)
		if err == nil || !lost(err) {
			return v, err
		}
		p.drop(c)
		if !reused || attempt > 0 || !again(err) {
			return v, err
		}
	}
}

// acquire waits for a free session slot on c.
func (c *poolConn) acquire(ctx context.Context, n districts.Node, name string) error {
	select {
	case c.slots <- struct{}{}:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("%s: %s: wait for a free ssh session: %w", n.ID, name, ctx.Err())
	}
}

// release frees a slot acquire took.
func (c *poolConn) release() { <-c.slots }

// connKey names a node's connection: a new machine or address is a new
// connection.
func connKey(t Target) string { return t.HostID + "\x00" + t.Addr }

// fresh says n may still be booting: launched, not yet a member.
func fresh(n districts.Node) bool {
	return n.Phase == "" || n.Phase == districts.PhaseLaunched
}

// conn returns n's connection; reused says it was made before this call.
func (p *Pool) conn(ctx context.Context, n districts.Node) (*poolConn, bool, error) {
	t := NodeTarget(n)
	key := connKey(t)
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil, false, fmt.Errorf("%s: %s is closed", n.ID, p.owner)
	}
	if c, ok := p.conns[key]; ok {
		p.mu.Unlock()
		select {
		case <-c.dialed:
		case <-ctx.Done():
			return nil, false, fmt.Errorf("%s: wait for the ssh connection: %w", n.ID, ctx.Err())
		}
		if c.err == nil {
			return c, true, nil
		}
		if ctx.Err() == nil && (errors.Is(c.err, context.Canceled) || errors.Is(c.err, context.DeadlineExceeded)) {
			return p.conn(ctx, n) // the dial was cut short for its own caller
		}
		return nil, false, c.err
	}
	c := &poolConn{key: key, dialed: make(chan struct{}), slots: make(chan struct{}, sessionsPerConn)}
	p.conns[key] = c
	cfg := p.cfg
	if !fresh(n) || p.answered[key] {
		cfg.WaitTimeout = min(cfg.WaitTimeout, knownWait)
		if cfg.WaitTimeout <= 0 {
			cfg.WaitTimeout = knownWait
		}
		cfg.DialTimeout = min(cfg.DialTimeout, knownDial)
		if cfg.DialTimeout <= 0 {
			cfg.DialTimeout = knownDial
		}
	}
	p.mu.Unlock()

	c.c, c.err = p.dial(ctx, cfg, t)
	p.mu.Lock()
	switch {
	case c.err != nil:
		if p.conns[key] == c {
			delete(p.conns, key)
		}
	case p.closed:
		// Closed while dialing: nobody would close this one.
		_ = c.c.Close()
		c.c, c.err = nil, fmt.Errorf("%s: %s is closed", n.ID, p.owner)
	default:
		p.answered[key] = true
	}
	p.mu.Unlock()
	close(c.dialed)
	if c.err != nil {
		return nil, false, c.err
	}
	return c, false, nil
}

// drop forgets and closes the connection c, unless it was replaced.
func (p *Pool) drop(c *poolConn) {
	p.mu.Lock()
	if p.conns[c.key] == c {
		delete(p.conns, c.key)
	}
	p.mu.Unlock()
	_ = c.c.Close() // broken already; closing again is harmless
}

// Close closes every connection, ending the connections forwarded through
// them; the Pool refuses work after.
func (p *Pool) Close() error {
	p.mu.Lock()
	conns := p.conns
	p.conns = map[string]*poolConn{}
	p.closed = true
	p.mu.Unlock()
	var errs []error
	for _, c := range conns {
		<-c.dialed
		if c.err == nil {
			if err := c.c.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// sessionLost says a failed script or upload lost its session or
// connection (no exit status) while its caller still waits: the connection
// must not be reused.
func sessionLost(ctx context.Context, err error) bool {
	var re *RunError
	return ctx.Err() == nil && errors.As(err, &re) && re.ExitStatus == -1
}

// forwardLost says a forwarded connection could not be opened because the
// SSH connection is gone: the node did not answer the channel request
// (it answers one it cannot serve with an *gossh.OpenChannelError).
func forwardLost(ctx context.Context, err error) bool {
	return ctx.Err() == nil && !errors.As(err, new(*gossh.OpenChannelError))
}

// silent says the failed run printed nothing, so the script most likely
// never started and may run again.
func silent(err error) bool {
	var re *RunError
	return errors.As(err, &re) && re.Stdout == "" && re.Stderr == ""
}

// gatedReader passes reads to r until stop. An upload that failed may
// leave a goroutine about to read its content: after stop, that read does
// not reach r, so that content is untouched for another attempt unless a
// read began before.
type gatedReader struct {
	r       io.Reader
	mu      sync.Mutex
	stopped bool
	began   bool
}

// errUploadEnded is what a stopped gatedReader returns.
var errUploadEnded = errors.New("the upload ended")

func (g *gatedReader) Read(p []byte) (int, error) {
	g.mu.Lock()
	if g.stopped {
		g.mu.Unlock()
		return 0, errUploadEnded
	}
	g.began = true
	g.mu.Unlock()
	return g.r.Read(p)
}

// stop ends the reads and says whether any began.
func (g *gatedReader) stop() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.stopped = true
	return g.began
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
