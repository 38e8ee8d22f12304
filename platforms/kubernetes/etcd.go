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

// etcdTLS reads master m's etcd credentials (kept in memory only).
func (d *driver) etcdTLS(ctx context.Context, m districts.Node) (*tls.Config, error) {
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
	return &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}, nil
}

// etcdClient is a client of the stacked etcd at endpoint (default m's own
// member), tunnelled through master m: it reaches every member's client
// URL from m, as the members reach each other.
func (d *driver) etcdClient(m districts.Node, creds *tls.Config, endpoint string) (*clientv3.Client, error) {
	if endpoint == "" {
		endpoint = "https://" + net.JoinHostPort(nodeAddress(m), "2379")
	}
	dial := func(ctx context.Context, addr string) (net.Conn, error) {
		return d.r.DialContext(ctx, m, "tcp", addr)
	}
	return clientv3.New(clientv3.Config{
		Endpoints:   []string{endpoint},
		DialTimeout: etcdTimeout,
		TLS:         creds,
		DialOptions: []grpc.DialOption{grpc.WithContextDialer(dial)},
		Logger:      zap.NewNop(),
	})
}

// withEtcdMembers lists etcd's members through master m and hands the
// list, a client and m's credentials to fn (each request of fn bounded
// by etcdTimeout through the context it gets).
func (d *driver) withEtcdMembers(ctx context.Context, m districts.Node,
	fn func(ctx context.Context, c *clientv3.Client, creds *tls.Config, members []*etcdserverpb.Member) error,
) error {
	creds, err := d.etcdTLS(ctx, m)
	if err != nil {
		return err
	}
	c, err := d.etcdClient(m, creds, "")
	if err != nil {
		return err
	}
	defer func() { _ = c.Close() }()
	lctx, cancel := context.WithTimeout(ctx, etcdTimeout)
	resp, err := c.MemberList(lctx)
	cancel()
	if err != nil {
		return fmt.Errorf("etcd member list through master %s: %w", m.ID, err)
	}
	return fn(ctx, c, creds, resp.Members)
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
	var out []etcdMember
	err := d.withEtcdMembers(ctx, m, func(ctx context.Context, c *clientv3.Client, _ *tls.Config, members []*etcdserverpb.Member) error {
		for _, mem := range members {
			em := fromPB(mem)
			if len(mem.ClientURLs) > 0 {
				sctx, cancel := context.WithTimeout(ctx, etcdTimeout/2)
				_, err := c.Status(sctx, strings.TrimPrefix(mem.ClientURLs[0], "https://"))
				cancel()
				em.Healthy = err == nil
			}
			out = append(out, em)
		}
		return nil
	})
	return out, err
}

// removeEtcdMember removes the members of node n (by name, or by the
// address of a member that never started and so has no name), through
// master m. Removing none is no error.
func (d *driver) removeEtcdMember(ctx context.Context, m districts.Node, n districts.Node) error {
	return d.withEtcdMembers(ctx, m, func(ctx context.Context, c *clientv3.Client, _ *tls.Config, members []*etcdserverpb.Member) error {
		var errs []error
		for _, mem := range members {
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
	})
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
	return h != "" && (h == n.PrivateIP || h == n.PublicIP || h == n.MeshIP)
}

// handOverLeadership makes another voting member etcd's leader when node
// n's member leads, so its removal costs no election (requests in flight
// during one fail with "leader changed"). Through master m; n need not
// answer (then it leads nobody soon anyway).
func (d *driver) handOverLeadership(ctx context.Context, m, n districts.Node) error {
	return d.withEtcdMembers(ctx, m, func(ctx context.Context, c *clientv3.Client, creds *tls.Config, members []*etcdserverpb.Member) error {
		lctx, cancel := context.WithTimeout(ctx, etcdTimeout)
		defer cancel()
		var leaving *etcdserverpb.Member
		var to uint64
		for _, mem := range members {
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
		lc, err := d.etcdClient(m, creds, leaving.ClientURLs[0])
		if err != nil {
			return err
		}
		defer func() { _ = lc.Close() }()
		if _, err := lc.MoveLeader(lctx, to); err != nil {
			return fmt.Errorf("move etcd's leadership away from node %s: %w", n.ID, err)
		}
		return nil
	})
}
