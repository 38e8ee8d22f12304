package control

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
	// EnsureGroup creates the group named spec.Name or replaces its rules
	// with spec.Sources: all traffic from those addresses, SSH from the
	// operator. Idempotent.
	EnsureGroup(ctx context.Context, spec GroupSpec) (Group, error)
	// DeleteGroup deletes a group; deleting a missing group is not an error.
	DeleteGroup(ctx context.Context, g Group) error
	// Launch starts a machine in the group with the spec's tags and returns
	// once it answers SSH.
	Launch(ctx context.Context, spec LaunchSpec) (Instance, error)
	// Terminate asks the cloud to delete the machine and returns without
	// waiting for it to finish; terminating a missing machine is not an
	// error.
	Terminate(ctx context.Context, inst Instance) error
}

// InstanceState is a machine's life as the cloud reports it.
type InstanceState string

// Instance states. Terminated machines are not listed at all.
const (
	InstancePending     InstanceState = "pending"
	InstanceRunning     InstanceState = "running"
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
}

// Group is a security group as its cloud reports it.
type Group struct {
	ProviderID string
	Name       string
	Tags       map[string]string
	Sources    []string
}

// GroupSpec is the wanted state of a district's security group.
type GroupSpec struct {
	Name     string
	Cluster  string
	District string
	Tags     map[string]string
	// Sources are the addresses allowed in: every node of the cluster,
	// sorted.
	Sources []string
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
type Platform interface {
	// Install prepares a node (container engine, platform binaries);
	// idempotent.
	Install(ctx context.Context, n districts.Node) error
	// Init makes n the first master of a new platform.
	Init(ctx context.Context, n districts.Node) error
	// Join adds n to the platform in its role.
	Join(ctx context.Context, n districts.Node) error
	// Label makes the node's transit-managed labels equal to labels.
	Label(ctx context.Context, n districts.Node, labels map[string]string) error
	// Drain moves the workloads off n within timeout. A refused or stuck
	// drain returns an error matching ErrDrainRefused and leaves the node
	// schedulable again.
	Drain(ctx context.Context, n districts.Node, timeout time.Duration) error
	// Uncordon makes a node left cordoned by an interrupted drain
	// schedulable again.
	Uncordon(ctx context.Context, n districts.Node) error
	// Remove takes n out of the platform (demote, leave, remove); removing
	// a node that is not a member is not an error.
	Remove(ctx context.Context, n districts.Node) error
	// Members reports the platform's nodes, asking any reachable master
	// among nodes. With no master reachable it returns ErrNoPlatform.
	Members(ctx context.Context, nodes []districts.Node) ([]Member, error)
}

// Member is a node as the platform reports it.
type Member struct {
	NodeID   string
	Role     string
	Ready    bool
	Draining bool // cordoned or drained
	Labels   map[string]string
}

// ErrNoPlatform says no master answered: the platform does not exist yet,
// or every master is gone.
var ErrNoPlatform = errors.New("no platform master reachable")

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
