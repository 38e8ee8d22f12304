package ssh

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	gossh "golang.org/x/crypto/ssh"

	"github.com/cloudtransit/transit/clock"
	"github.com/cloudtransit/transit/shellquote"
)

// Defaults for Config.
const (
	DefaultUser        = "root"
	DefaultWaitTimeout = 2 * time.Minute
	DefaultDialTimeout = 10 * time.Second
	DefaultAuthWindow  = 5 * time.Minute
)

// Backoff between Dial attempts: from minBackoff, doubling up to maxBackoff.
const (
	minBackoff = 100 * time.Millisecond
	maxBackoff = 2 * time.Second
)

// killGrace is how long Run waits for a cancelled command's session to
// close after SIGKILL before it closes the whole connection.
const killGrace = 2 * time.Second

// Config says how to reach nodes.
type Config struct {
	User     string // default "root"
	Signer   gossh.Signer
	HostKeys *HostKeys
	// KeyPath, optional, is the private key file of Signer (Key.Path);
	// authentication errors name its public key file.
	KeyPath string
	Clock   clock.Clock // default clock.Real{}
	// WaitTimeout is how long Dial retries a host that is not answering
	// yet; default 2m.
	WaitTimeout time.Duration
	// DialTimeout bounds one TCP connect plus SSH handshake; default 10s.
	DialTimeout time.Duration
	// AuthWindow is how long after a machine's launch (Target.LaunchedAt)
	// sshd refusing the key is retried like an unreachable port: cloud
	// images often start sshd before cloud-init installs the key. Default
	// 5m.
	AuthWindow time.Duration
}

func (c Config) withDefaults() Config {
	if c.User == "" {
		c.User = DefaultUser
	}
	if c.Clock == nil {
		c.Clock = clock.Real{}
	}
	if c.WaitTimeout <= 0 {
		c.WaitTimeout = DefaultWaitTimeout
	}
	if c.DialTimeout <= 0 {
		c.DialTimeout = DefaultDialTimeout
	}
	if c.AuthWindow <= 0 {
		c.AuthWindow = DefaultAuthWindow
	}
	return c
}

// Target is one node.
type Target struct {
	// HostID is the machine's provider id: the key its host key is pinned
	// under, and its name in messages when Name is empty.
	HostID string
	Name   string // the node's name for messages (transit node id); may be empty
	// Addr is "host" or "host:port" (port 22 when omitted); IPv6
	// literals may be bare, bracketed or bracketed with a port.
	Addr string
	// LaunchedAt is when the machine was launched (districts.Node's
	// CreatedAt). Within Config.AuthWindow of it, a refused key is
	// retried; zero (unknown) fails at once.
	LaunchedAt time.Time
}

// label names the target in messages.
func (t Target) label() string {
	switch {
	case t.Name != "":
		return t.Name
	case t.HostID != "":
		return t.HostID
	}
	return t.Addr
}

// hostPort returns addr with a port, 22 unless it names one.
func hostPort(addr string) (string, error) {
	if addr == "" {
		return "", errors.New("empty address")
	}
	if host, port, err := net.SplitHostPort(addr); err == nil {
		if host == "" || port == "" {
			return "", fmt.Errorf("address %q: missing host or port", addr)
		}
		return net.JoinHostPort(host, port), nil
	}
	host := addr
	if strings.HasPrefix(host, "[") && strings.HasSuffix(host, "]") {
		host = host[1 : len(host)-1]
	}
	if host == "" || strings.ContainsAny(host, "[]") {
		return "", fmt.Errorf("address %q: malformed", addr)
	}
	return net.JoinHostPort(host, "22"), nil
}

// Client is a connection to one node.
type Client struct {
	target Target
	clock  clock.Clock
	conn   *gossh.Client
}

// Dial connects to t. While the machine is not answering yet (connection
// refused, timeouts, no route, sshd closing or resetting the handshake
// because it is still starting) it retries with exponential backoff, 100ms
// doubling to 2s, until cfg.WaitTimeout has passed, then returns an error
// matching ErrUnreachable that carries the last failure. sshd refusing the
// key (*AuthError, matching ErrAuth) is retried the same way while the
// machine is within cfg.AuthWindow of its launch (t.LaunchedAt), and
// returned at once after it. A host key other than the pinned one
// (*HostKeyChangedError) is returned at once. When ctx ends, Dial returns
// an error wrapping ctx.Err().
func Dial(ctx context.Context, cfg Config, t Target) (*Client, error) {
	cfg = cfg.withDefaults()
	addr, err := hostPort(t.Addr)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", t.label(), err)
	}
	switch {
	case cfg.Signer == nil:
		return nil, fmt.Errorf("%s (%s): ssh config has no key", t.label(), addr)
	case cfg.HostKeys == nil:
		return nil, fmt.Errorf("%s (%s): ssh config has no host key store", t.label(), addr)
	}
	if err := checkHostID(t.HostID); err != nil {
		return nil, fmt.Errorf("%s (%s): %w", t.label(), addr, err)
	}

	start := cfg.Clock.Now()
	delay := minBackoff
	for {
		conn, err := dialOnce(ctx, cfg, t, addr)
		if err == nil {
			return &Client{target: t, clock: cfg.Clock, conn: conn}, nil
		}
		now := cfg.Clock.Now()
		left := cfg.WaitTimeout - now.Sub(start)
		var hostKeyErr *hostKeyError
		var authErr *AuthError
		switch {
		case errors.As(err, new(*HostKeyChangedError)):
			return nil, err
		case errors.As(err, &hostKeyErr):
			return nil, fmt.Errorf("%s (%s): check host key: %w", t.label(), addr, hostKeyErr.err)
		case errors.As(err, &authErr):
			// Refused keys wait only inside the launch window.
			if !t.LaunchedAt.IsZero() {
				authErr.SinceLaunch = now.Sub(t.LaunchedAt)
				left = min(left, cfg.AuthWindow-authErr.SinceLaunch)
			} else {
				left = 0
			}
			if left <= 0 {
				return nil, authErr
			}
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("%s (%s): connect over SSH: %w (last error: %w)", t.label(), addr, ctx.Err(), err)
		}
		if errors.As(err, new(*gossh.AlgorithmNegotiationError)) {
			// Waiting does not cure sharing no algorithm.
			return nil, fmt.Errorf("%s (%s): connect over SSH: %w", t.label(), addr, err)
		}
		if left <= 0 {
			return nil, fmt.Errorf("%s (%s): %w after %s: %w", t.label(), addr, ErrUnreachable, cfg.WaitTimeout, err)
		}
		if serr := cfg.Clock.Sleep(ctx, min(delay, left)); serr != nil {
			return nil, fmt.Errorf("%s (%s): connect over SSH: %w (last error: %w)", t.label(), addr, serr, err)
		}
		delay = min(2*delay, maxBackoff)
	}
}

// dialOnce makes one connection attempt, bounded by cfg.DialTimeout and
// ctx.
func dialOnce(ctx context.Context, cfg Config, t Target, addr string) (*gossh.Client, error) {
	var checkErr error
	hostKeyOK := false // key exchange done: later failures are authentication
	check := cfg.HostKeys.callback(ctx, t.HostID)
	ccfg := &gossh.ClientConfig{
		User: cfg.User,
		Auth: []gossh.AuthMethod{gossh.PublicKeys(cfg.Signer)},
		HostKeyCallback: func(hostname string, remote net.Addr, key gossh.PublicKey) error {
			checkErr = check(hostname, remote, key)
			hostKeyOK = checkErr == nil
			return checkErr
		},
		Timeout: cfg.DialTimeout,
	}
	if pinned, ok := cfg.HostKeys.Pinned(t.HostID); ok {
		ccfg.HostKeyAlgorithms = hostKeyAlgorithms(pinned.Type())
	}

	d := net.Dialer{Timeout: cfg.DialTimeout}
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	// The handshake has no context: bound it by a deadline, and by ctx
	// through closing the connection.
	stop := context.AfterFunc(ctx, func() { _ = nc.Close() })
	if err := nc.SetDeadline(time.Now().Add(cfg.DialTimeout)); err != nil {
		stop()
		_ = nc.Close()
		return nil, err
	}
	c, chans, reqs, err := gossh.NewClientConn(nc, addr, ccfg)
	if !stop() && err == nil {
		_ = c.Close()
		return nil, ctx.Err()
	}
	if err != nil {
		_ = nc.Close()
		var changed *HostKeyChangedError
		switch {
		case errors.As(checkErr, &changed):
			return nil, changed
		case checkErr != nil:
			return nil, &hostKeyError{checkErr}
		case hostKeyOK && !transportError(err):
			// x/crypto reports a refused key as a plain error; what
			// identifies it is where it happened: after the server proved
			// its identity, on a connection that is still up.
			e := &AuthError{Target: t, Addr: addr, User: cfg.User, Key: gossh.FingerprintSHA256(cfg.Signer.PublicKey()), Err: err}
			if cfg.KeyPath != "" {
				e.KeyFile = cfg.KeyPath + ".pub"
			}
			return nil, e
		}
		return nil, err
	}
	if err := nc.SetDeadline(time.Time{}); err != nil {
		_ = c.Close()
		return nil, err
	}
	return gossh.NewClient(c, chans, reqs), nil
}

// transportError reports a handshake failure of the connection itself
// (closed, reset, timed out), as a still starting sshd causes.
func transportError(err error) bool {
	var netErr net.Error
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) || errors.As(err, &netErr)
}

// hostKeyError is the host key store failing (not a changed key): Dial
// does not retry it.
type hostKeyError struct{ err error }

func (e *hostKeyError) Error() string { return e.err.Error() }

// hostKeyAlgorithms lists the host key algorithms this package supports,
// those that can present a key of type pinned first, so that a server with
// several host keys presents the pinned one.
func hostKeyAlgorithms(pinned string) []string {
	supported := gossh.SupportedAlgorithms().HostKeys
	var first []string
	switch pinned {
	case gossh.KeyAlgoRSA:
		first = []string{gossh.KeyAlgoRSASHA512, gossh.KeyAlgoRSASHA256}
	case gossh.CertAlgoRSAv01:
		first = []string{gossh.CertAlgoRSASHA512v01, gossh.CertAlgoRSASHA256v01}
	default:
		first = []string{pinned}
	}
	first = slices.DeleteFunc(first, func(a string) bool { return !slices.Contains(supported, a) })
	rest := slices.DeleteFunc(supported, func(a string) bool { return slices.Contains(first, a) })
	return append(first, rest...)
}

// Close closes the connection.
func (c *Client) Close() error {
	return c.conn.Close()
}

// RunOn dials t, runs script there (see Client.Run) and closes the
// connection.
func RunOn(ctx context.Context, cfg Config, t Target, name, script string) (string, error) {
	c, err := Dial(ctx, cfg, t)
	if err != nil {
		return "", err
	}
	out, err := c.Run(ctx, name, script)
	if cerr := c.Close(); err == nil && cerr != nil && !errors.Is(cerr, net.ErrClosed) {
		err = fmt.Errorf("%s: close ssh connection: %w", t.label(), cerr)
	}
	return out, err
}

// Run runs the POSIX sh script on the node and returns its stdout; name
// says what it does, for messages ("install docker").
//
// The script goes to `sh -s` on stdin, so it needs no quoting, inside a
// wrapper (see wrapScript): sh reads all of it before running any, runs it
// in a subshell with stdin from /dev/null, and a watcher kills the
// command's process group when the session's stdin closes. So when ctx
// ends (or the connection drops) the remote command is killed: Run sends
// SIGKILL (which OpenSSH refuses for root logins), closes the session,
// which makes the watcher kill the command, and returns a *RunError with
// the output so far, wrapping ctx.Err().
//
// A failing script returns a *RunError with its exit status, stdout and
// stderr; Run's string result is its stdout then too.
func (c *Client) Run(ctx context.Context, name, script string) (string, error) {
	return c.exec(ctx, name, "sh -s", strings.NewReader(wrapScript(script)), true)
}

// wrapScript is what Run sends to `sh -s`. The outer group makes sh parse
// the whole script before running any of it (a syntax error runs nothing,
// and no command can read the rest of the script as its input). The
// watcher holds the session's stdin, which the client keeps open while the
// command runs, and kills the process group once it reads EOF: when the
// session is closed or the connection dropped. The script runs in a
// subshell so that its exit still stops the watcher.
func wrapScript(script string) string {
	return `{
exec 3<&0 </dev/null
(while read -r _; do :; done <&3; kill -KILL 0) >/dev/null 2>&1 &
transit_watcher=$!
exec 3<&-
(
` + script + `
) </dev/null
transit_status=$?
kill "$transit_watcher" 2>/dev/null
exit "$transit_status"
}
`
}

// Upload writes content to path on the node with mode (permission bits),
// atomically; see UploadFrom.
func (c *Client) Upload(ctx context.Context, path string, mode fs.FileMode, content []byte) error {
	return c.UploadFrom(ctx, path, mode, bytes.NewReader(content), int64(len(content)))
}

// UploadFrom writes the first size bytes of content to path on the node
// with mode (permission bits), atomically: it creates the directory,
// writes a temporary file beside path, checks its size, sets its mode and
// renames it over path. Content streams over the stdin of a single `sh -c`
// command as UploadFrom reads it, so a large file is never held in memory.
// Content ending before size bytes, failing to read, a cancelled ctx or a
// broken connection all leave path as it was; a failure to read content is
// returned as such (not as a *RunError), ahead of the remote command's
// complaint about the short file.
func (c *Client) UploadFrom(ctx context.Context, path string, mode fs.FileMode, content io.Reader, size int64) error {
	switch {
	case path == "":
		return fmt.Errorf("%s: upload: empty path", c.target.label())
	case size < 0:
		return fmt.Errorf("%s: upload %s: negative size %d", c.target.label(), path, size)
	}
	_, err := c.exec(ctx, "upload "+path, uploadCommand(path, mode, size), &sizedReader{r: content, size: size}, false)
	return err
}

// sizedReader reads exactly size bytes of r: r ending sooner is an error
// wrapping io.ErrUnexpectedEOF, and what r holds beyond size is not read.
type sizedReader struct {
	r    io.Reader
	size int64
	read int64
}

func (s *sizedReader) Read(p []byte) (int, error) {
	left := s.size - s.read
	if left <= 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > left {
		p = p[:left]
	}
	n, err := s.r.Read(p)
	s.read += int64(n)
	if errors.Is(err, io.EOF) && s.read < s.size {
		return n, fmt.Errorf("content ended after %d of %d bytes: %w", s.read, s.size, io.ErrUnexpectedEOF)
	}
	if err == nil && s.read == s.size {
		err = io.EOF
	}
	return n, err
}

// uploadScript writes its stdin to "$1" with mode "$2", atomically, if it
// is "$3" bytes long.
const uploadScript = `set -e; ` +
	`if [ -d "$1" ]; then echo "$1 is a directory" >&2; exit 1; fi; ` +
	`d=$(dirname -- "$1"); mkdir -p -- "$d"; ` +
	`t=$(mktemp "$d/.transit-upload.XXXXXX"); trap 'rm -f -- "$t"' EXIT; ` +
	`cat >"$t"; n=$(wc -c <"$t"); ` +
	`if [ $n -ne "$3" ]; then echo "received $n of $3 bytes" >&2; exit 1; fi; ` +
	`chmod "$2" "$t"; mv -f -- "$t" "$1"; trap - EXIT`

// uploadCommand is the remote command line of UploadFrom.
func uploadCommand(path string, mode fs.FileMode, size int64) string {
	return fmt.Sprintf("sh -c %s sh %s %04o %d", shellquote.Quote(uploadScript), shellquote.Quote(path), mode.Perm(), size)
}

// exec runs cmd in a new session, sends stdin, and returns stdout. With
// keepOpen, the session's stdin stays open until the command ends (see
// wrapScript); otherwise it is closed once stdin is sent, or failed to
// read. A failure to read stdin is returned ahead of the command's result,
// once the command has ended, as a plain error: nothing was wrong over
// SSH.
func (c *Client) exec(ctx context.Context, name, cmd string, stdin io.Reader, keepOpen bool) (string, error) {
	sess, err := c.conn.NewSession()
	if err != nil {
		return "", &RunError{Target: c.target, Name: name, ExitStatus: -1, Err: fmt.Errorf("open ssh session: %w", err)}
	}
	defer func() { _ = sess.Close() }() // io.EOF once the command has exited
	var stdout, stderr syncBuffer
	sess.Stdout = &stdout
	sess.Stderr = &stderr
	in, err := sess.StdinPipe()
	if err != nil {
		return "", &RunError{Target: c.target, Name: name, ExitStatus: -1, Err: fmt.Errorf("open stdin: %w", err)}
	}
	if err := sess.Start(cmd); err != nil {
		return "", &RunError{Target: c.target, Name: name, ExitStatus: -1, Err: fmt.Errorf("start remote command: %w", err)}
	}
	// Writing may block on the channel's window until the command reads,
	// so it runs beside the wait for the command.
	src := &readRecorder{r: stdin}
	wrote := make(chan error, 1)
	go func() {
		_, err := io.Copy(in, src)
		switch {
		case src.failed() != nil:
			// The command sees its input end (a script cut short does not
			// parse); the read error is returned below.
			err = in.Close()
		case err == nil && !keepOpen:
			err = in.Close()
		}
		wrote <- err
	}()
	var werr error
	waited := make(chan struct{})
	go func() {
		werr = sess.Wait()
		close(waited)
	}()

	select {
	case <-waited:
	case <-ctx.Done():
		c.kill(ctx, sess, waited)
		return stdout.String(), &RunError{
			Target: c.target, Name: name, ExitStatus: -1,
			Stdout: stdout.String(), Stderr: stderr.String(), Err: ctx.Err(),
		}
	}
	if err := src.failed(); err != nil {
		// The command saw its stdin end early: whatever it said, the
		// input is what failed.
		return stdout.String(), fmt.Errorf("%s: %s: read input: %w", c.target.label(), name, err)
	}
	if werr == nil {
		return stdout.String(), nil
	}
	rerr := &RunError{Target: c.target, Name: name, ExitStatus: -1, Stdout: stdout.String(), Stderr: stderr.String()}
	var exit *gossh.ExitError
	switch {
	case errors.As(werr, &exit) && exit.Signal() != "":
		rerr.Err = fmt.Errorf("killed by signal %s", exit.Signal())
	case errors.As(werr, &exit):
		rerr.ExitStatus = exit.ExitStatus()
	default:
		rerr.Err = werr
		// The channel is gone; if sending stdin failed, say so too.
		select {
		case err := <-wrote:
			if err != nil && !errors.Is(err, io.EOF) {
				rerr.Err = fmt.Errorf("%w (sending stdin: %w)", werr, err)
			}
		default:
		}
	}
	return rerr.Stdout, rerr
}

// kill stops a cancelled command: SIGKILL through the session (refused by
// OpenSSH for root logins), then the session is closed, which makes Run's
// watcher kill the command; if the session does not end within killGrace
// (a dead connection), the connection is closed too. It returns once the
// session's Wait has returned.
func (c *Client) kill(ctx context.Context, sess *gossh.Session, waited <-chan struct{}) {
	_ = sess.Signal(gossh.SIGKILL) // best effort: the server may not support signals
	_ = sess.Close()
	graceCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	expired := make(chan struct{})
	go func() {
		if c.clock.Sleep(graceCtx, killGrace) == nil {
			close(expired)
		}
	}()
	select {
	case <-waited:
	case <-expired:
		_ = c.conn.Close()
		<-waited
	}
}

// readRecorder is a reader that remembers the error, other than io.EOF, on
// which it stopped. Since the command sees its stdin end only after that,
// exec reads the error once the command has ended without waiting for the
// goroutine sending stdin, which may stay blocked in r after a cancel.
type readRecorder struct {
	r   io.Reader
	mu  sync.Mutex
	err error
}

func (r *readRecorder) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	if err != nil && !errors.Is(err, io.EOF) {
		r.mu.Lock()
		r.err = err
		r.mu.Unlock()
	}
	return n, err
}

// failed returns the error reading stopped on, if not io.EOF.
func (r *readRecorder) failed() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}

// syncBuffer is a bytes.Buffer safe to read while a session writes to it.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// DialContext opens a connection from the node to addr, a host:port as the
// node sees it ("127.0.0.1:6443" for a master's API server), through this
// SSH connection (a direct-tcpip channel; sshd must allow TCP forwarding).
// network is "tcp", "tcp4" or "tcp6". ctx bounds opening the connection
// only, as with net.Dialer: a cancelled ctx returns at once with an error
// wrapping ctx.Err(). A target the node cannot reach is an error wrapping
// *ssh.OpenChannelError (from golang.org/x/crypto/ssh).
//
// The connection has the deadlines net/http and gRPC expect of a net.Conn,
// which an SSH channel lacks, and closing it closes only its channel, not
// the SSH connection. Reads end with io.EOF once the node's side closes;
// the connection ends with the SSH connection too.
func (c *Client) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	if err := checkForward(network, addr); err != nil {
		return nil, fmt.Errorf("%s: forward to %s: %w", c.target.label(), addr, err)
	}
	ch, err := c.conn.DialContext(ctx, network, addr)
	if err != nil {
		return nil, fmt.Errorf("%s: forward to %s: %w", c.target.label(), addr, err)
	}
	return newTunnel(ch, network, addr), nil
}

// checkForward says whether DialContext can forward to network and addr.
func checkForward(network, addr string) error {
	switch network {
	case "tcp", "tcp4", "tcp6":
	default:
		return fmt.Errorf("unsupported network %q", network)
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return err
	}
	if p, err := strconv.ParseUint(port, 10, 16); err != nil || p == 0 || host == "" {
		return fmt.Errorf("address %q: want host:port", addr)
	}
	return nil
}

// tunnel is a forwarded connection: the caller's end of a net.Pipe, which
// has deadlines, with the SSH channel behind the other end. Two goroutines
// copy between the pipe and the channel; when either side closes, both
// close.
type tunnel struct {
	net.Conn
	remote net.Addr
}

// RemoteAddr is the address dialed, as the node sees it.
func (t *tunnel) RemoteAddr() net.Addr { return t.remote }

// LocalAddr is the channel's local address (unspecified).
func (t *tunnel) LocalAddr() net.Addr { return &net.TCPAddr{IP: net.IPv4zero} }

// forwardAddr is an address a node dialed.
type forwardAddr struct{ network, addr string }

func (a forwardAddr) Network() string { return a.network }
func (a forwardAddr) String() string  { return a.addr }

func newTunnel(ch net.Conn, network, addr string) *tunnel {
	local, inner := net.Pipe()
	go func() { // to the node
		_, err := io.Copy(ch, inner)
		if err == nil {
			// The caller closed its end after writing: the node's side
			// gets what was sent, then EOF.
			if cw, ok := ch.(interface{ CloseWrite() error }); ok {
				_ = cw.CloseWrite()
			}
		}
		_ = ch.Close()
		_ = inner.Close()
	}()
	go func() { // from the node
		_, _ = io.Copy(inner, ch) // ends when either side closes
		_ = inner.Close()         // the caller reads io.EOF
		_ = ch.Close()
	}()
	return &tunnel{Conn: local, remote: forwardAddr{network, addr}}
}
