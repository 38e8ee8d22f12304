// Package share serves a node's copy of the bundle to the other nodes of
// its district, so that the operator's machine sends the bundle's few
// hundred megabytes once per district rather than once per node.
//
// The protocol is one line and a stream, so that a node fetches with
// nothing but bash (/dev/tcp) and sha256sum: the client sends
// "TOKEN PATH\n" and reads the file's bytes until the server closes the
// connection. A wrong token or a path not offered gets the connection
// closed with nothing sent. The stream carries no length and no digest:
// the fetching node checks each file against the bundle manifest's
// SHA-256, which transit gives it over SSH, so a peer (or anyone on the
// path) can make a fetch fail but never make a node install other bytes.
// The token (random per run, given over SSH) keeps others from reading
// the files through the server; they are public software in any case.
package share

import (
	"bufio"
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"time"
)

// Options configure a server.
type Options struct {
	// Token must open every request.
	Token string
	// Files are the paths the server offers; nothing else is read.
	Files []string
	// Idle ends the server after that long without a request; Max after
	// that long whatever happens.
	Idle, Max time.Duration
	// Log gets one line per refused request; default none.
	Log func(format string, args ...any)
}

// maxConns bounds the transfers served at once: a district's nodes all
// fetch together, and disk and NIC are shared.
const maxConns = 16

// Serve answers requests on l until ctx ends, Idle passes without a
// request or Max passes; it closes l.
func Serve(ctx context.Context, l net.Listener, o Options) error {
	if len(o.Token) < 16 {
		return errors.New("share: the token must be at least 16 characters")
	}
	if o.Idle <= 0 || o.Max <= 0 {
		return errors.New("share: Idle and Max must be set")
	}
	if o.Log == nil {
		o.Log = func(string, ...any) {}
	}
	offered := map[string]bool{}
	for _, f := range o.Files {
		offered[f] = true
	}
	ctx, cancel := context.WithTimeout(ctx, o.Max)
	defer cancel()
	idle := time.NewTimer(o.Idle)
	defer idle.Stop()
	var mu sync.Mutex
	active := 0
	touch := func(delta int) {
		mu.Lock()
		defer mu.Unlock()
		active += delta
		if active == 0 {
			idle.Reset(o.Idle)
		} else {
			idle.Stop()
		}
	}
	go func() {
		select {
		case <-ctx.Done():
		case <-idle.C:
		}
		_ = l.Close()
	}()
	sem := make(chan struct{}, maxConns)
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		c, err := l.Accept()
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return nil
			}
			return err
		}
		touch(1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer touch(-1)
			defer func() { _ = c.Close() }()
			select {
			case sem <- struct{}{}:
				defer func() { <-sem }()
			case <-ctx.Done():
				return
			}
			if err := serveOne(c, o.Token, offered); err != nil {
				o.Log("%s: %v", c.RemoteAddr(), err)
			}
		}()
	}
}

// requestWait bounds how long a client may take to send its line, and
// sendWait one file's transfer (the largest is under 100 MB).
const (
	requestWait = 10 * time.Second
	sendWait    = 10 * time.Minute
)

func serveOne(c net.Conn, token string, offered map[string]bool) error {
	_ = c.SetReadDeadline(time.Now().Add(requestWait))
	line, err := bufio.NewReader(io.LimitReader(c, 4096)).ReadString('\n')
	if err != nil {
		return fmt.Errorf("no request: %w", err)
	}
	got, path, ok := strings.Cut(strings.TrimSuffix(line, "\n"), " ")
	if !ok || subtle.ConstantTimeCompare([]byte(got), []byte(token)) != 1 {
		return errors.New("refused: wrong token")
	}
	if !offered[path] {
		return fmt.Errorf("refused: %q is not offered", path)
	}
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer func() { _ = f.Close() }()
	_ = c.SetDeadline(time.Now().Add(sendWait))
	if _, err := io.Copy(c, f); err != nil {
		return fmt.Errorf("send %s: %w", path, err)
	}
	return nil
}
