package swarm

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"regexp"

	"github.com/cloudtransit/transit/districts"
	"github.com/cloudtransit/transit/platforms/ssh"
)

// runner runs a POSIX sh script as root on a node. stdin, when not nil, is
// the script's standard input: the way secrets reach a node, since they
// never belong in a command line. It returns the script's stdout; a
// failing script's error carries its stderr (an *ssh.RunError over SSH).
// Upload writes a file on a node, atomically (transit-mesh, for the
// mesh). It is an *ssh.Pool; tests put a fake between the driver and SSH
// here.
type runner interface {
	Run(ctx context.Context, n districts.Node, name, script string, stdin []byte) (string, error)
	Upload(ctx context.Context, n districts.Node, path string, mode fs.FileMode, content io.Reader, size int64) error
}

var _ runner = (*ssh.Pool)(nil)

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
