// Package cloudutil is what the cloud drivers (aws, gce, openstack) share:
// their error type, the district checks they make alike, retry and poll
// pacing, and reading the host keys cloud-init prints on a console.
package cloudutil

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"strings"
	"syscall"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/cloudtransit/transit/clock"
	"github.com/cloudtransit/transit/districts"
)

// Waits tune a cloud driver's requests and waits, the same settings in
// every driver; a zero field takes the driver's default (Or). Tests
// shorten them.
type Waits struct {
	// RetryMaxAttempts bounds the attempts of one API request:
	// throttling, 5xx answers and connection errors are retried.
	RetryMaxAttempts int
	// RetryBaseDelay and RetryMaxDelay shape the wait before retry n: a
	// random duration up to min(RetryMaxDelay, RetryBaseDelay·2^(n-1))
	// (exponential backoff, full jitter).
	RetryBaseDelay, RetryMaxDelay time.Duration
	// PollInterval is the first wait between polls of a starting
	// machine, of what it publishes (console, guest attributes) and of
	// a group still in use; it doubles up to PollMaxInterval.
	PollInterval, PollMaxInterval time.Duration
	// LaunchWait bounds how long Launch waits for the machine to run
	// with its addresses.
	LaunchWait time.Duration
	// HostKeyWait bounds how long Launch waits for the SSH host keys the
	// machine publishes; without them the first key presented over SSH
	// is trusted.
	HostKeyWait time.Duration
	// GroupWait bounds how long a group change is waited for, and a
	// group deletion retried while terminating machines still use it.
	GroupWait time.Duration
	// Clock times the waits (default the wall clock).
	Clock clock.Clock
}

// Or is w with each zero field taken from def, and the wall clock if
// neither has one.
func (w Waits) Or(def Waits) Waits {
	set := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	if w.RetryMaxAttempts <= 0 {
		w.RetryMaxAttempts = def.RetryMaxAttempts
	}
	set(&w.RetryBaseDelay, def.RetryBaseDelay)
	set(&w.RetryMaxDelay, def.RetryMaxDelay)
	set(&w.PollInterval, def.PollInterval)
	set(&w.PollMaxInterval, def.PollMaxInterval)
	set(&w.LaunchWait, def.LaunchWait)
	set(&w.HostKeyWait, def.HostKeyWait)
	set(&w.GroupWait, def.GroupWait)
	if w.Clock == nil {
		w.Clock = def.Clock
	}
	if w.Clock == nil {
		w.Clock = clock.Real{}
	}
	return w
}

// Error is a cloud's failure with the kind transit tells apart
// (provider.ErrQuota, ErrThrottled, ErrCloudAuth, ErrCloudNotFound,
// districts.ErrInvalid) and a message naming what to look at. It wraps the
// SDK's error, which never carries a secret.
type Error struct {
	Kind error
	Msg  string
	Err  error
}

func (e *Error) Error() string {
	if e.Err == nil {
		return e.Msg
	}
	return e.Msg + ": " + e.Err.Error()
}

// Is matches the error's kind.
func (e *Error) Is(target error) bool { return e.Kind != nil && target == e.Kind }

func (e *Error) Unwrap() error { return e.Err }

// Invalid is a configuration problem of district d, naming the key in
// format.
func Invalid(d districts.District, format string, args ...any) error {
	return &Error{Kind: districts.ErrInvalid, Msg: fmt.Sprintf("districts.json: district %q: ", d.ID) + fmt.Sprintf(format, args...)}
}

// SSHCIDRs are the district's ssh_cidrs, normalised; default 0.0.0.0/0
// (the nodes take only the cluster's key).
func SSHCIDRs(d districts.District) ([]string, error) {
	out, err := cidrs(d, "ssh_cidrs", d.SSHCIDRs)
	if err == nil && len(out) == 0 {
		out = []string{"0.0.0.0/0"}
	}
	return out, err
}

// APIPort is the Kubernetes API server's port, which api_cidrs open.
const APIPort = 6443

// APICIDRs are the district's api_cidrs, normalised; default none.
func APICIDRs(d districts.District) ([]string, error) { return cidrs(d, "api_cidrs", d.APICIDRs) }

func cidrs(d districts.District, key string, in []string) ([]string, error) {
	var out []string
	for _, c := range in {
		p, err := netip.ParsePrefix(c)
		if err != nil || p.Masked() != p {
			return nil, Invalid(d, "%s: %q is not a CIDR block such as 203.0.113.0/24", key, c)
		}
		out = append(out, p.String())
	}
	return out, nil
}

// Backoff is the wait before retry n (from 1): a random duration up to
// min(maxDelay, base·2^(n-1)), exponential backoff with full jitter.
func Backoff(n int, base, maxDelay time.Duration) time.Duration {
	ceil := maxDelay
	if n >= 1 && n < 31 {
		ceil = min(ceil, base<<(n-1))
	}
	if ceil <= 0 {
		return 0
	}
	return rand.N(ceil + 1)
}

// ParseHostKeys returns the keys of the console's last cloud-init host
// key block, in authorized_keys form without comments; nil while the
// block is missing or still being printed.
func ParseHostKeys(console string) []string {
	const begin, end = "-----BEGIN SSH HOST KEY KEYS-----", "-----END SSH HOST KEY KEYS-----"
	i := strings.LastIndex(console, begin)
	if i < 0 {
		return nil
	}
	block, _, ok := strings.Cut(console[i+len(begin):], end)
	if !ok {
		return nil
	}
	var keys []string
	for line := range strings.Lines(block) {
		pk, _, _, _, err := ssh.ParseAuthorizedKey([]byte(strings.TrimSpace(line)))
		if err != nil {
			continue
		}
		keys = append(keys, strings.TrimSpace(string(ssh.MarshalAuthorizedKey(pk))))
	}
	return keys
}

// CloudConfig is the cloud-config user data that lets root in with the
// cluster's key: transit installs the platform over SSH as root, and cloud
// images allow only their default user unless told otherwise.
func CloudConfig(authorizedKey string) string {
	q, _ := json.Marshal(strings.TrimSpace(authorizedKey)) // a string always marshals; JSON is YAML
	return "#cloud-config\n" +
		"# transit: root logs in with the cluster's SSH key.\n" +
		"disable_root: false\n" +
		"ssh_authorized_keys:\n" +
		"  - " + string(q) + "\n"
}

// ConnectionError says whether err is the connection's, not the cloud's
// answer (a timeout, a reset or refused connection, a cut-off answer):
// worth another attempt.
func ConnectionError(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.ECONNREFUSED)
}

// PollDelay is the wait after n polls: first, doubling with each poll, at
// most maxDelay.
func PollDelay(n int, first, maxDelay time.Duration) time.Duration {
	d := first
	for i := 0; i < n && d < maxDelay; i++ {
		d *= 2
	}
	return min(d, maxDelay)
}

// ConsoleHostKeys polls a machine's console (console returns its text)
// until cloud-init has printed the SSH host keys or within has passed;
// wait sleeps between polls. None (nil) means the first key presented
// will be trusted. Only ctx's end is an error.
func ConsoleHostKeys(ctx context.Context, clk clock.Clock, within time.Duration, wait func(ctx context.Context, n int) error,
	console func() (string, error)) ([]string, error) {
	deadline := clk.Now().Add(within)
	for i := 0; ; i++ {
		text, err := console()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if keys := ParseHostKeys(text); err == nil && len(keys) > 0 {
			return keys, nil
		}
		if !clk.Now().Before(deadline) {
			return nil, nil
		}
		if err := wait(ctx, i); err != nil {
			return nil, err
		}
	}
}
