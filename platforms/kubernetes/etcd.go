package kubernetes

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/cloudtransit/transit/districts"
)

// etcdTimeout bounds one etcd request.
const etcdTimeout = 10 * time.Second

// etcdCredsScript prints a master's etcd CA and the API server's etcd
// client certificate and key (kubeadm's stacked etcd trusts any
// certificate of its CA). They stay in memory.
const etcdCredsScript = `cat /etc/kubernetes/pki/etcd/ca.crt /etc/kubernetes/pki/apiserver-etcd-client.crt /etc/kubernetes/pki/apiserver-etcd-client.key`

// etcdMember is a member of the stacked etcd as etcd reports it.
type etcdMember struct {
	ID      uint64
	Name    string // the master's node name (transit's node id); empty until it started
	PeerURL string
	Learner bool
	// Healthy says the member answered a status request.
	Healthy bool
}

// host is the address of the member's peer URL.
func (m etcdMember) host() string {
	u, err := url.Parse(m.PeerURL)
	if err != nil {
		return ""
	}
	return u.Hostname()
}

// etcd is a client of the stacked etcd, tunnelled through master m: it
// reaches every member's client URL from m, as the members reach each
// other.
func (d *driver) etcd(ctx context.Context, m districts.Node, endpoints ...string) (*clientv3.Client, error) {
	out, err := d.readSecret(ctx, m, "read the etcd client credentials", etcdCredsScript)
	if err != nil {
		return nil, fmt.Errorf("etcd credentials from master %s: %w", m.ID, err)
	}
	caPEM, certPEM, keyPEM, err := splitPEM(out)
	if err != nil {
		return nil, fmt.Errorf("etcd credentials from master %s: %w", m.ID, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("master %s: the etcd CA is not a certificate", m.ID)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("master %s: the etcd client certificate: %w", m.ID, err)
	}
	dial := func(ctx context.Context, addr string) (net.Conn, error) {
		return d.r.DialContext(ctx, m, "tcp", addr)
	}
	if len(endpoints) == 0 {
		endpoints = []string{"https://" + net.JoinHostPort(nodeAddress(m), "2379")}
	}
	return clientv3.New(clientv3.Config{
		Endpoints:   endpoints,
		DialTimeout: etcdTimeout,
		TLS:         &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12},
		DialOptions: []grpc.DialOption{grpc.WithContextDialer(dial)},
		Logger:      zap.NewNop(),
	})
}

// splitPEM splits the CA, certificate and key etcdCredsScript printed.
func splitPEM(out string) (ca, cert, key []byte, err error) {
	const begin = "-----BEGIN "
	var blocks []string
	for _, part := range strings.Split(out, begin)[1:] {
		blocks = append(blocks, begin+part)
	}
	if len(blocks) != 3 {
		return nil, nil, nil, fmt.Errorf("want 3 PEM blocks (CA, certificate, key), got %d", len(blocks))
	}
	return []byte(blocks[0]), []byte(blocks[1]), []byte(blocks[2]), nil
}

// etcdMembers lists the stacked etcd's members and asks each for its
// status.
func (d *driver) etcdMembers(ctx context.Context, m districts.Node) ([]etcdMember, error) {
	c, err := d.etcd(ctx, m)
	if err != nil {
		return nil, err
	}
	defer func() { _ = c.Close() }()
	lctx, cancel := context.WithTimeout(ctx, etcdTimeout)
	defer cancel()
	resp, err := c.MemberList(lctx)
	if err != nil {
		return nil, fmt.Errorf("etcd member list through master %s: %w", m.ID, err)
	}
	var out []etcdMember
	for _, mem := range resp.Members {
		em := fromPB(mem)
		if len(mem.ClientURLs) > 0 {
			sctx, cancel := context.WithTimeout(ctx, etcdTimeout/2)
			_, err := c.Status(sctx, strings.TrimPrefix(mem.ClientURLs[0], "https://"))
			cancel()
			em.Healthy = err == nil
		}
		out = append(out, em)
	}
	return out, nil
}

// removeEtcdMember removes the members of node n (by name, or by the
// address of a member that never started and so has no name), through
// master m. Removing none is no error.
func (d *driver) removeEtcdMember(ctx context.Context, m districts.Node, n districts.Node) error {
	c, err := d.etcd(ctx, m)
	if err != nil {
		return err
	}
	defer func() { _ = c.Close() }()
	lctx, cancel := context.WithTimeout(ctx, etcdTimeout)
	defer cancel()
	resp, err := c.MemberList(lctx)
	if err != nil {
		return fmt.Errorf("etcd member list through master %s: %w", m.ID, err)
	}
	var errs []error
	for _, mem := range resp.Members {
		if !memberOf(fromPB(mem), n) {
			continue
		}
		rctx, cancel := context.WithTimeout(ctx, etcdTimeout)
		_, err := c.MemberRemove(rctx, mem.ID)
		cancel()
		if err != nil && !strings.Contains(err.Error(), "member not found") {
			errs = append(errs, fmt.Errorf("remove etcd member %x of node %s: %w", mem.ID, n.ID, err))
		}
	}
	return errors.Join(errs...)
}

// fromPB is etcd's member list entry as an etcdMember (not yet asked
// for its health).
func fromPB(mem *etcdserverpb.Member) etcdMember {
	em := etcdMember{ID: mem.ID, Name: mem.Name, Learner: mem.IsLearner}
	if len(mem.PeerURLs) > 0 {
		em.PeerURL = mem.PeerURLs[0]
	}
	return em
}

// memberOf says whether etcd member em is node n's: by name, or, for a
// member added but never started (no name yet), by its peer address.
func memberOf(em etcdMember, n districts.Node) bool {
	if em.Name != "" {
		return em.Name == n.ID
	}
	h := em.host()
	return h != "" && (h == n.PrivateIP || h == n.PublicIP)
}

// handOverLeadership makes another voting member etcd's leader when node
// n's member leads, so its removal costs no election (requests in flight
// during one fail with "leader changed"). Through master m; n need not
// answer (then it leads nobody soon anyway).
func (d *driver) handOverLeadership(ctx context.Context, m, n districts.Node) error {
	c, err := d.etcd(ctx, m)
	if err != nil {
		return err
	}
	defer func() { _ = c.Close() }()
	lctx, cancel := context.WithTimeout(ctx, etcdTimeout)
	defer cancel()
	list, err := c.MemberList(lctx)
	if err != nil {
		return err
	}
	var leaving *etcdserverpb.Member
	var to uint64
	for _, mem := range list.Members {
		switch {
		case memberOf(fromPB(mem), n):
			leaving = mem
		case !mem.IsLearner && to == 0 && len(mem.ClientURLs) > 0:
			if _, err := c.Status(lctx, strings.TrimPrefix(mem.ClientURLs[0], "https://")); err == nil {
				to = mem.ID
			}
		}
	}
	if leaving == nil || to == 0 || len(leaving.ClientURLs) == 0 {
		return nil
	}
	st, err := c.Status(lctx, strings.TrimPrefix(leaving.ClientURLs[0], "https://"))
	if err != nil || st.Leader != leaving.ID {
		return nil
	}
	// MoveLeader must reach the leader itself.
	lc, err := d.etcd(ctx, m, leaving.ClientURLs[0])
	if err != nil {
		return err
	}
	defer func() { _ = lc.Close() }()
	if _, err := lc.MoveLeader(lctx, to); err != nil {
		return fmt.Errorf("move etcd's leadership away from node %s: %w", n.ID, err)
	}
	return nil
}
