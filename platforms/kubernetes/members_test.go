package kubernetes

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/cloudtransit/transit/districts"
	"github.com/cloudtransit/transit/platforms/ssh"
	"github.com/cloudtransit/transit/provider"
)

// noAPIRunner is a cluster whose API server never answers: each node
// either answers the membership probe with what it holds or cannot be
// reached.
type noAPIRunner struct {
	noTransfers
	mu    sync.Mutex
	holds map[string]string // node id -> "none" or "member"; missing: unreachable
}

func (r *noAPIRunner) Run(_ context.Context, n districts.Node, name, script string, _ []byte) (string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	out, ok := r.holds[n.ID]
	if !ok {
		return "", &ssh.RunError{Target: ssh.NodeTarget(n), Name: name, ExitStatus: -1, Err: ssh.ErrUnreachable}
	}
	if script != membershipScript {
		return "", errors.New("the API server is down: " + name + " fails")
	}
	return out + "\n", nil
}

// noTransfers is a test runner's node that takes no upload and no
// connection: the runner serves scripts only.
type noTransfers struct{}

func (noTransfers) Upload(context.Context, districts.Node, string, fs.FileMode, io.Reader, int64) error {
	return errors.New("no uploads")
}

func (noTransfers) DialContext(context.Context, districts.Node, string, string) (net.Conn, error) {
	return nil, errors.New("connection refused")
}

// Members says "no platform" only when every node answered that it holds
// none; otherwise the platform is unreachable, naming the masters that
// did not answer or hold a control plane that does not serve.
func TestMembersWithoutAPIServer(t *testing.T) {
	m1 := districts.Node{ID: "k-master-1", Role: districts.RoleMaster, PrivateIP: "10.0.0.2"}
	m2 := districts.Node{ID: "k-master-2", Role: districts.RoleMaster, PrivateIP: "10.0.0.3"}
	w1 := districts.Node{ID: "k-worker-1", Role: districts.RoleWorker, PrivateIP: "10.0.0.4"}
	gone := districts.Node{ID: "k-worker-2", Role: districts.RoleWorker} // machine gone: no address
	for _, tc := range []struct {
		name    string
		nodes   []districts.Node
		holds   map[string]string
		none    bool
		masters []string
		silent  []string
		lost    bool
	}{
		{name: "fresh machines", nodes: []districts.Node{m1, w1}, holds: map[string]string{"k-master-1": "none", "k-worker-1": "none"}, none: true},
		{name: "a master holds a control plane", nodes: []districts.Node{m1, w1}, holds: map[string]string{"k-master-1": "member", "k-worker-1": "none"}, masters: []string{"k-master-1"}},
		{name: "a master does not answer", nodes: []districts.Node{m1, m2, w1}, holds: map[string]string{"k-master-2": "none", "k-worker-1": "none"}, masters: []string{"k-master-1"}},
		{name: "a master's machine is gone", nodes: []districts.Node{{ID: "k-master-3", Role: districts.RoleMaster}, m1, w1}, holds: map[string]string{"k-master-1": "none", "k-worker-1": "member"}, masters: []string{"k-master-3"}},
		{name: "workers belong to a cluster no master serves", nodes: []districts.Node{m1, w1}, holds: map[string]string{"k-master-1": "none", "k-worker-1": "member"}, lost: true},
		{name: "no master left, a worker belongs to a cluster", nodes: []districts.Node{w1}, holds: map[string]string{"k-worker-1": "member"}, lost: true},
		// Silence proves nothing: whether a cluster formed is unknown.
		{name: "the masters hold nothing, a worker does not answer", nodes: []districts.Node{m1, m2, w1}, holds: map[string]string{"k-master-1": "none", "k-master-2": "none"}, silent: []string{"k-worker-1"}},
		{name: "a worker belongs to a cluster, another does not answer", nodes: []districts.Node{m1, w1, gone}, holds: map[string]string{"k-master-1": "none", "k-worker-1": "member"}, silent: []string{"k-worker-2"}},
		{name: "a node whose machine is gone cannot say", nodes: []districts.Node{m1, gone}, holds: map[string]string{"k-master-1": "none"}, silent: []string{"k-worker-2"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &noAPIRunner{holds: tc.holds}
			d := newDriver(districts.Cluster{ID: "k"}, Options{}, r)
			_, err := d.Members(context.Background(), tc.nodes)
			if tc.none {
				if !errors.Is(err, provider.ErrNoPlatform) {
					t.Fatalf("Members = %v, want no platform", err)
				}
				return
			}
			var ue *provider.UnreachableError
			if !errors.As(err, &ue) || errors.Is(err, provider.ErrNoPlatform) {
				t.Fatalf("Members = %v, want unreachable and never no platform", err)
			}
			if !slices.Equal(ue.Masters, tc.masters) {
				t.Errorf("unreachable masters %v, want %v (%v)", ue.Masters, tc.masters, err)
			}
			if !slices.Equal(ue.Silent, tc.silent) {
				t.Errorf("silent nodes %v, want %v (%v)", ue.Silent, tc.silent, err)
			}
			if ue.Lost() != tc.lost {
				t.Errorf("Lost() = %t, want %t (%v)", ue.Lost(), tc.lost, err)
			}
			if strings.Contains(err.Error(), "BEGIN") {
				t.Errorf("credentials in the error: %v", err)
			}
		})
	}
}

// A master whose machine is gone since the driver last asked it is not
// asked again: with no master left among the nodes and a worker holding
// the cluster, the cluster is lost, not "unreachable through a master
// that is not there".
func TestMembersForgetsMastersWhoseMachineIsGone(t *testing.T) {
	m1 := districts.Node{ID: "k-master-1", Role: districts.RoleMaster, PrivateIP: "10.0.0.2"}
	w1 := districts.Node{ID: "k-worker-1", Role: districts.RoleWorker, PrivateIP: "10.0.0.4"}
	r := &recordingRunner{noAPIRunner: noAPIRunner{holds: map[string]string{"k-worker-1": "member"}}}
	d := newDriver(districts.Cluster{ID: "k"}, Options{}, r)
	d.addMaster(m1) // asked in an earlier round
	_, err := d.Members(t.Context(), []districts.Node{w1})
	ue, ok := errors.AsType[*provider.UnreachableError](err)
	if !ok || !ue.Lost() {
		t.Fatalf("Members = %v, want a lost cluster", err)
	}
	if slices.Contains(r.asked(), m1.ID) {
		t.Errorf("the gone master was asked: %v", r.asked())
	}
}

type recordingRunner struct {
	noAPIRunner
	mu  sync.Mutex
	ran []string
}

func (r *recordingRunner) Run(ctx context.Context, n districts.Node, name, script string, stdin []byte) (string, error) {
	r.mu.Lock()
	r.ran = append(r.ran, n.ID)
	r.mu.Unlock()
	return r.noAPIRunner.Run(ctx, n, name, script, stdin)
}

func (r *recordingRunner) asked() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.ran)
}

// A driver that has not listed the members yet (a new run whose first
// step is a quorum question) asks the masters among the nodes it is
// given, instead of refusing for want of a known master.
func TestMayRemoveMasterAsksTheMastersAmongNodes(t *testing.T) {
	m1 := districts.Node{ID: "k-master-1", Role: districts.RoleMaster, PrivateIP: "10.0.0.2"}
	m2 := districts.Node{ID: "k-master-2", Role: districts.RoleMaster, PrivateIP: "10.0.0.3"}
	r := &recordingRunner{noAPIRunner: noAPIRunner{holds: map[string]string{"k-master-1": "member", "k-master-2": "member"}}}
	d := newDriver(districts.Cluster{ID: "k"}, Options{}, r)
	err := d.MayRemoveMaster(t.Context(), m2, []districts.Node{m1, m2})
	if !errors.Is(err, provider.ErrQuorum) {
		t.Fatalf("MayRemoveMaster with no API server = %v, want ErrQuorum", err)
	}
	if !slices.Contains(r.asked(), m1.ID) {
		t.Errorf("the other master was not asked: %v", r.asked())
	}
}
