package sidecar

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// caller calls the function over HTTP/1.1 on kept-alive connections, each
// call wholly in the calling goroutine. (net/http's Transport hands every
// call to the connection's writer and reader goroutines; those hand-offs
// cost about 75 µs of median latency per call on loopback, more than
// the rest of the call.) Responses are read with net/http's parser.
type caller struct {
	addr, host, uri string
	timeout         time.Duration
	dialer          net.Dialer

	mu   sync.Mutex
	idle []*conn
}

type conn struct {
	c net.Conn
	r *bufio.Reader
	w *bufio.Writer
}

// maxIdle bounds the kept-alive connections: one per partition handled at
// once is enough.
const maxIdle = 64

func newCaller(function string, timeout time.Duration) (*caller, error) {
	u, err := url.Parse(function)
	if err != nil {
		return nil, err
	}
	if u.Scheme != "http" || u.Host == "" {
		return nil, fmt.Errorf("%q is no http:// URL", function)
	}
	addr := u.Host
	if u.Port() == "" {
		addr = net.JoinHostPort(u.Hostname(), "80")
	}
	return &caller{addr: addr, host: u.Host, uri: u.RequestURI(), timeout: timeout,
		dialer: net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}}, nil
}

// answer is the function's answer, its body read.
type answer struct {
	status int
	header http.Header
	body   []byte // at most the limit + 1 bytes
}

// errRefused: the function does not listen.
var errRefused = errors.New("the function refuses connections")

// call sends ev and returns the answer, its body cut after limit+1
// bytes. Errors: errRefused (wrapped), os.ErrDeadlineExceeded once the
// call takes longer than the timeout, or what else broke the exchange.
func (c *caller) call(ctx context.Context, ev event, limit int) (answer, error) {
	deadline := time.Now().Add(c.timeout)
	for fresh := false; ; fresh = true {
		cn, reused, err := c.get(ctx, deadline, fresh)
		if err != nil {
			if errors.Is(err, syscall.ECONNREFUSED) {
				return answer{}, fmt.Errorf("%w: %w", errRefused, err)
			}
			return answer{}, err
		}
		a, answered, err := c.exchange(cn, ev, deadline, limit)
		if err == nil {
			return a, nil
		}
		_ = cn.c.Close()
		// A kept-alive connection the function closed (it restarted, or
		// timed the connection out) fails before any answer: once more on
		// a new connection.
		if reused && !answered && !errors.Is(err, os.ErrDeadlineExceeded) {
			continue
		}
		return answer{}, err
	}
}

// exchange writes the request and reads the answer on cn, which goes back
// to the idle ones if it may be used again. answered: the status line was
// read.
func (c *caller) exchange(cn *conn, ev event, deadline time.Time, limit int) (answer, bool, error) {
	if err := cn.c.SetDeadline(deadline); err != nil {
		return answer{}, false, err
	}
	w := cn.w
	_, _ = w.WriteString("POST ")
	_, _ = w.WriteString(c.uri)
	_, _ = w.WriteString(" HTTP/1.1\r\nHost: ")
	_, _ = w.WriteString(c.host)
	_, _ = w.WriteString("\r\nContent-Length: ")
	_, _ = w.WriteString(strconv.Itoa(len(ev.data)))
	if ev.contentType != "" {
		_, _ = w.WriteString("\r\nContent-Type: ")
		_, _ = w.WriteString(ev.contentType)
	}
	for name, v := range ev.attrs {
		_, _ = w.WriteString("\r\nce-")
		_, _ = w.WriteString(name)
		_, _ = w.WriteString(": ")
		_, _ = w.WriteString(percentEncode(v))
	}
	_, _ = w.WriteString("\r\n\r\n")
	_, _ = w.Write(ev.data)
	if err := w.Flush(); err != nil {
		return answer{}, false, err
	}
	resp, err := http.ReadResponse(cn.r, nil)
	if err != nil {
		return answer{}, false, err
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, int64(limit)+1))
	_ = resp.Body.Close() // a no-op: what was not read is dropped with the connection
	if err != nil {
		return answer{}, true, err
	}
	if resp.Close || len(body) > limit {
		_ = cn.c.Close() // the rest of an answer too large is not read
	} else {
		c.put(cn)
	}
	return answer{resp.StatusCode, resp.Header, body}, true, nil
}

func (c *caller) get(ctx context.Context, deadline time.Time, fresh bool) (*conn, bool, error) {
	if !fresh {
		c.mu.Lock()
		if n := len(c.idle); n > 0 {
			cn := c.idle[n-1]
			c.idle = c.idle[:n-1]
			c.mu.Unlock()
			return cn, true, nil
		}
		c.mu.Unlock()
	}
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	nc, err := c.dialer.DialContext(ctx, "tcp", c.addr) // TCP_NODELAY is Go's default
	if err != nil {
		return nil, false, err
	}
	return &conn{c: nc, r: bufio.NewReader(nc), w: bufio.NewWriter(nc)}, false, nil
}

func (c *caller) put(cn *conn) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.idle) < maxIdle {
		c.idle = append(c.idle, cn)
		return
	}
	_ = cn.c.Close()
}

func (c *caller) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, cn := range c.idle {
		_ = cn.c.Close()
	}
	c.idle = nil
}
