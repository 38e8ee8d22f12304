package kubernetes

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"

	"github.com/cloudtransit/transit/districts"
	"github.com/cloudtransit/transit/platforms/ssh"
	"github.com/cloudtransit/transit/provider"
)

// Labels and annotations transit keeps on Nodes.
const (
	// annotationManaged lists the label keys transit set, so labels a
	// person set by hand are left alone.
	annotationManaged = "transit.io/managed-labels"
	labelRolePrefix   = "node-role.kubernetes.io/"
	labelControlPlane = labelRolePrefix + "control-plane" // kubeadm's
	// annotationPublicIP makes flannel send a node's VXLAN traffic to its
	// public address, where it differs from the node's own.
	annotationPublicIP = "flannel.alpha.coreos.com/public-ip-overwrite"
	// labelNetworkPending keeps the pod network off a node until transit
	// has set what flannel reads as it starts.
	//
	// flanneld reads annotationPublicIP once, when it first takes its
	// lease, so the annotation must be on the Node before flannel's pod
	// starts there; a later one needs flanneld restarted. The kubelet
	// registers the Node, and the kubelet cannot register annotations
	// (there is no such flag, nor a kubeadm field), so every node
	// registers with this label instead (its kubelet's --node-labels:
	// kubeadm's nodeRegistration), flannel's DaemonSet runs only on nodes
	// without it, and transit removes it, in the same write that sets the
	// annotation, right after init or join (releaseNetwork). A label
	// rather than a NoSchedule taint: a toleration cannot say "every taint
	// but one", so flannel would have to list the taints it tolerates,
	// and a taint of the operator's own would keep the pod network off
	// that node; other pods need no taint, as the node stays NotReady
	// until flannel writes its CNI configuration. The kubelet sets
	// --node-labels only when it creates its Node, so the label does not
	// come back after a restart.
	labelNetworkPending = "transit.io/pod-network-pending"
)

// Members reports the cluster's Nodes as the API server sees them, with
// each master's etcd membership deciding its role (see provider.Platform).
// It asks the masters among nodes only: a master known from earlier whose
// machine is gone since (not among nodes, or without an address) is
// forgotten, and so is a client through it.
func (d *driver) Members(ctx context.Context, nodes []districts.Node) ([]provider.Member, error) {
	d.mu.Lock()
	d.nodes = slices.Clone(nodes)
	d.mu.Unlock()
	d.askMastersAmong(nodes)
	a, err := d.client(ctx)
	if err != nil {
		return nil, d.noAPI(ctx, nodes, err)
	}
	list, err := a.c.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		d.dropClient(a.master.ID)
		return nil, &provider.UnreachableError{Masters: []string{a.master.ID}, Err: err}
	}
	etcdMembers, err := d.etcdMembers(ctx, a.master)
	if err != nil {
		return nil, &provider.UnreachableError{Masters: []string{a.master.ID}, Err: err}
	}
	return membersOf(list.Items, etcdMembers), nil
}

// membersOf maps the API server's Nodes and etcd's members onto transit's
// members. A Node is a master when it is a control-plane node: it has an
// etcd member (by name, or by address for a member that never started),
// voting or still a learner, or kubeadm's control-plane label. It votes
// when its member is a voter, and a master is ready only while its member
// answers. An etcd member whose Node is gone (its machine deleted behind
// transit's back) still counts for quorum: it is a member, down. A
// member's ProviderID is its Node's spec.providerID, its addresses the
// Node's InternalIP and ExternalIP (for a member without Node, its etcd
// peer address).
func membersOf(nodes []corev1.Node, etcd []etcdMember) []provider.Member {
	var out []provider.Member
	seen := map[uint64]bool{}
	names := map[string]bool{}
	for i := range nodes {
		kn := &nodes[i]
		m := provider.Member{NodeID: kn.Name, Role: districts.RoleWorker, Ready: nodeReady(kn), Draining: kn.Spec.Unschedulable,
			Labels: tagLabels(kn), ProviderID: kn.Spec.ProviderID, Addresses: nodeAddresses(kn)}
		names[kn.Name] = true
		em, ok := etcdMemberOf(etcd, kn.Name, m.Addresses)
		switch {
		case ok:
			seen[em.ID] = true
			m.Role = districts.RoleMaster
			m.Voter = !em.Learner
			m.Ready = m.Ready && em.Healthy
		case hasLabel(kn, labelControlPlane):
			// A control-plane node without an etcd member (a join not
			// through yet, a removal half done): a master with no vote.
			m.Role = districts.RoleMaster
		}
		out = append(out, m)
	}
	for _, em := range etcd {
		if em.Name == "" || seen[em.ID] || names[em.Name] {
			continue
		}
		names[em.Name] = true
		m := provider.Member{NodeID: em.Name, Role: districts.RoleMaster, Voter: !em.Learner}
		if h := em.host(); h != "" {
			m.Addresses = []string{h}
		}
		out = append(out, m)
	}
	return out
}

// etcdMemberOf finds the etcd member of the Node named name with addrs:
// by name, or, for a member that never started (no name yet), by its
// peer address. Of several, a voter wins over a learner, then a healthy
// one.
func etcdMemberOf(etcd []etcdMember, name string, addrs []string) (etcdMember, bool) {
	best, score := etcdMember{}, -1
	for _, em := range etcd {
		if em.Name != name && (em.Name != "" || !slices.Contains(addrs, em.host())) {
			continue
		}
		s := 0
		if !em.Learner {
			s += 2
		}
		if em.Healthy {
			s++
		}
		if s > score {
			best, score = em, s
		}
	}
	return best, score >= 0
}

// nodeAddresses are a Node's InternalIP and ExternalIP addresses, in the
// order its kubelet reports them.
func nodeAddresses(kn *corev1.Node) []string {
	var out []string
	for _, a := range kn.Status.Addresses {
		if (a.Type == corev1.NodeInternalIP || a.Type == corev1.NodeExternalIP) && a.Address != "" && !slices.Contains(out, a.Address) {
			out = append(out, a.Address)
		}
	}
	return out
}

func hasLabel(kn *corev1.Node, key string) bool {
	_, ok := kn.Labels[key]
	return ok
}

// Version is the API server's version, as it reports it.
func (d *driver) Version(ctx context.Context) (string, error) {
	a, err := d.client(ctx)
	if err != nil {
		return "", err
	}
	v, err := a.c.Discovery().ServerVersion()
	if err != nil {
		return "", err
	}
	return v.GitVersion, nil
}

// noAPI is Members' answer when no API server answered: no platform only
// if every node answered that it holds no trace of one. Otherwise the
// masters that did not answer (or have no address: they cannot be asked),
// or hold a control plane that does not serve, are named in Masters; when
// every master answered that it holds nothing, the other nodes that did
// not answer are named in Silent (they may hold a cluster); only when
// every node answered and some hold a cluster no master serves is none
// named: it is lost.
func (d *driver) noAPI(ctx context.Context, nodes []districts.Node, apiErr error) error {
	var mu sync.Mutex
	member := false
	var masters, silent []string
	errs := []error{apiErr}
	var wg sync.WaitGroup
	for _, n := range nodes {
		isMaster := n.Role == districts.RoleMaster
		if !hasAddress(n) {
			if isMaster {
				masters = append(masters, n.ID)
			} else {
				silent = append(silent, n.ID)
			}
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			out, err := d.r.Run(ctx, n, "look for a kubernetes membership", membershipScript, nil)
			mu.Lock()
			defer mu.Unlock()
			answeredNone := err == nil && strings.TrimSpace(out) == "none"
			if err != nil {
				errs = append(errs, err)
			}
			switch {
			case isMaster && !answeredNone:
				masters = append(masters, n.ID)
			case err != nil:
				silent = append(silent, n.ID)
			case !answeredNone:
				member = true
			}
		}()
	}
	wg.Wait()
	slices.Sort(masters)
	slices.Sort(silent)
	switch {
	case len(masters) > 0:
		return &provider.UnreachableError{Masters: masters, Err: errors.Join(errs...)}
	case len(silent) > 0:
		return &provider.UnreachableError{Silent: silent, Err: errors.Join(errs...)}
	case member:
		return &provider.UnreachableError{Err: apiErr}
	}
	return provider.ErrNoPlatform
}

// membershipScript prints "none" on a node that holds no trace of a
// cluster: no kubelet credentials and no control plane.
const membershipScript = `if [ -e /etc/kubernetes/kubelet.conf ] || [ -e /etc/kubernetes/admin.conf ] || [ -e /etc/kubernetes/manifests/kube-apiserver.yaml ]; then echo member; else echo none; fi`

// tagLabels are the labels transit set from the node's tags: the keys it
// owns, without the role label it adds itself.
func tagLabels(kn *corev1.Node) map[string]string {
	out := map[string]string{}
	for _, k := range strings.Split(kn.Annotations[annotationManaged], ",") {
		if v, ok := kn.Labels[k]; ok && k != "" && !strings.HasPrefix(k, labelRolePrefix) {
			out[k] = v
		}
	}
	// A node whose pod network transit has not released (its kubelet
	// registered it again, a join cut short) differs from its tags: the
	// loop labels it, which releases it.
	if v, ok := kn.Labels[labelNetworkPending]; ok {
		out[labelNetworkPending] = v
	}
	return out
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// addMaster adds m to the known masters, after the ones known.
func (d *driver) addMaster(m districts.Node) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for i, x := range d.masters {
		if x.ID == m.ID {
			d.masters[i] = m // its addresses may have changed
			return
		}
	}
	d.masters = append(d.masters, m)
}

// Join adds n as a worker, or as a further master (stacked etcd). A node
// the API server lists already is joined; one holding leftovers of an
// interrupted join (a kubelet config, an etcd member that never started)
// has them removed first. A kubeadm join that failed because the API
// server did not answer in time is tried again, whole, up to joinAttempts
// times: kubeadm gives some of its calls a single 10 s try, which a
// loaded control plane misses (CI run 39: "unable to fetch the
// kubeadm-config ConfigMap: context deadline exceeded").
//
// Masters join one at a time, workers in parallel: etcd grows by one
// member at a time (it takes one learner; kubeadm retries the second's
// addition for under a minute), and each addition loads the members
// while the new one catches up. Two masters joining at once on a busy
// control plane failed their etcd phase, and cost elections while the
// API server served. Cluster API's control plane scales up one machine
// at a time for the same reason.
func (d *driver) Join(ctx context.Context, n districts.Node) error {
	if n.Role == districts.RoleMaster {
		select {
		case d.masterJoin <- struct{}{}:
			defer func() { <-d.masterJoin }()
		case <-ctx.Done():
			return fmt.Errorf("join node %s: waited for another master's join: %w", n.ID, ctx.Err())
		}
	}
	for attempt := 1; ; attempt++ {
		err := d.join(ctx, n)
		if err == nil || attempt == joinAttempts || !apiTimedOut(err) {
			return err
		}
		d.opts.Logger.Warn("kubeadm join: the API server did not answer in time; joining again", "node", n.ID, "attempt", attempt, "err", err)
		if d.opts.Clock.Sleep(ctx, time.Duration(attempt)*joinRetryPause) != nil {
			return err
		}
	}
}

// joinAttempts bounds how often Join runs kubeadm join when the API
// server did not answer it in time; joinRetryPause, times the attempt,
// is the pause between.
const (
	joinAttempts   = 3
	joinRetryPause = 5 * time.Second
)

// apiTimedOut says err is kubeadm's own failure (it exited 1) for want of
// a timely answer from the API server or etcd, or for a new master's etcd
// member that had not caught up with the leader when kubeadm stopped
// waiting to promote it (2 minutes; a loaded machine, e2e run 46): a busy
// control plane, not a node kubeadm's preflight refused, which another
// try would not change. The next try starts over (undoHalfJoin, the
// learner removed).
func apiTimedOut(err error) bool {
	var re *ssh.RunError
	if !errors.As(err, &re) || re.ExitStatus != 1 {
		return false
	}
	for _, s := range []string{"context deadline exceeded", "Client.Timeout exceeded", "TLS handshake timeout", "i/o timeout", "etcdserver: request timed out", "unable to return a response in the time allotted",
		"etcdserver: can only promote a learner member which is in sync with leader"} {
		if strings.Contains(re.Stderr, s) {
			return true
		}
	}
	return false
}

func (d *driver) join(ctx context.Context, n districts.Node) error {
	a, err := d.client(ctx)
	if err != nil {
		return fmt.Errorf("join node %s: %w", n.ID, err)
	}
	master := n.Role == districts.RoleMaster
	kn, err := a.c.CoreV1().Nodes().Get(ctx, n.ID, metav1.GetOptions{})
	if err == nil && master && !hasLabel(kn, labelControlPlane) {
		if err := d.undoHalfJoin(ctx, a, n); err != nil {
			return fmt.Errorf("join node %s: %w", n.ID, err)
		}
		kn, err = a.c.CoreV1().Nodes().Get(ctx, n.ID, metav1.GetOptions{})
	}
	switch {
	case err == nil:
		if cp := hasLabel(kn, labelControlPlane); cp != master {
			return fmt.Errorf("join node %s: it is a %s of the cluster; kubeadm cannot change a node's role in place: remove the node", n.ID, roleOf(cp))
		}
		// A join cut short after the kubelet registered the Node.
		if err := d.releaseNetwork(ctx, a, n); err != nil {
			return fmt.Errorf("join node %s: %w", n.ID, err)
		}
		if master {
			d.addMaster(n)
			return d.pinEndpoint(ctx, "")
		}
		return nil
	case !apierrors.IsNotFound(err):
		return fmt.Errorf("join node %s: %w", n.ID, err)
	}
	if master {
		if err := d.removeEtcdMember(ctx, a.master, n); err != nil {
			return fmt.Errorf("join node %s: remove the etcd member of an earlier attempt: %w", n.ID, err)
		}
	}
	systemd, err := d.systemd(ctx, n)
	if err != nil {
		return err
	}
	if d.endpoint.Managed {
		if _, err := d.r.Run(ctx, n, "pin the control-plane endpoint", hostsScript(d.endpoint.Host, d.masterAddrs(n, "")), nil); err != nil {
			return err
		}
	}
	sec := joinSecrets{caHash: a.caHash}
	if sec.token, err = createToken(ctx, a, n.ID); err != nil {
		return fmt.Errorf("join node %s: %w", n.ID, err)
	}
	if master {
		if err := addCertSANs(ctx, a, n); err != nil {
			return fmt.Errorf("join node %s: %w", n.ID, err)
		}
		if sec.certificateKey, err = d.certificateKey(ctx, a.master); err != nil {
			return fmt.Errorf("join node %s: %w", n.ID, err)
		}
	}
	cfg := d.settings(n, systemd).joinConfig(sec, master)
	_, err = d.r.Run(ctx, n, "kubeadm join", joinScript(), []byte(cfg))
	// The token served this join; it would expire by itself, but need
	// not wait for that.
	id, _, _ := strings.Cut(sec.token, ".")
	if derr := a.c.CoreV1().Secrets(metav1.NamespaceSystem).Delete(ctx, "bootstrap-token-"+id, metav1.DeleteOptions{}); derr != nil && !apierrors.IsNotFound(derr) {
		d.opts.Logger.Warn("the join's bootstrap token was not deleted; it expires by itself", "node", n.ID, "err", derr)
	}
	if err != nil {
		return err
	}
	// The kubelet registered the Node (kubeadm waited for its TLS
	// bootstrap): flannel may start once its annotation is there.
	if err := d.releaseNetwork(ctx, a, n); err != nil {
		return fmt.Errorf("join node %s: %w", n.ID, err)
	}
	d.awaitReady(ctx, a, n)
	if master {
		d.addMaster(n)
		return d.pinEndpoint(ctx, "")
	}
	return nil
}

// undoHalfJoin resets master n when a `kubeadm join --control-plane` was
// cut short on it after its kubelet registered the Node and before kubeadm
// made it a master (etcd member, control-plane label: the last phase),
// say etcd did not answer in time on a loaded control plane. Its Node
// looks like a worker's; the node holds a control plane's manifests. The
// node is reset (the kubelet stopped, so it cannot register the Node
// again) and its Node deleted: the join then starts over. A node without
// those manifests joined as a worker, and is left for the caller to
// refuse.
func (d *driver) undoHalfJoin(ctx context.Context, a *api, n districts.Node) error {
	out, err := d.r.Run(ctx, n, "reset a half-joined master", resetHalfJoinedMasterScript, nil)
	if err != nil {
		return err
	}
	if !strings.Contains(out, "reset") {
		return nil
	}
	d.opts.Logger.Warn("an earlier join left a master half made (its Node registered, not a control plane); reset, joining again", "node", n.ID)
	if err := a.c.CoreV1().Nodes().Delete(ctx, n.ID, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete the Node of a half-joined master: %w", err)
	}
	return nil
}

// readyWait bounds how long a join waits for its Node to be Ready.
const readyWait = time.Minute

// awaitReady waits, bounded, until the API server reports n's Node Ready
// (its pod network up): a node that joined is of use once it is, and the
// join's time is then what the node cost. One that is not Ready by then
// is the loop's to wait for and report; the join went through.
func (d *driver) awaitReady(ctx context.Context, a *api, n districts.Node) {
	ctx, cancel := context.WithTimeout(ctx, readyWait)
	defer cancel()
	for {
		kn, err := a.c.CoreV1().Nodes().Get(ctx, n.ID, metav1.GetOptions{})
		if err == nil && nodeReady(kn) {
			return
		}
		if d.opts.Clock.Sleep(ctx, d.opts.PollInterval/2) != nil {
			d.opts.Logger.Info("joined, not Ready yet", "node", n.ID, "waited", readyWait)
			return
		}
	}
}

func roleOf(controlPlane bool) string {
	if controlPlane {
		return "master"
	}
	return "worker"
}

// tokenChars are a bootstrap token's alphabet.
const tokenChars = "abcdefghijklmnopqrstuvwxyz0123456789"

// tokenTTL bounds a join token's life: one join.
const tokenTTL = 15 * time.Minute

// createToken makes a bootstrap token for one join, as `kubeadm token
// create` does: a Secret in kube-system the API server authenticates
// kubelets' TLS bootstrap with. It expires by itself.
func createToken(ctx context.Context, a *api, node string) (string, error) {
	id, secret := randomString(6), randomString(16)
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "bootstrap-token-" + id, Namespace: metav1.NamespaceSystem},
		Type:       corev1.SecretTypeBootstrapToken,
		StringData: map[string]string{
			"description":                    "transit: join of node " + node,
			"token-id":                       id,
			"token-secret":                   secret,
			"expiration":                     time.Now().Add(tokenTTL).UTC().Format(time.RFC3339),
			"usage-bootstrap-authentication": "true",
			"usage-bootstrap-signing":        "true",
			"auth-extra-groups":              "system:bootstrappers:kubeadm:default-node-token",
		},
	}
	if _, err := a.c.CoreV1().Secrets(metav1.NamespaceSystem).Create(ctx, s, metav1.CreateOptions{}); err != nil {
		return "", fmt.Errorf("create a bootstrap token: %w", err)
	}
	return id + "." + secret, nil
}

func randomString(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	for i := range b {
		b[i] = tokenChars[int(b[i])%len(tokenChars)]
	}
	return string(b)
}

// certKeyLife is how long an upload of the control-plane certificates
// serves joins: kubeadm deletes them after two hours.
const certKeyLife = time.Hour

// certificateKey returns the key of the control-plane certificates
// uploaded for joining masters, uploading them first unless this run
// did within certKeyLife. Masters joining at once share one upload: a
// second upload would replace the certificates under a new key while the
// first join still downloads them ("message authentication failed").
func (d *driver) certificateKey(ctx context.Context, m districts.Node) (string, error) {
	d.certs.Lock()
	defer d.certs.Unlock()
	if d.certKey != "" && d.opts.Clock.Now().Sub(d.certKeyAt) < certKeyLife {
		return d.certKey, nil
	}
	key, err := d.uploadCerts(ctx, m)
	if err != nil {
		return "", err
	}
	d.certKey, d.certKeyAt = key, d.opts.Clock.Now()
	return key, nil
}

// uploadCerts has master m upload the control-plane certificates,
// encrypted with a fresh key (kubeadm deletes them after two hours), and
// returns the key. The key reaches m in a 0600 file over stdin.
func (d *driver) uploadCerts(ctx context.Context, m districts.Node) (string, error) {
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	hexKey := fmt.Sprintf("%x", key)
	cfg := "apiVersion: kubeadm.k8s.io/v1beta4\nkind: InitConfiguration\ncertificateKey: " + q(hexKey) + "\n" +
		"nodeRegistration:\n  name: " + q(m.ID) + "\n  criSocket: " + q(criSocket) + "\n---\n" + d.settings(m, false).clusterConfig()
	if _, err := d.r.Run(ctx, m, "kubeadm upload-certs", uploadCertsScript, []byte(cfg)); err != nil {
		return "", err
	}
	return hexKey, nil
}

const uploadCertsScript = `set -eu
` + shPath + `
umask 077
f=$(mktemp)
trap 'rm -f "$f"' EXIT
cat > "$f"
kubeadm init phase upload-certs --upload-certs --config "$f" >/dev/null
`

// masterAddrs lists the addresses of the masters but exclude, those of
// n's district first (closest), for n's /etc/hosts.
func (d *driver) masterAddrs(n districts.Node, exclude string) []string {
	d.mu.Lock()
	masters := slices.Clone(d.masters)
	d.mu.Unlock()
	slices.SortStableFunc(masters, func(a, b districts.Node) int {
		ai, bi := a.District != n.District, b.District != n.District
		switch {
		case ai == bi:
			return strings.Compare(a.ID, b.ID)
		case !ai:
			return -1
		default:
			return 1
		}
	})
	var out []string
	for _, m := range masters {
		if m.ID != exclude && hasAddress(m) {
			out = append(out, nodeAddress(m))
		}
	}
	return out
}

// pinEndpoint points the managed endpoint at the masters (but exclude)
// on every node that answers. A node that cannot be reached is skipped:
// it is down, or gone, and pinned again when it joins.
func (d *driver) pinEndpoint(ctx context.Context, exclude string) error {
	if !d.endpoint.Managed {
		return nil
	}
	d.mu.Lock()
	nodes := slices.Clone(d.nodes)
	for _, m := range d.masters {
		if !slices.ContainsFunc(nodes, func(x districts.Node) bool { return x.ID == m.ID }) {
			nodes = append(nodes, m)
		}
	}
	d.mu.Unlock()
	var mu sync.Mutex
	var errs []error
	var wg sync.WaitGroup
	sem := make(chan struct{}, 10)
	for _, n := range nodes {
		if n.ID == exclude || !hasAddress(n) {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			_, err := d.r.Run(ctx, n, "pin the control-plane endpoint", hostsScript(d.endpoint.Host, d.masterAddrs(n, exclude)), nil)
			if err != nil && !errors.Is(err, ssh.ErrUnreachable) {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// Label makes n's transit-managed labels equal to labels plus its role
// label, leaving labels set by hand alone.
func (d *driver) Label(ctx context.Context, n districts.Node, labels map[string]string) error {
	a, err := d.client(ctx)
	if err != nil {
		return fmt.Errorf("label node %s: %w", n.ID, err)
	}
	want := maps.Clone(labels)
	if want == nil {
		want = map[string]string{}
	}
	want[labelRolePrefix+n.Role] = ""
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		kn, err := a.c.CoreV1().Nodes().Get(ctx, n.ID, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("label node %s: %w", n.ID, err)
		}
		if !relabel(kn, want, n) {
			return nil
		}
		_, err = a.c.CoreV1().Nodes().Update(ctx, kn, metav1.UpdateOptions{FieldManager: "transit"})
		return err
	})
}

// relabel sets want on kn, drops the labels transit set before and no
// longer wants, records the keys it owns, and says whether kn changed.
func relabel(kn *corev1.Node, want map[string]string, n districts.Node) bool {
	if kn.Labels == nil {
		kn.Labels = map[string]string{}
	}
	if kn.Annotations == nil {
		kn.Annotations = map[string]string{}
	}
	before := maps.Clone(kn.Labels)
	beforeAnn := maps.Clone(kn.Annotations)
	for _, k := range strings.Split(kn.Annotations[annotationManaged], ",") {
		if _, ok := want[k]; k != "" && !ok {
			delete(kn.Labels, k)
		}
	}
	maps.Copy(kn.Labels, want)
	kn.Annotations[annotationManaged] = strings.Join(slices.Sorted(maps.Keys(want)), ",")
	releaseNetwork(kn, n)
	return !maps.Equal(before, kn.Labels) || !maps.Equal(beforeAnn, kn.Annotations)
}

// releaseNetwork sets on kn what flannel reads as it starts on node n
// (annotationPublicIP, where n's public address is not its own and the
// node is not on the mesh, whose address every node reaches) and lets
// flannel start there (labelNetworkPending goes), and says whether kn
// changed.
func releaseNetwork(kn *corev1.Node, n districts.Node) bool {
	changed := false
	if n.MeshIP == "" && n.PublicIP != "" && n.PublicIP != nodeAddress(n) && kn.Annotations[annotationPublicIP] != n.PublicIP {
		if kn.Annotations == nil {
			kn.Annotations = map[string]string{}
		}
		kn.Annotations[annotationPublicIP] = n.PublicIP
		changed = true
	}
	if _, ok := kn.Labels[labelNetworkPending]; ok {
		delete(kn.Labels, labelNetworkPending)
		changed = true
	}
	return changed
}

// releaseNetwork releases the pod network of n's Node, once its kubelet
// registered it (see labelNetworkPending): one write, so flannel, which
// waits for the label to go, finds the annotation when it starts.
func (d *driver) releaseNetwork(ctx context.Context, a *api, n districts.Node) error {
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		kn, err := a.c.CoreV1().Nodes().Get(ctx, n.ID, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if !releaseNetwork(kn, n) {
			return nil
		}
		_, err = a.c.CoreV1().Nodes().Update(ctx, kn, metav1.UpdateOptions{FieldManager: "transit"})
		return err
	})
	if err != nil {
		return fmt.Errorf("node %s: let the pod network start: %w", n.ID, err)
	}
	return nil
}

// Uncordon makes n schedulable again.
func (d *driver) Uncordon(ctx context.Context, n districts.Node) error {
	return d.cordon(ctx, n, false)
}

func (d *driver) cordon(ctx context.Context, n districts.Node, on bool) error {
	a, err := d.client(ctx)
	if err != nil {
		return err
	}
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		kn, err := a.c.CoreV1().Nodes().Get(ctx, n.ID, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("node %s: %w", n.ID, err)
		}
		if kn.Spec.Unschedulable == on {
			return nil
		}
		kn.Spec.Unschedulable = on
		_, err = a.c.CoreV1().Nodes().Update(ctx, kn, metav1.UpdateOptions{FieldManager: "transit"})
		return err
	})
}

// MayRemoveMaster judges by etcd's voting members and which of them
// answer (provider.RaftQuorum), asked through a master among nodes other
// than n when one answers (a driver that has not listed the members yet
// learns them from nodes).
func (d *driver) MayRemoveMaster(ctx context.Context, n districts.Node, nodes []districts.Node) error {
	for _, m := range nodes {
		if m.Role == districts.RoleMaster && hasAddress(m) {
			d.addMaster(m)
		}
	}
	a, err := d.clientExcept(ctx, n.ID)
	if err != nil {
		return &provider.QuorumError{Node: n.ID, Reason: "no other master's API server answers: " + err.Error()}
	}
	members, err := d.etcdMembers(ctx, a.master)
	if err != nil {
		return &provider.QuorumError{Node: n.ID, Reason: err.Error()}
	}
	voters, reachable, leaving, isVoter := 0, 0, false, false
	for _, em := range members {
		if em.Learner {
			continue
		}
		voters++
		if em.Healthy {
			reachable++
		}
		if memberOf(em, n) {
			isVoter, leaving = true, em.Healthy
		}
	}
	if !isVoter {
		return nil
	}
	return provider.RaftQuorum(n.ID, voters, reachable, leaving)
}

// clientExcept returns a client through a master other than id when one
// answers, else through any.
func (d *driver) clientExcept(ctx context.Context, id string) (*api, error) {
	a, err := d.client(ctx)
	if err == nil && a.master.ID != id {
		return a, nil
	}
	b, errs := d.connect(ctx, id)
	switch {
	case b != nil:
		return b, nil
	case a != nil:
		return a, nil
	}
	return nil, fmt.Errorf("no other master's API server answered: %w", errors.Join(append(errs, err)...))
}

// Remove takes n out of the cluster: for a master, the endpoint stops
// naming it first; the node is reset (which also removes a master's etcd
// member) when it answers; its etcd member, if any is left, is removed by
// the other masters; and its Node is deleted. A node that is no member is
// no error.
func (d *driver) Remove(ctx context.Context, n districts.Node) error {
	master := n.Role == districts.RoleMaster
	a, err := d.clientExcept(ctx, n.ID)
	if err != nil {
		return fmt.Errorf("remove node %s: %w", n.ID, err)
	}
	if master {
		if err := d.pinEndpoint(ctx, n.ID); err != nil {
			return fmt.Errorf("remove node %s: point the endpoint at the other masters: %w", n.ID, err)
		}
	}
	if master && a.master.ID != n.ID {
		if err := d.handOverLeadership(ctx, a.master, n); err != nil {
			d.opts.Logger.Warn("etcd leadership not handed over; its removal costs an election", "node", n.ID, "err", err)
		}
	}
	if hasAddress(n) {
		_, err := d.r.Run(ctx, n, "kubeadm reset", resetScript(), nil)
		if err != nil && !errors.Is(err, ssh.ErrUnreachable) {
			return fmt.Errorf("remove node %s: %w", n.ID, err)
		}
	}
	if master {
		if a.master.ID == n.ID {
			return fmt.Errorf("remove node %s: it is the last master the API answers through", n.ID)
		}
		if err := d.removeEtcdMember(ctx, a.master, n); err != nil {
			return fmt.Errorf("remove node %s: %w", n.ID, err)
		}
		d.forgetMaster(n.ID)
	}
	err = a.c.CoreV1().Nodes().Delete(ctx, n.ID, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("remove node %s: delete the Node: %w", n.ID, err)
	}
	return nil
}
