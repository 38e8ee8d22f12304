package kubernetes

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"strconv"
	"time"

	clientset "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/cloudtransit/transit/atomicfile"
	"github.com/cloudtransit/transit/districts"
	"github.com/cloudtransit/transit/platforms/ssh"
)

// apiTimeout bounds one request to the API server.
const apiTimeout = 30 * time.Second

// api is a client of the cluster's API server through one master: every
// connection is tunnelled over that master's SSH connection to its own
// API server, so only SSH needs to be open to the operator.
type api struct {
	c      clientset.Interface
	cfg    *rest.Config
	master districts.Node
	// caHash is kubeadm's discovery hash of the cluster CA.
	caHash string
}

// adminConfig reads the admin kubeconfig from master m, and keeps a copy
// beside the state for `transit kubeconfig` (rewritten when the masters'
// differs: the cluster was made anew).
func (d *driver) adminConfig(ctx context.Context, m districts.Node) ([]byte, error) {
	out, err := d.readSecret(ctx, m, "read the admin kubeconfig", adminConfigScript)
	if err != nil {
		return nil, fmt.Errorf("read the admin kubeconfig from master %s: %w", m.ID, err)
	}
	data := []byte(out)
	if _, err := clientcmd.Load(data); err != nil {
		return nil, fmt.Errorf("master %s: /etc/kubernetes/admin.conf is not a kubeconfig: %w", m.ID, err)
	}
	if d.opts.StateDir == "" {
		return data, nil
	}
	path := AdminConfigPath(d.opts.StateDir, d.cluster.ID)
	if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, data) {
		return data, nil
	}
	if err := atomicfile.Write(path, data, 0o600); err != nil {
		return nil, fmt.Errorf("save the admin kubeconfig: %w", err)
	}
	return data, nil
}

// readSecret runs a script that prints credentials: a failure's error
// never carries what it printed (a connection lost halfway would
// otherwise put part of a key into the message).
func (d *driver) readSecret(ctx context.Context, n districts.Node, name, script string) (string, error) {
	out, err := d.r.Run(ctx, n, name, script, nil)
	if err == nil {
		return out, nil
	}
	re, ok := errors.AsType[*ssh.RunError](err)
	if !ok {
		return "", err // no output in it
	}
	c := *re
	c.Stdout = ""
	return "", &c
}

// newAPI builds a client through master m and checks that its API server
// answers.
func (d *driver) newAPI(ctx context.Context, m districts.Node) (*api, error) {
	data, err := d.adminConfig(ctx, m)
	if err != nil {
		return nil, err
	}
	cfg, err := clientcmd.RESTConfigFromKubeConfig(data)
	if err != nil {
		return nil, fmt.Errorf("the admin kubeconfig: %w", err)
	}
	target := net.JoinHostPort(nodeAddress(m), strconv.Itoa(APIPort))
	cfg.Dial = func(ctx context.Context, _, _ string) (net.Conn, error) {
		return d.r.DialContext(ctx, m, "tcp", target)
	}
	// The certificate names the endpoint, whatever address the tunnel
	// reaches.
	cfg.ServerName = d.endpoint.Host
	cfg.Timeout = apiTimeout
	cfg.QPS, cfg.Burst = 50, 100
	cfg.UserAgent = "transit"
	c, err := clientset.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	rctx, cancel := context.WithTimeout(ctx, apiTimeout)
	defer cancel()
	if _, err := c.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(rctx); err != nil {
		return nil, fmt.Errorf("API server on master %s: %w", m.ID, err)
	}
	hash, err := caHash(cfg.CAData)
	if err != nil {
		return nil, err
	}
	return &api{c: c, cfg: cfg, master: m, caHash: hash}, nil
}

// client returns a client of the API server through the first master
// that answers, trying the one that answered last first.
func (d *driver) client(ctx context.Context) (*api, error) {
	d.mu.Lock()
	cur := d.api
	d.mu.Unlock()
	if cur != nil {
		return cur, nil
	}
	a, errs := d.connect(ctx, "")
	switch {
	case a != nil:
		return a, nil
	case len(errs) == 0:
		return nil, errors.New("no master is known: the cluster has not been initialised")
	}
	return nil, fmt.Errorf("no API server answered: %w", errors.Join(errs...))
}

// connect makes the client through the first known master but skip whose
// API server answers, and keeps it as the driver's client; it returns
// nil and each master's error when none answers.
func (d *driver) connect(ctx context.Context, skip string) (*api, []error) {
	d.mu.Lock()
	masters := slices.Clone(d.masters)
	d.mu.Unlock()
	var errs []error
	for _, m := range masters {
		if m.ID == skip || !hasAddress(m) {
			continue
		}
		a, err := d.newAPI(ctx, m)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		d.mu.Lock()
		d.api = a
		d.mu.Unlock()
		return a, nil
	}
	return nil, errs
}

// dropClient forgets the client through master id (it left, or stopped
// answering).
func (d *driver) dropClient(id string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.api != nil && (id == "" || d.api.master.ID == id) {
		d.api = nil
	}
}

// caHash is kubeadm's discovery-token-ca-cert-hash of the PEM CA
// certificate: sha256 of its SubjectPublicKeyInfo.
func caHash(caPEM []byte) (string, error) {
	block, _ := pem.Decode(caPEM)
	if block == nil {
		return "", errors.New("the admin kubeconfig holds no CA certificate")
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return "", fmt.Errorf("the cluster CA certificate: %w", err)
	}
	sum := sha256.Sum256(cert.RawSubjectPublicKeyInfo)
	return "sha256:" + hex.EncodeToString(sum[:]), nil
}

func hasAddress(n districts.Node) bool { return n.PublicIP != "" || n.PrivateIP != "" }
