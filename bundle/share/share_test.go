package share

import (
	"bytes"
	"context"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

const token = "0123456789abcdef0123"

func serve(t *testing.T, o Options) (addr string, done <-chan error) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ch := make(chan error, 1)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go func() { ch <- Serve(ctx, l, o) }()
	return l.Addr().String(), ch
}

func fetch(t *testing.T, addr, line string) []byte {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	if _, err := io.WriteString(c, line); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	b, err := io.ReadAll(c)
	if err != nil {
		t.Fatalf("%q: %v", line, err)
	}
	return b
}

// TestServesOnlyOfferedFilesToTheToken: the offered file, whole, to a
// request with the token; nothing to a wrong token, a path not offered
// (a secret beside it) or a request without a line.
func TestServesOnlyOfferedFilesToTheToken(t *testing.T) {
	dir := t.TempDir()
	big := bytes.Repeat([]byte("transit bundle "), 400_000) // 6 MB
	offered, secret := filepath.Join(dir, "kubelet"), filepath.Join(dir, "key")
	if err := os.WriteFile(offered, big, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(secret, []byte("private"), 0o600); err != nil {
		t.Fatal(err)
	}
	addr, _ := serve(t, Options{Token: token, Files: []string{offered}, Idle: time.Minute, Max: time.Minute})

	var wg sync.WaitGroup
	for range 4 { // a district's nodes fetch together
		wg.Add(1)
		go func() {
			defer wg.Done()
			if got := fetch(t, addr, token+" "+offered+"\n"); !bytes.Equal(got, big) {
				t.Errorf("offered file: got %d bytes, want %d", len(got), len(big))
			}
		}()
	}
	wg.Wait()
	for _, line := range []string{
		"wrong-token-0123456789 " + offered + "\n",
		token + " " + secret + "\n",
		token + " " + offered + "/../key\n",
		token + "\n",
		"\n",
	} {
		if got := fetch(t, addr, line); len(got) != 0 {
			t.Errorf("request %q got %d bytes, want none", strings.TrimSpace(line), len(got))
		}
	}
}

// TestEndsWhenIdle: a server nobody asks ends by itself (a run killed
// before it stopped it leaves nothing listening); a short token is refused.
func TestEndsWhenIdle(t *testing.T) {
	_, done := serve(t, Options{Token: token, Idle: 200 * time.Millisecond, Max: time.Minute})
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("an idle server still runs after 10 s, want it gone after 200 ms")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Close() }()
	if err := Serve(context.Background(), l, Options{Token: "short", Idle: time.Second, Max: time.Second}); err == nil {
		t.Error("a 5-character token was accepted")
	}
}
