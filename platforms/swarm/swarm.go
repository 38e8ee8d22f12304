// Package swarm is transit's Docker Swarm platform driver. It reaches every
// node over SSH (platforms/ssh): it ensures a Docker engine, initialises the
// swarm on the first master, joins managers and workers with their tokens,
// keeps the deployment's tags as node labels, drains (waiting until the
// node's tasks run elsewhere), demotes, leaves and removes nodes, and says
// what the swarm's tasks ask of its nodes (Demand, for transit autoscale).
//
// A swarm node is tied to its transit node by the label transit-node=<id>
// (set at join; the hostname is the fallback), and the label
// transit-managed lists the label keys transit owns, so labels a person set
// by hand are left alone.
//
// The swarm's own view decides membership, roles and quorum: a master is a
// node holding a Raft seat (a manager), whatever transit meant it to be.
// An active manager answers for the swarm (a master, else a worker the
// swarm made a manager); when none can be asked, or a node that did not
// answer may hold one, or workers still belong to a swarm no master
// serves, the driver says the swarm is unreachable, never that there is
// none. A node whose machine is gone (no address) is never dialed.
//
// A member's role is the swarm's: a master is a manager (holding a Raft
// seat, or promoted and about to); it is a voter while it holds a seat
// the other managers reach. Its addresses are the swarm node's
// Status.Addr and, for a manager, its Raft address.
package swarm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/cloudtransit/transit/clock"
	"github.com/cloudtransit/transit/districts"
	"github.com/cloudtransit/transit/platforms/ssh"
	"github.com/cloudtransit/transit/provider"
)

// Labels transit keeps on every swarm node.
const (
	labelNode    = districts.TagNode // the transit node id
	labelManaged = "transit-managed" // comma-separated keys transit owns
	// labelRotate marks a manager transit demotes to remove: the join
	// tokens it knew must be rotated before it leaves. The mark lives in
	// the swarm, so a transit killed between the demotion and the rotation
	// leaves the intent where the next run finds it.
	labelRotate = "transit-rotate-tokens"
)

// Options configure the driver.
type Options struct {
	// SSH says how to reach the nodes (key, pinned host keys, waits).
	SSH ssh.Config
	// Clock paces the waits; default the wall clock.
	Clock clock.Clock
	// Logger gets the progress of long waits (a drain, a demotion);
	// default none.
	Logger *slog.Logger
	// PollInterval paces the waits for a drain or a departure; default 1s.
	PollInterval time.Duration
	// DemoteTimeout bounds the wait for a demoted manager to give up its
	// Raft seat; default 2m.
	DemoteTimeout time.Duration
	// MeshBinary is the transit-mesh executable (Linux, the nodes'
	// machine) sent to every node of a swarm on the node mesh; read once,
	// when the first node needs it. Empty: no swarm here runs on the mesh.
	MeshBinary string
	// MeshHint ends the error of a node that cannot get transit-mesh
	// (none found, unreadable, not for its machine): what to set to give
	// the driver one.
	MeshHint string
}

// progressEvery is how often a long wait logs its progress.
const progressEvery = 30 * time.Second

// New returns the Swarm driver for a cluster. It keeps one SSH connection
// per node; close it (it is an io.Closer) when the run ends.
func New(c districts.Cluster, opts Options) provider.Platform {
	if opts.Clock == nil {
		opts.Clock = clock.Real{}
	}
	if opts.SSH.Clock == nil {
		opts.SSH.Clock = opts.Clock
	}
	return newDriver(c.ID, opts, ssh.NewPool(opts.SSH, "the swarm driver"))
}

// newDriver fills opts' defaults; tests give it a fake runner.
func newDriver(cluster string, opts Options, r runner) *driver {
	if opts.Clock == nil {
		opts.Clock = clock.Real{}
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.PollInterval <= 0 {
		opts.PollInterval = time.Second
	}
	if opts.DemoteTimeout <= 0 {
		opts.DemoteTimeout = 2 * time.Minute
	}
	d := &driver{cluster: cluster, opts: opts, r: r}
	d.meshBin = sync.OnceValues(func() (meshBinary, error) { return readMeshBinary(opts.MeshBinary, d.meshHint()) })
	return d
}

type driver struct {
	cluster string
	opts    Options
	r       runner

	mu sync.Mutex
	// managers are the masters that answered as swarm managers when last
	// asked (Members, Init, Join), the first one most recently useful.
	managers []districts.Node
	// rotate says a manager left but the join tokens it knew are not
	// rotated yet.
	rotate bool

	// meshBin reads Options.MeshBinary, once.
	meshBin func() (meshBinary, error)
}

var _ provider.Platform = (*driver)(nil)

// swarmNode is the part of `docker node inspect` the driver reads.
type swarmNode struct {
	ID   string
	Spec struct {
		Labels       map[string]string
		Role         string
		Availability string
	}
	Description struct {
		Hostname string
		// Resources are the node's CPUs and memory, all of which
		// Swarm lets tasks reserve.
		Resources struct {
			NanoCPUs    int64
			MemoryBytes int64
		}
	}
	Status struct {
		State string
		Addr  string
	}
	ManagerStatus *struct {
		Leader       bool
		Reachability string
		Addr         string
	}
}

// advertiseAddr is the address other nodes reach n on: its mesh address
// on the node mesh, else the one transit reaches it on (public, else
// private).
func advertiseAddr(n districts.Node) string {
	if n.MeshIP != "" {
		return n.MeshIP
	}
	return ssh.NodeTarget(n).Addr
}

// dataPathAddr is where n's overlay traffic (VXLAN) goes out and comes
// in: its mesh address on the mesh; else empty, for Swarm's default (the
// advertised address).
func dataPathAddr(n districts.Node) string { return n.MeshIP }

// run runs script on n; no join token survives in its error.
func (d *driver) run(ctx context.Context, n districts.Node, name, script string) (string, error) {
	out, err := d.r.Run(ctx, n, name, script, nil)
	return out, redactTokens(err)
}

// Close closes the driver's SSH connections.
func (d *driver) Close() error {
	if c, ok := d.r.(io.Closer); ok {
		return c.Close()
	}
	return nil
}

// Install ensures a running Docker engine on n.
func (d *driver) Install(ctx context.Context, n districts.Node) error {
	_, err := d.run(ctx, n, "install docker", installScript(n.ID))
	return err
}

// Init makes n the first manager of a new swarm.
func (d *driver) Init(ctx context.Context, n districts.Node) error {
	out, err := d.run(ctx, n, "docker swarm init", initScript(advertiseAddr(n), dataPathAddr(n)))
	if err != nil {
		return err
	}
	d.rememberManager(n)
	return d.onManager(ctx, "label the first manager", nodeUpdateScript(
		strings.TrimSpace(out), map[string]string{labelNode: n.ID}, nil, "", ""), "")
}

// Join adds n to the swarm as a manager (master) or a worker. A node that
// is a member already keeps its membership, and gets the role it lacks:
// promoted when transit made it a master, demoted when a worker.
func (d *driver) Join(ctx context.Context, n districts.Node) error {
	role := swarmRole(n.Role)
	if err := d.rotateTokens(ctx, n.ID); err != nil {
		return fmt.Errorf("join node %s: %w", n.ID, err)
	}
	token, mgr, err := d.runOnManager(ctx, n.ID, "docker swarm join-token "+role, joinTokenScript(role))
	if err != nil {
		return fmt.Errorf("join node %s: %w", n.ID, err)
	}
	token = strings.TrimSpace(token)
	if token == "" {
		return fmt.Errorf("join node %s: manager %s printed no %s join token", n.ID, mgr.ID, role)
	}
	// The token goes to the node on the script's stdin and from there to
	// the engine's API in a request body: never in a command line, so not
	// in the node's process list. A failed join's output is redacted, in
	// case the engine repeats it.
	body, err := joinRequest(token, advertiseAddr(n), dataPathAddr(n), advertiseAddr(mgr))
	if err != nil {
		return fmt.Errorf("join node %s: %w", n.ID, err)
	}
	var out string
	err = d.retry(ctx, n, "joining the swarm", func() error {
		var err error
		out, err = d.r.Run(ctx, n, "docker swarm join", joinScript(), body)
		return err
	})
	if err != nil {
		return redact(redactTokens(err), token)
	}
	swarmID := strings.TrimSpace(out)
	list, err := d.inspect(ctx, n.ID)
	if err != nil {
		return fmt.Errorf("join node %s: %w", n.ID, err)
	}
	fix, err := roleChange(list, swarmID, role)
	if err != nil {
		return fmt.Errorf("join node %s: %w", n.ID, err)
	}
	if err := d.onManager(ctx, "label the joined node", nodeUpdateScript(
		swarmID, map[string]string{labelNode: n.ID}, nil, "", fix), n.ID); err != nil {
		return err
	}
	if role == "manager" {
		d.rememberManager(n)
	} else {
		d.forgetManager(n.ID)
	}
	return nil
}

// roleChange says what gives swarm node swarmID the role ("manager" or
// "worker") transit wants: that role when its spec holds the other (a node
// that was a member already: joinScript left it as it was), "" when it
// holds it. A node the list lacks is in another swarm.
func roleChange(list []swarmNode, swarmID, role string) (string, error) {
	for _, sn := range list {
		if sn.ID != swarmID {
			continue
		}
		if sn.Spec.Role != role {
			return role, nil
		}
		return "", nil
	}
	return "", fmt.Errorf("it is in another swarm (its swarm node %q is not among this swarm's nodes) and must leave that one first", swarmID)
}

// redact hides secret in err's message: the output a failed command's
// *ssh.RunError shows.
func redact(err error, secret string) error {
	if err == nil || secret == "" {
		return err
	}
	var re *ssh.RunError
	//nolint:errorlint // identity on purpose: only d.run's own error may be replaced by a redacted copy; a wrapped one is handled below
	if errors.As(err, &re) && error(re) == err {
		c := *re
		c.Stdout = strings.ReplaceAll(c.Stdout, secret, "<redacted>")
		c.Stderr = strings.ReplaceAll(c.Stderr, secret, "<redacted>")
		err = &c
	}
	if msg := err.Error(); strings.Contains(msg, secret) {
		// Wrapped where the output cannot be reached: keep only the text.
		return errors.New(strings.ReplaceAll(msg, secret, "<redacted>"))
	}
	return err
}

// Label makes the labels transit owns on n equal to labels.
func (d *driver) Label(ctx context.Context, n districts.Node, labels map[string]string) error {
	sn, err := d.find(ctx, n)
	if err != nil {
		return err
	}
	set, drop := labelChanges(sn.Spec.Labels, n.ID, labels)
	if len(set) == 0 && len(drop) == 0 {
		return nil
	}
	return d.onManager(ctx, "label node "+n.ID, nodeUpdateScript(sn.ID, set, drop, "", ""), "")
}

// labelChanges returns the label updates that make a node's transit-owned
// labels equal to want, keeping its identity label and leaving labels
// transit does not own alone.
func labelChanges(have map[string]string, nodeID string, want map[string]string) (set map[string]string, drop []string) {
	set = map[string]string{}
	for k, v := range want {
		if cur, ok := have[k]; !ok || cur != v {
			set[k] = v
		}
	}
	for _, k := range managedKeys(have) {
		if _, ok := want[k]; !ok {
			if _, present := have[k]; present {
				drop = append(drop, k)
			}
		}
	}
	if have[labelNode] != nodeID {
		set[labelNode] = nodeID
	}
	managed := strings.Join(slices.Sorted(maps.Keys(want)), ",")
	if have[labelManaged] != managed {
		if managed == "" {
			if _, ok := have[labelManaged]; ok {
				drop = append(drop, labelManaged)
			}
		} else {
			set[labelManaged] = managed
		}
	}
	return set, drop
}

func managedKeys(labels map[string]string) []string {
	v := labels[labelManaged]
	if v == "" {
		return nil
	}
	return strings.Split(v, ",")
}

// Uncordon makes n schedulable again.
func (d *driver) Uncordon(ctx context.Context, n districts.Node) error {
	sn, err := d.find(ctx, n)
	if err != nil {
		return err
	}
	var drop []string
	if _, ok := sn.Spec.Labels[labelDrain]; ok {
		drop = []string{labelDrain}
	}
	if sn.Spec.Availability == "active" && drop == nil {
		return nil
	}
	return d.onManager(ctx, "make node "+n.ID+" active", nodeUpdateScript(sn.ID, nil, drop, "active", ""), "")
}

// Remove takes n out of the swarm, every entry carrying its identity (a
// node that left and joined again has several). A manager is demoted
// first, from another manager, and n is asked to leave only once the swarm
// reports it holds no Raft seat any more: leaving earlier, or with
// --force, can cost the swarm its leader. The join tokens it knew are then
// rotated. n leaves by itself, without --force, and a remaining manager
// deletes its entries; only when n cannot be reached (its machine is gone
// or does not answer) does a manager delete it with --force. A node in no
// swarm is fine.
func (d *driver) Remove(ctx context.Context, n districts.Node) error {
	if err := d.remove(ctx, n); err != nil {
		return fmt.Errorf("remove node %s: %w", n.ID, err)
	}
	return nil
}

func (d *driver) remove(ctx context.Context, n districts.Node) error {
	list, err := d.inspect(ctx, n.ID)
	if err != nil {
		return err
	}
	r := planRemoval(list, n)
	for _, id := range r.demote {
		mark := map[string]string{labelRotate: "true"}
		if err := d.onManager(ctx, "demote node "+n.ID, nodeUpdateScript(id, mark, nil, "", "worker"), n.ID); err != nil {
			return err
		}
		if err := d.waitDemoted(ctx, n, id); err != nil {
			return err
		}
	}
	if len(r.demote) > 0 || r.rotate {
		d.forgetManager(n.ID)
		d.mu.Lock()
		d.rotate = true
		d.mu.Unlock()
	}
	if err := d.rotateTokens(ctx, n.ID); err != nil {
		return err
	}
	if r.leave {
		err := d.retry(ctx, n, "leaving the swarm", func() error {
			_, err := d.run(ctx, n, "docker swarm leave", leaveScript())
			return err
		})
		// A machine that died cannot leave; the managers forget it.
		if err != nil && !errors.Is(err, ssh.ErrUnreachable) {
			return err
		}
	}
	// The node left (or its machine is gone): the managers would list it
	// until its heartbeats time out (10-15 s), so it is deleted at once.
	for _, id := range r.remove {
		err := d.retry(ctx, n, "deleting it from the node list", func() error {
			return d.onManager(ctx, "remove node "+n.ID+" from the swarm", removeScript(id), n.ID)
		})
		if err != nil {
			return err
		}
	}
	// The pin goes with the machine (ssh.PinHostKeys forgets it at
	// Terminate): a retried Remove still verifies the node.
	return nil
}

// exitRetry is the exit status of a script that found the swarm not ready
// for its step yet (a demoted node still running as a manager, a node that
// left still reported up): it is run again after PollInterval.
const exitRetry = 75

// retry runs step until it does not exit with exitRetry, for at most
// DemoteTimeout.
func (d *driver) retry(ctx context.Context, n districts.Node, what string, step func() error) error {
	deadline := d.opts.Clock.Now().Add(d.opts.DemoteTimeout)
	for {
		err := step()
		var re *ssh.RunError
		if !errors.As(err, &re) || re.ExitStatus != exitRetry {
			return err
		}
		if !d.opts.Clock.Now().Before(deadline) {
			return fmt.Errorf("node %s: %s still refused after %s: %w", n.ID, what, d.opts.DemoteTimeout, err)
		}
		if err := d.opts.Clock.Sleep(ctx, d.opts.PollInterval); err != nil {
			return err
		}
	}
}

// waitDemoted waits until a manager other than n reports that swarm node
// id (n's) holds no Raft seat and another manager leads: a demotion only
// changes the spec, and Swarm takes the seat away in the background.
func (d *driver) waitDemoted(ctx context.Context, n districts.Node, id string) error {
	start := d.opts.Clock.Now()
	lastLog := start
	for {
		list, err := d.inspect(ctx, n.ID)
		if err != nil {
			return fmt.Errorf("wait for the demotion: %w", err)
		}
		why := seatState(list, id)
		if why == "" {
			return nil
		}
		now := d.opts.Clock.Now()
		waited := now.Sub(start)
		if waited >= d.opts.DemoteTimeout {
			return fmt.Errorf("demoted node %s (swarm node %s) %s after %s; it was not asked to leave", n.ID, id, why, d.opts.DemoteTimeout)
		}
		if now.Sub(lastLog) >= progressEvery {
			d.opts.Logger.InfoContext(ctx, "waiting for a demoted manager to give up its seat", "node", n.ID, "state", why, "waited", waited.Round(time.Second))
			lastLog = now
		}
		if err := d.opts.Clock.Sleep(ctx, d.opts.PollInterval); err != nil {
			return err
		}
	}
}

// seatState says why swarm node id may not leave yet ("" when it may): it
// still holds a Raft seat, or no other manager leads.
func seatState(list []swarmNode, id string) string {
	leader := false
	for _, sn := range list {
		switch {
		case sn.ID == id && isVoter(sn):
			return "still holds a manager seat"
		case sn.ID != id && isVoter(sn) && sn.ManagerStatus.Leader:
			leader = true
		}
	}
	if !leader {
		return "left no leader among the other managers"
	}
	return ""
}

// rotateTokens rotates the worker and manager join tokens on a manager
// other than exclude when a manager left since they were last rotated: a
// former manager has them in its Raft log.
func (d *driver) rotateTokens(ctx context.Context, exclude string) error {
	d.mu.Lock()
	pending := d.rotate
	d.mu.Unlock()
	if !pending {
		return nil
	}
	if err := d.onManager(ctx, "rotate the join tokens", rotateTokensScript(), exclude); err != nil {
		return err
	}
	d.mu.Lock()
	d.rotate = false
	d.mu.Unlock()
	return nil
}

// removal is how a node leaves the swarm.
type removal struct {
	demote []string // swarm node ids to demote first, unreachable seats first
	leave  bool     // run docker swarm leave on the node itself
	remove []string // swarm node ids to delete from the node list
	rotate bool     // an earlier run demoted it; the tokens may not be rotated
}

// planRemoval says how n leaves: every swarm node with its identity is
// demoted if it is a manager and deleted; n itself is asked to leave only
// when it has an address (its machine still exists).
func planRemoval(list []swarmNode, n districts.Node) removal {
	var r removal
	var seats []swarmNode
	for _, sn := range list {
		if identity(sn) != n.ID {
			continue
		}
		r.remove = append(r.remove, sn.ID)
		if sn.Spec.Labels[labelRotate] != "" {
			r.rotate = true
		}
		if isVoter(sn) || sn.Spec.Role == "manager" {
			seats = append(seats, sn)
		}
	}
	// A dead seat goes first, as mayRemove judged it.
	slices.SortStableFunc(seats, func(a, b swarmNode) int {
		return cmpBool(reachable(a), reachable(b))
	})
	for _, sn := range seats {
		r.demote = append(r.demote, sn.ID)
	}
	r.leave = len(r.remove) > 0 && hasAddress(n)
	return r
}

// reachable says the swarm reports manager sn reachable.
func reachable(sn swarmNode) bool {
	return sn.ManagerStatus != nil && sn.ManagerStatus.Reachability == "reachable"
}

// cmpBool orders false before true.
func cmpBool(a, b bool) int {
	switch {
	case a == b:
		return 0
	case !a:
		return -1
	}
	return 1
}

// find returns n's swarm node, or an error when n is in no swarm.
func (d *driver) find(ctx context.Context, n districts.Node) (swarmNode, error) {
	nodes, err := d.inspect(ctx, "")
	if err != nil {
		return swarmNode{}, err
	}
	sn, ok := match(nodes, n)
	if !ok {
		return swarmNode{}, fmt.Errorf("node %s is not in the swarm", n.ID)
	}
	return sn, nil
}

// inspect lists the swarm's nodes from a manager other than exclude.
func (d *driver) inspect(ctx context.Context, exclude string) ([]swarmNode, error) {
	out, m, err := d.runOnManager(ctx, exclude, "list swarm nodes", inspectScript())
	if err != nil {
		return nil, err
	}
	return parseNodes(m, out)
}

// parseNodes reads inspectScript's output from manager m.
func parseNodes(m districts.Node, out string) ([]swarmNode, error) {
	var list []swarmNode
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		return nil, fmt.Errorf("master %s: read docker node inspect: %w", m.ID, err)
	}
	return list, nil
}

// onManager runs a script on a manager other than exclude.
func (d *driver) onManager(ctx context.Context, name, script, exclude string) error {
	_, _, err := d.runOnManager(ctx, exclude, name, script)
	return err
}

// runOnManager runs a script on each known manager but exclude until one
// can be reached, and returns its output and that manager; a script that
// fails on a reachable manager is not retried elsewhere.
func (d *driver) runOnManager(ctx context.Context, exclude, name, script string) (string, districts.Node, error) {
	d.mu.Lock()
	managers := slices.Clone(d.managers)
	d.mu.Unlock()
	var errs []error
	for _, m := range managers {
		if m.ID == exclude || !hasAddress(m) {
			continue
		}
		out, err := d.run(ctx, m, name, script)
		if err == nil {
			d.rememberManager(m)
			return out, m, nil
		}
		if !errors.Is(err, ssh.ErrUnreachable) {
			return out, m, err
		}
		errs = append(errs, err)
	}
	if len(errs) == 0 {
		return "", districts.Node{}, errors.New("no swarm manager is known: the swarm has not been initialised")
	}
	return "", districts.Node{}, fmt.Errorf("no swarm manager reachable: %w", errors.Join(errs...))
}

// rememberManager puts m first among the known managers.
func (d *driver) rememberManager(m districts.Node) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.managers = slices.DeleteFunc(d.managers, func(x districts.Node) bool { return x.ID == m.ID })
	d.managers = slices.Insert(d.managers, 0, m)
}

// knowsManager says a manager is known to run manager commands on.
func (d *driver) knowsManager() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.managers) > 0
}

func (d *driver) forgetManager(id string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.managers = slices.DeleteFunc(d.managers, func(x districts.Node) bool { return x.ID == id })
}

func swarmRole(role string) string {
	if role == districts.RoleMaster {
		return "manager"
	}
	return "worker"
}

// MayRemoveMaster judges quorum from the swarm's Raft voters (its
// managers) and their reachability as a manager known from the last
// Members call reports them now, never from transit's roles. A node that
// holds no seat may always leave.
func (d *driver) MayRemoveMaster(ctx context.Context, n districts.Node, nodes []districts.Node) error {
	if !d.knowsManager() {
		if _, err := d.Members(ctx, nodes); err != nil {
			return fmt.Errorf("judge quorum before master %s leaves: %w", n.ID, err)
		}
	}
	exclude := ""
	if !hasAddress(n) {
		exclude = n.ID // its machine is gone
	}
	list, err := d.inspect(ctx, exclude)
	if err != nil {
		return fmt.Errorf("judge quorum before master %s leaves: %w", n.ID, err)
	}
	return mayRemove(list, n.ID)
}

// raftCount is the swarm's Raft group as seen from the node leaving.
type raftCount struct {
	voters    int // managers, reachable or not
	reachable int // managers the swarm reports reachable
	// The leaving node's seats, reachable or not: a node that left and
	// joined again may hold a stale one beside its live one.
	leavingReachable, leavingUnreachable int
}

// countRaft counts the voters in list and the seats of the node with
// identity id.
func countRaft(list []swarmNode, id string) raftCount {
	var c raftCount
	for _, sn := range list {
		if !isVoter(sn) {
			continue
		}
		c.voters++
		up := reachable(sn)
		if up {
			c.reachable++
		}
		switch {
		case identity(sn) != id:
		case up:
			c.leavingReachable++
		default:
			c.leavingUnreachable++
		}
	}
	return c
}

// mayRemove says whether the node with identity id may leave list's swarm
// now: nil when it holds no seat, else provider.RaftQuorum for each of its
// seats in the order Remove gives them up (unreachable ones first). Taking
// away even a dead seat needs a quorum now.
func mayRemove(list []swarmNode, id string) error {
	c := countRaft(list, id)
	voters, reachable := c.voters, c.reachable
	for range c.leavingUnreachable {
		if err := provider.RaftQuorum(id, voters, reachable, false); err != nil {
			return err
		}
		voters--
	}
	for range c.leavingReachable {
		if err := provider.RaftQuorum(id, voters, reachable, true); err != nil {
			return err
		}
		voters, reachable = voters-1, reachable-1
	}
	return nil
}

// hasAddress says n's machine has an address to reach it on; a node
// without one is gone.
func hasAddress(n districts.Node) bool { return n.PublicIP != "" || n.PrivateIP != "" }

// EnsureAddons has nothing to do: a swarm runs no addons of its own, and
// cluster.json's addons are Kubernetes controllers (validation refuses
// them for a swarm).
func (d *driver) EnsureAddons(context.Context, []districts.Addon) ([]string, error) {
	return nil, nil
}
