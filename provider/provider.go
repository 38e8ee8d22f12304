// Package provider holds the contracts between the control loop and its
// drivers: what an infrastructure driver (a cloud) and a platform driver
// (Kubernetes, Swarm) must do, the values they exchange, the errors they
// answer with, and the quorum rule. It imports nothing of transit but the
// config model, so drivers and the cloud emulator never import the loop.
package provider

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/cloudtransit/transit/districts"
)

// Infrastructure is what the control loop needs from one district's cloud.
// A driver is built per district (with its credential) and must be safe for
// concurrent use.
type Infrastructure interface {
	// List returns the cluster's instances and security groups in the
	// district, found by transit's identity tags (districts.TagCluster).
	// Instances that finished terminating are not returned.
	List(ctx context.Context, cluster string) ([]Instance, []Group, error)
	// EnsureGroup creates the group named spec.Name or replaces transit's
	// rules in it with the spec's: all traffic from spec.Sources, UDP
	// spec.MeshPort from anywhere, SSH from ssh_cidrs, the API port from
	// api_cidrs. Rules transit did not make stay. Idempotent.
	EnsureGroup(ctx context.Context, spec GroupSpec) (Group, error)
	// DeleteGroup deletes a group; deleting a missing group is not an error.
	DeleteGroup(ctx context.Context, g Group) error
	// Launch starts a machine in the group with the spec's tags and returns
	// once the cloud reports it running with its addresses. Waiting until
	// it answers SSH is the platform step's job. A launch whose machine
	// exists but will not run (failed, stopped, stuck starting) returns
	// the error with the machine's ProviderID when the driver leaves it,
	// so the loop tracks it until it is gone.
	Launch(ctx context.Context, spec LaunchSpec) (Instance, error)
	// Terminate asks the cloud to delete the machine and returns without
	// waiting for it to finish; terminating a missing machine is not an
	// error.
	Terminate(ctx context.Context, inst Instance) error
	// Describe asks the cloud for one machine by its provider id (and
	// zone, where the cloud needs one), not through a listing: the loop
	// asks it about a machine resources.json has that a listing missed
	// (listings lag, lose pages, skip an unreachable zone). It returns
	// the machine as the cloud has it now, whatever its tags, or an error
	// matching ErrCloudNotFound when the cloud says it does not exist or
	// has finished terminating; any other error says nothing either way.
	Describe(ctx context.Context, inst Instance) (Instance, error)
}

// InUseGroupDeleter is an Infrastructure whose cloud deletes a group while
// machines that are still terminating are in it (a GCE firewall rule
// applies to instances by network tag and may go at any time). The loop
// then deletes an emptied district's group at once, instead of waiting
// for its machines to be gone as it must on EC2 (DependencyViolation) and
// Neutron.
type InUseGroupDeleter interface {
	DeletesGroupsInUse() bool
}

// Kinds of cloud failure. An infrastructure driver's error matches
// (errors.Is) the kind the cloud's answer means, and its message names what
// to look at: the district key, the credential id (never its secret), the
// quota. A configuration the cloud refuses (an unknown image, network or
// machine type) matches districts.ErrInvalid.
var (
	// ErrCloudNotFound: the cloud has no such resource.
	ErrCloudNotFound = errors.New("not found")
	// ErrQuota: the cloud refused to create more of something.
	ErrQuota = errors.New("quota exceeded")
	// ErrThrottled: the cloud kept refusing requests for their rate, after
	// the driver's bounded retries.
	ErrThrottled = errors.New("throttled")
	// ErrCloudAuth: the cloud refused the credentials.
	ErrCloudAuth = errors.New("authentication failed")
)

// InstanceState is a machine's life as the cloud reports it.
type InstanceState string

// Instance states. Terminated machines are not listed at all. A driver
// maps every state of its cloud onto one of these; a state it does not
// know is pending (waited for, bounded), never running.
const (
	InstancePending InstanceState = "pending"
	InstanceRunning InstanceState = "running"
	// InstanceStopped: the machine exists, does not run and may run
	// again: EC2 stopping and stopped, Compute Engine STOPPING,
	// TERMINATED (GCE's word for stopped), SUSPENDING and SUSPENDED,
	// Nova SHUTOFF, SUSPENDED, PAUSED, SHELVED and SOFT_DELETED. It is
	// never gone: Terminate must delete it.
	InstanceStopped InstanceState = "stopped"
	// InstanceFailed: the cloud gave up on the machine (Nova ERROR); it
	// will not run. Terminate must delete it.
	InstanceFailed      InstanceState = "failed"
	InstanceTerminating InstanceState = "terminating"
)

// Instance is a machine as its cloud reports it.
type Instance struct {
	ProviderID string
	Tags       map[string]string
	Zone       string
	PublicIP   string
	PrivateIP  string
	State      InstanceState
	CreatedAt  time.Time
	// HostKeys are the machine's SSH host public keys in authorized_keys
	// format ("ssh-ed25519 AAAA..."), when the provider knows them (it
	// made them, or read them from the machine's console or guest
	// attributes); they are pinned before first contact. Empty when the
	// provider cannot say: the first key presented is trusted then.
	HostKeys []string
}

// Group is a security group as its cloud reports it.
type Group struct {
	ProviderID string
	Name       string
	Tags       map[string]string
	Sources    []string
	// MeshPort is the UDP port transit's rule lets in from anywhere, 0
	// when there is none.
	MeshPort int
}

// GroupSpec is the wanted state of a district's security group.
type GroupSpec struct {
	Name     string
	Cluster  string
	District string
	Tags     map[string]string
	// Sources are the addresses allowed in: every node of the cluster,
	// sorted. Empty for a cluster on the node mesh.
	Sources []string
	// MeshPort, when not 0, is the node mesh's UDP port (WireGuard),
	// let in from anywhere: WireGuard answers no packet that a peer's
	// key did not authenticate, and nodes on the mesh send each other
	// nothing else, so the group stays the same size however many nodes
	// the cluster has.
	MeshPort int
}

// LaunchSpec says what machine to start.
type LaunchSpec struct {
	Node        districts.Node // ID, cluster, district, role, flavor, zone
	MachineType string
	GroupID     string            // provider id of the district's group
	Tags        map[string]string // identity tags plus the user's tags
	// AuthorizedKey is the cluster's SSH public key in authorized_keys
	// format; the machine must accept it for root.
	AuthorizedKey string
}

// Platform is what the control loop needs from the container platform
// (Kubernetes or Swarm) spanning the cluster's nodes.
//
// The platform's own view is the source of truth about membership and
// quorum; transit's records never are. Every driver keeps this contract:
//
//   - Members answers ErrNoPlatform only when every node it was given
//     answered and none is in a platform, as master or worker. When the
//     masters cannot be asked (unreachable, timed out, their engine down)
//     or no master serves a platform that workers still belong to, it
//     returns an error matching ErrPlatformUnreachable (an
//     *UnreachableError naming the masters), never ErrNoPlatform: the loop
//     then changes no node and the run ends not converged.
//   - Members lists every member the platform has, including members whose
//     machine is not among nodes (deleted behind transit's back): those
//     carry the node id of their identity label and are reported down.
//   - MayRemoveMaster judges quorum from the platform's voters (Swarm's
//     managers and their reachability, etcd's voting members), never from
//     transit's roles.
//   - Remove of a node without addresses (its machine is gone) is done by
//     the remaining masters alone.
type Platform interface {
	// Install prepares a node (container engine, platform binaries);
	// idempotent.
	Install(ctx context.Context, n districts.Node) error
	// Init makes n the first master of a new platform.
	Init(ctx context.Context, n districts.Node) error
	// Join adds n to the platform in its role, or gives a member the
	// role it lacks (promote, demote); idempotent.
	Join(ctx context.Context, n districts.Node) error
	// Label makes the node's transit-managed labels equal to labels.
	Label(ctx context.Context, n districts.Node, labels map[string]string) error
	// Drain moves the workloads off n within timeout. A refused or stuck
	// drain returns an error matching ErrDrainRefused and leaves the node
	// schedulable again.
	Drain(ctx context.Context, n districts.Node, timeout time.Duration) error
	// Uncordon makes n schedulable again.
	Uncordon(ctx context.Context, n districts.Node) error
	// Remove takes n out of the platform (demote, leave, remove); removing
	// a node that is not a member is not an error.
	Remove(ctx context.Context, n districts.Node) error
	// Members reports the platform's members, asking the masters among
	// nodes (see the contract above).
	Members(ctx context.Context, nodes []districts.Node) ([]Member, error)
	// MayRemoveMaster says whether master n may leave the platform now
	// without it losing quorum: nil, or an error matching ErrQuorum that
	// says why not. nodes are the cluster's live nodes.
	MayRemoveMaster(ctx context.Context, n districts.Node, nodes []districts.Node) error
	// EnsureAddons makes the software the platform runs inside itself
	// match: its own (a pod network, cluster DNS) and the cluster's
	// addons, installed, upgraded and removed. The loop calls it once the
	// nodes have converged, on every apply; it returns what it changed
	// (empty when nothing) and is idempotent.
	EnsureAddons(ctx context.Context, addons []districts.Addon) (changed []string, err error)
}

// Versioner is a platform that can say which version runs (status shows
// it): as its control plane reports it, not as transit installed it.
type Versioner interface {
	Version(ctx context.Context) (string, error)
}

// Member is a node as the platform reports it.
type Member struct {
	// NodeID is transit's node id, from the member's identity label.
	NodeID string
	// Role is the role the platform gives the member: RoleMaster for a
	// Swarm manager or a control-plane node (an etcd member, voting or
	// not yet), else RoleWorker.
	Role string
	// Voter says the member holds a vote in the platform's quorum now: a
	// Swarm manager the other managers reach, a control-plane node whose
	// etcd member is a voter (not a learner). Only a voter counts as a
	// ready master.
	Voter    bool
	Ready    bool
	Draining bool // cordoned or drained
	Labels   map[string]string
	// ProviderID and Addresses are how the platform knows the member's
	// machine: the cloud's id when the platform records one (a Kubernetes
	// Node's spec.providerID), and the addresses the member reaches the
	// platform from (a Swarm node's Status.Addr, a Node's InternalIP and
	// ExternalIP). transit tells a member's machine from a copy carrying
	// the same tags by them, never by listing order.
	ProviderID string
	Addresses  []string
}

// ErrNoPlatform says every node answered and none is in a platform.
var ErrNoPlatform = errors.New("no platform exists on the nodes")

// ErrPlatformUnreachable says the platform could not be asked: no master
// answered, or none serves the platform that workers belong to.
var ErrPlatformUnreachable = errors.New("platform unreachable")

// UnreachableError names the masters that did not answer and why.
type UnreachableError struct {
	// Masters are the node ids of the masters that could not be asked or
	// cannot serve the platform now (down, locked, without quorum).
	Masters []string
	// Silent are the other nodes that did not answer while every master
	// answered that it serves no platform: whether they are in one is
	// unknown, and silence proves nothing, so this is no verdict either.
	Silent []string
	Err    error
}

// Lost says every master answered (or none is left), every other node
// answered too, and nodes belong to a platform no master serves: it
// formed and is lost.
func (e *UnreachableError) Lost() bool { return len(e.Masters) == 0 && len(e.Silent) == 0 }

func (e *UnreachableError) Error() string {
	switch {
	case len(e.Masters) > 0:
		return fmt.Sprintf("platform unreachable: no master answered (%s): %v", strings.Join(e.Masters, ", "), e.Err)
	case len(e.Silent) > 0:
		return fmt.Sprintf("platform unreachable: no master serves a platform and %s did not answer, so whether one exists is unknown: %v", strings.Join(e.Silent, ", "), e.Err)
	}
	return fmt.Sprintf("platform unreachable: no master serves it: %v", e.Err)
}

// Is makes errors.Is(err, ErrPlatformUnreachable) true.
func (e *UnreachableError) Is(target error) bool { return target == ErrPlatformUnreachable }

// Unwrap returns the masters' errors.
func (e *UnreachableError) Unwrap() error { return e.Err }

// ErrQuorum marks a master that may not leave now.
var ErrQuorum = errors.New("quorum")

// QuorumError says why a master may not leave.
type QuorumError struct {
	Node   string
	Reason string
}

func (e *QuorumError) Error() string { return "master " + e.Node + " may not leave: " + e.Reason }

// Is makes errors.Is(err, ErrQuorum) true.
func (e *QuorumError) Is(target error) bool { return target == ErrQuorum }

// RaftQuorum is the majority rule of a Raft group (Swarm's managers,
// etcd's voting members), for drivers to answer MayRemoveMaster: with
// voters members of which reachable answer, may member node, reachable or
// not, leave? The change itself needs a quorum now, and the members left
// must still have one.
func RaftQuorum(node string, voters, reachable int, leavingReachable bool) error {
	after, reachAfter := voters-1, reachable
	if leavingReachable {
		reachAfter--
	}
	switch {
	case after < 1:
		return &QuorumError{Node: node, Reason: "it is the last master"}
	case reachable < voters/2+1:
		return &QuorumError{Node: node, Reason: fmt.Sprintf("the platform has no quorum now: %d of %d masters reachable, %d needed", reachable, voters, voters/2+1)}
	case reachAfter < after/2+1:
		return &QuorumError{Node: node, Reason: fmt.Sprintf("it would leave %d reachable of %d masters, below quorum %d", reachAfter, after, after/2+1)}
	}
	return nil
}

// ErrDrainRefused marks a drain the platform refused or could not finish in
// time (a disruption budget, a stuck workload). The node is skipped, never
// killed.
var ErrDrainRefused = errors.New("drain refused")

// DrainError says which workloads blocked a drain.
type DrainError struct {
	Node     string
	Reason   string
	Blocking []string // workloads still on the node
}

func (e *DrainError) Error() string {
	msg := fmt.Sprintf("drain of node %s refused: %s", e.Node, e.Reason)
	if len(e.Blocking) > 0 {
		msg += " (blocking: " + strings.Join(e.Blocking, ", ") + ")"
	}
	return msg
}

// Is makes errors.Is(err, ErrDrainRefused) true.
func (e *DrainError) Is(target error) bool { return target == ErrDrainRefused }

// ErrAddonInUse marks the removal of an addon the platform refused:
// objects of the addon's kinds still exist that only its controller can
// see out (a streams Topology's finalizer deletes its Kafka topics; only
// the relations controller lifts its protect finalizer). Nothing of the
// addon was removed; see to them as the error says, then apply again.
var ErrAddonInUse = errors.New("addon in use")

// AddonInUseError names what keeps an addon from being removed.
type AddonInUseError struct {
	Addon string
	// Resource is what the users are, as kubectl names them
	// ("topologies.streams.transit.io").
	Resource string
	// Users are the objects, namespace/name, in order.
	Users []string
	// Remedy, when set, says what to do instead of deleting them.
	Remedy string
}

// maxUsersNamed bounds the objects an AddonInUseError names.
const maxUsersNamed = 20

func (e *AddonInUseError) Error() string {
	named := e.Users
	more := ""
	if len(named) > maxUsersNamed {
		named, more = named[:maxUsersNamed], fmt.Sprintf(" and %d more", len(named)-maxUsersNamed)
	}
	remedy := e.Remedy
	if remedy == "" {
		remedy = fmt.Sprintf("delete them first, while the addon still runs (kubectl delete %s --all --all-namespaces)", e.Resource)
	}
	return fmt.Sprintf("removing addon %s refused: %d %s still exist (%s%s); %s, then apply again; nothing of the addon was removed",
		e.Addon, len(e.Users), e.Resource, strings.Join(named, ", "), more, remedy)
}

// Is makes errors.Is(err, ErrAddonInUse) true.
func (e *AddonInUseError) Is(target error) bool { return target == ErrAddonInUse }

// GroupName is the name of a cluster's security group in a district.
func GroupName(cluster, district string) string {
	return "transit-" + cluster + "-" + district
}

// IdentityTags are the tags that mark a node as transit's: its cluster and
// lineage, district, role, flavor and id.
func IdentityTags(n districts.Node, lineage string) map[string]string {
	t := map[string]string{
		districts.TagCluster:  n.Cluster,
		districts.TagDistrict: n.District,
		districts.TagRole:     n.Role,
		districts.TagFlavor:   n.Flavor,
		districts.TagNode:     n.ID,
	}
	if lineage != "" {
		t[districts.TagLineage] = lineage
	}
	return t
}

// AddonReporter is a platform that can say whether its addons serve
// (status shows it).
type AddonReporter interface {
	AddonStatus(ctx context.Context, addons []districts.Addon) ([]AddonStatus, error)
}

// AddonStatus is whether one addon serves, and if not, why.
type AddonStatus struct {
	Name    string `json:"name"`
	Ready   bool   `json:"ready"`
	Message string `json:"message"`
}
