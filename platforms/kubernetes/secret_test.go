package kubernetes

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"net"
	"strings"
	"testing"

	"github.com/cloudtransit/transit/districts"
	"github.com/cloudtransit/transit/platforms/ssh"
)

// lossyRunner is a node whose connection drops halfway through printing a
// key: the output so far is in the error, as the SSH pool reports it.
type lossyRunner struct{ printed string }

func (r lossyRunner) Run(_ context.Context, n districts.Node, name, _ string, _ []byte) (string, error) {
	return r.printed, &ssh.RunError{Target: ssh.NodeTarget(n), Name: name, ExitStatus: -1, Stdout: r.printed, Err: io.ErrUnexpectedEOF}
}

func (lossyRunner) Upload(context.Context, districts.Node, string, fs.FileMode, io.Reader, int64) error {
	return errors.New("no uploads")
}

func (lossyRunner) DialContext(context.Context, districts.Node, string, string) (net.Conn, error) {
	return nil, errors.New("no tunnels")
}

// A failed read of credentials never puts what was printed into the
// error: not the admin kubeconfig, not etcd's key.
func TestSecretsStayOutOfErrors(t *testing.T) {
	const secret = "-----BEGIN EC PRIVATE KEY-----\nMHcCAQEEIAsecretsecretsecret\n"
	d := newDriver(districts.Cluster{ID: "k"}, Options{StateDir: t.TempDir()}, lossyRunner{printed: secret})
	m := districts.Node{ID: "k-master-1", PrivateIP: "10.0.0.2"}
	_, err := d.adminConfig(context.Background(), m)
	if err == nil || strings.Contains(err.Error(), "secret") {
		t.Errorf("admin kubeconfig: %v", err)
	}
	_, err = d.etcdTLS(context.Background(), m)
	if err == nil || strings.Contains(err.Error(), "secret") {
		t.Errorf("etcd credentials: %v", err)
	}
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("the cause was lost: %v", err)
	}
}
