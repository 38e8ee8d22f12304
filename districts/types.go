// Package districts is transit's configuration model: the intended state
// (cluster.json), where it may run (districts.json), how to reach the clouds
// (credentials.json) and the current state transit tracks (resources.json).
// It loads the files with strict decoding and validates them, reporting
// every problem at once with its file and JSON path.
package districts

import (
	"time"
)

// PlatformRoles lists the platforms transit can install, with the roles
// each one knows.
var PlatformRoles = map[string][]string{
	"kubernetes": {RoleMaster, RoleWorker},
	"swarm":      {RoleMaster, RoleWorker},
}

// The usual two roles. A platform driver decides what a role means
// (Swarm: manager/worker; Kubernetes: control plane/worker).
const (
	RoleMaster = "master"
	RoleWorker = "worker"
)

// KnownAddons lists the addons transit knows how to install into a cluster.
var KnownAddons = []string{"relations", "streams"}

// Cluster is cluster.json: the intended state of one elastic platform.
type Cluster struct {
	Type        string       `json:"type"`
	ID          string       `json:"id"`
	Platform    string       `json:"platform"`
	Flavors     []Flavor     `json:"flavors"`
	Deployments []Deployment `json:"deployments"`
	Addons      []Addon      `json:"addons,omitempty"`
	Strategy    Strategy     `json:"strategy,omitzero"`
	// Kubernetes tunes a Kubernetes cluster (kubernetes.go); nil for the
	// defaults.
	Kubernetes *Kubernetes `json:"kubernetes,omitempty"`
	// NetworkSettings says how the nodes reach each other (network.go);
	// nil for the defaults. Network resolves them.
	NetworkSettings *Network `json:"network,omitempty"`
	// Budget bounds what the cluster may cost (prices.go); nil for none.
	Budget *Budget `json:"budget,omitempty"`
	// Autoscaler tunes transit autoscale (autoscale.go); nil for the
	// defaults.
	Autoscaler *Autoscaler `json:"autoscaler,omitempty"`
}

// Flavor is a user-defined machine size; districts map it to a provider
// machine type.
type Flavor struct {
	Type     string  `json:"type,omitempty"`
	Flavor   string  `json:"flavor"`
	Cores    int     `json:"cores"`
	MemoryGB float64 `json:"memory_gb"`
	DiskGB   int     `json:"disk_gb"`
}

// Deployment is one line of the intended state: Quantity nodes of Flavor in
// District with Role, labelled with Tags.
type Deployment struct {
	Type     string            `json:"type,omitempty"`
	District string            `json:"district"`
	Flavor   string            `json:"flavor"`
	Role     string            `json:"role"`
	Quantity int               `json:"quantity"`
	Tags     map[string]string `json:"tags,omitempty"`
	// Autoscale, instead of Quantity, lets transit autoscale decide the
	// quantity within bounds (autoscale.go).
	Autoscale *Autoscale `json:"autoscale,omitempty"`
}

// Key identifies the deployment line a node belongs to.
func (d Deployment) Key() DeploymentKey {
	return DeploymentKey{District: d.District, Flavor: d.Flavor, Role: d.Role}
}

// DeploymentKey is the identity of a deployment line: at most one line per
// district, flavor and role.
type DeploymentKey struct {
	District, Flavor, Role string
}

func (k DeploymentKey) String() string { return k.District + "/" + k.Flavor + "/" + k.Role }

// Addon names an in-cluster controller transit installs after the nodes
// converge.
type Addon struct {
	Type     string            `json:"type,omitempty"`
	Name     string            `json:"name"`
	Settings map[string]string `json:"settings,omitempty"`
}

// Strategy tunes how fast the control loop changes the cluster. The two
// counts are pointers so that an explicit 0 differs from "unset": as in a
// Kubernetes rolling update, max_surge 0 replaces in place (remove first,
// bounded by max_unavailable) and the two may not both be 0.
type Strategy struct {
	// MaxUnavailable is how many nodes of a role may be draining, leaving
	// or missing at once (default 1).
	MaxUnavailable *int `json:"max_unavailable,omitempty"`
	// MaxSurge is how many nodes above its intended size a role may run
	// while nodes are replaced, e.g. by a migration (default 1).
	MaxSurge *int `json:"max_surge,omitempty"`
	// DrainTimeout bounds one node's drain (default 5m).
	DrainTimeout Duration `json:"drain_timeout,omitzero"`
	// ReplaceUnhealthyAfter replaces a member the platform has reported
	// not ready for this long (0, the default: never; transit reports it).
	ReplaceUnhealthyAfter Duration `json:"replace_unhealthy_after,omitzero"`
}

// Strategy defaults.
const (
	DefaultMaxUnavailable = 1
	DefaultMaxSurge       = 1
	DefaultDrainTimeout   = 5 * time.Minute
)

// Rollout is a Strategy with its defaults filled in.
type Rollout struct {
	MaxUnavailable        int
	MaxSurge              int
	DrainTimeout          time.Duration
	ReplaceUnhealthyAfter time.Duration
}

// Resolved returns the strategy with unset fields defaulted.
func (s Strategy) Resolved() Rollout {
	r := Rollout{MaxUnavailable: DefaultMaxUnavailable, MaxSurge: DefaultMaxSurge,
		DrainTimeout: s.DrainTimeout.D(), ReplaceUnhealthyAfter: s.ReplaceUnhealthyAfter.D()}
	if s.MaxUnavailable != nil {
		r.MaxUnavailable = max(*s.MaxUnavailable, 0)
	}
	if s.MaxSurge != nil {
		r.MaxSurge = max(*s.MaxSurge, 0)
	}
	if r.MaxUnavailable == 0 && r.MaxSurge == 0 {
		// Validation refuses this; never let a bad value stall a rollout.
		r.MaxUnavailable = 1
	}
	if r.DrainTimeout <= 0 {
		r.DrainTimeout = DefaultDrainTimeout
	}
	r.ReplaceUnhealthyAfter = max(r.ReplaceUnhealthyAfter, 0)
	return r
}

// Int returns a pointer to v, for Strategy's counts.
func Int(v int) *int { return &v }

// District is one entry of districts.json: a region or project of one
// provider. Provider keys use the provider's own words; validation rejects
// keys that belong to another provider.
type District struct {
	Type         string `json:"type"`
	ID           string `json:"id"`
	Provider     string `json:"provider"`
	CredentialID string `json:"credential_id,omitempty"`

	AWSRegion string   `json:"aws_region,omitempty"`
	AWSZones  []string `json:"aws_zones,omitempty"`
	// The machine image: an AMI id, or the newest AMI whose name matches
	// aws_image_name (wildcards allowed) owned by aws_image_owner.
	AWSImageID    string `json:"aws_image_id,omitempty"`
	AWSImageName  string `json:"aws_image_name,omitempty"`
	AWSImageOwner string `json:"aws_image_owner,omitempty"`
	// AWSVPCID is the VPC the security group and nodes live in (default:
	// the region's default VPC); AWSSubnetIDs the subnets nodes are
	// spread across (default: the VPC's default subnet of each zone).
	AWSVPCID     string   `json:"aws_vpc_id,omitempty"`
	AWSSubnetIDs []string `json:"aws_subnet_ids,omitempty"`
	// AWSEndpoint is the EC2 API's URL, for an API-compatible service.
	AWSEndpoint string `json:"aws_endpoint,omitempty"`

	GCEProjectID string   `json:"gce_project_id,omitempty"`
	GCERegion    string   `json:"gce_region,omitempty"`
	GCEZones     []string `json:"gce_zones,omitempty"`
	// The machine image: gce_image (a name or a URL), or the newest image
	// of gce_image_family; either in gce_image_project.
	GCEImage        string `json:"gce_image,omitempty"`
	GCEImageFamily  string `json:"gce_image_family,omitempty"`
	GCEImageProject string `json:"gce_image_project,omitempty"`
	// GCENetwork is the VPC network nodes and the firewall rule are in
	// (default "default").
	GCENetwork string `json:"gce_network,omitempty"`
	// GCEEndpoint is the Compute Engine API's URL, for an API-compatible
	// service.
	GCEEndpoint string `json:"gce_endpoint,omitempty"`

	// OSAuthURL is Keystone's URL; it may come from the credential's
	// clouds.yaml entry or OS_AUTH_URL instead.
	OSAuthURL string   `json:"os_auth_url,omitempty"`
	OSRegion  string   `json:"os_region,omitempty"`
	OSZones   []string `json:"os_zones,omitempty"`
	OSImage   string   `json:"os_image,omitempty"`
	OSNetwork string   `json:"os_network,omitempty"`
	// OSFloatingNetwork is the external network a floating IP for each
	// node comes from; without it nodes are reached on their fixed
	// address.
	OSFloatingNetwork string `json:"os_floating_network,omitempty"`

	// SSHCIDRs are the addresses a cloud district's security group lets
	// SSH in from: where transit runs (default 0.0.0.0/0; the nodes take
	// only the cluster's key).
	SSHCIDRs []string `json:"ssh_cidrs,omitempty"`
	// APICIDRs are the addresses a cloud district's security group lets
	// in to the Kubernetes API server's port (6443): kubectl from
	// outside the cluster. Default none.
	APICIDRs []string `json:"api_cidrs,omitempty"`

	LocalSubnet string `json:"local_subnet,omitempty"`

	// KubernetesInstall is how Kubernetes gets onto the district's nodes
	// ("packages" or "bundle"; see Install for the default).
	KubernetesInstall string `json:"kubernetes_install,omitempty"`
	// KubernetesBundle is the bundle directory (`make bundle`) a district
	// installing from a bundle uploads from, relative to districts.json;
	// default $TRANSIT_BUNDLE. A district installing from packages takes
	// only transit's own images (its controllers', which no registry has)
	// from it.
	KubernetesBundle string `json:"kubernetes_bundle,omitempty"`

	// Currency is the ISO 4217 code of the district's hourly prices
	// (default: prices.json's, else USD).
	Currency string `json:"currency,omitempty"`

	Flavors []DistrictFlavor `json:"flavors"`
}

// DistrictFlavor maps a cluster flavor to the provider's machine type.
type DistrictFlavor struct {
	Type         string `json:"type,omitempty"`
	Flavor       string `json:"flavor"`
	InstanceType string `json:"instance_type,omitempty"` // aws
	MachineType  string `json:"machine_type,omitempty"`  // gce
	OSFlavor     string `json:"os_flavor,omitempty"`     // openstack
	// HourlyPrice is what one machine of the flavor costs an hour in the
	// district's currency; it wins over prices.json's. Nil: unpriced
	// here.
	HourlyPrice *float64 `json:"hourly_price,omitempty"`
}

// MachineType returns the provider machine type for a flavor, and whether
// the district maps it.
func (d District) MachineType(flavor string) (string, bool) {
	for _, f := range d.Flavors {
		if f.Flavor == flavor {
			switch d.Provider {
			case ProviderAWS:
				return f.InstanceType, true
			case ProviderGCE:
				return f.MachineType, true
			case ProviderOpenStack:
				return f.OSFlavor, true
			default:
				return "", true
			}
		}
	}
	return "", false
}

// Identity is what makes a district the place it is: its provider and
// where in it (project, region, network, endpoint), keyed by the
// districts.json key. Zones, images, flavors and credentials may change
// under nodes; these may not.
func (d District) Identity() map[string]string {
	id := map[string]string{"provider": d.Provider}
	set := func(k, v string) {
		if v != "" {
			id[k] = v
		}
	}
	switch d.Provider {
	case ProviderAWS:
		set("aws_region", d.AWSRegion)
		set("aws_vpc_id", d.AWSVPCID)
		set("aws_endpoint", d.AWSEndpoint)
	case ProviderGCE:
		set("gce_project_id", d.GCEProjectID)
		set("gce_region", d.GCERegion)
		set("gce_network", d.GCENetwork)
		set("gce_endpoint", d.GCEEndpoint)
	case ProviderOpenStack:
		set("os_auth_url", d.OSAuthURL)
		set("os_region", d.OSRegion)
		set("os_network", d.OSNetwork)
	case ProviderLocal:
		set("local_subnet", d.LocalSubnet)
	}
	return id
}

// Zones returns the district's zones for spreading nodes, in file order.
func (d District) Zones() []string {
	switch d.Provider {
	case ProviderAWS:
		return d.AWSZones
	case ProviderGCE:
		return d.GCEZones
	case ProviderOpenStack:
		return d.OSZones
	}
	return nil
}

// Providers.
const (
	ProviderAWS       = "aws"
	ProviderGCE       = "gce"
	ProviderOpenStack = "openstack"
	ProviderLocal     = "local"
)

// Credential is one entry of credentials.json. Secret fields never print.
type Credential struct {
	Type     string `json:"type"`
	ID       string `json:"id"`
	Provider string `json:"provider"`

	AWSAccessKeyID     string `json:"aws_access_key_id,omitempty"`
	AWSSecretAccessKey Secret `json:"aws_secret_access_key,omitempty"`
	AWSSessionToken    Secret `json:"aws_session_token,omitempty"`
	AWSProfile         string `json:"aws_profile,omitempty"`

	GCEKeyFile string `json:"gce_key_file,omitempty"`

	OSCloud                       string `json:"os_cloud,omitempty"`
	OSUsername                    string `json:"os_username,omitempty"`
	OSPassword                    Secret `json:"os_password,omitempty"`
	OSProjectName                 string `json:"os_project_name,omitempty"`
	OSDomainName                  string `json:"os_domain_name,omitempty"`
	OSApplicationCredentialID     string `json:"os_application_credential_id,omitempty"`
	OSApplicationCredentialSecret Secret `json:"os_application_credential_secret,omitempty"`

	// StateKey is the age identity sealing the secrets of a remote state
	// store whose URL names this credential (credential_id=…).
	StateKey Secret `json:"state_key,omitempty"`
}

// Resources is resources.json: what transit created and tracks. It is a
// cache and a report; every run re-reads the clouds.
type Resources struct {
	Type    string `json:"type"` // "resources"
	Version int    `json:"version"`
	Cluster string `json:"cluster"`
	// Lineage tells this cluster apart from another of the same name (in
	// one account, or one project on two laptops): it is generated at the
	// first apply and carried by every resource as the transit-lineage tag.
	Lineage string `json:"lineage,omitempty"`
	// Serial increases on every write, so a reader can tell two
	// snapshots apart.
	Serial    int64     `json:"serial"`
	UpdatedAt time.Time `json:"updated_at,omitzero"`
	// PlatformFormedAt is when a master first reported being one (or
	// transit's init of one succeeded). From then on transit never
	// initialises another platform over the nodes unless asked to rebuild
	// it. No observation clears it: only transit terminating the
	// cluster's last node does.
	PlatformFormedAt time.Time `json:"platform_formed_at,omitzero"`
	// Districts records the identity of each district that has nodes or
	// a group (provider, project, region, endpoint: District.Identity),
	// so a districts.json edit that points a district elsewhere is
	// refused instead of read as "every machine is gone".
	Districts map[string]map[string]string `json:"districts,omitempty"`
	// NodeNumbers is the highest node number used per role in this
	// lineage, so a name is never given twice.
	NodeNumbers map[string]int `json:"node_numbers,omitempty"`
	// Failures counts, per deployment line ("district/flavor/role"),
	// the launched nodes in a row that failed to install or join.
	Failures map[string]Failure `json:"failures,omitempty"`
	// Autoscale is what transit autoscale decided (autoscale.go).
	Autoscale *AutoscaleState `json:"autoscale,omitempty"`
	// MeshPeers is a digest of the mesh every node was last given in
	// full (each node's mesh address, key and endpoints): when the live
	// nodes' digest differs, a run gives every node its peers again.
	MeshPeers string `json:"mesh_peers,omitempty"`
	// MeshRetired holds the mesh addresses of nodes that left while
	// other nodes may still have them among their peers (a machine
	// stopped meanwhile keeps its last peers): address → those nodes. An
	// address is given again only once none is left, so no node sends a
	// new node's traffic to a removed node's key.
	MeshRetired map[string][]string `json:"mesh_retired,omitempty"`
	// Mesh is network.mesh as the platform was formed with it: it stays
	// while the platform lives, whatever the default for later
	// deployments would be (nodes on the mesh and nodes off it would not
	// reach each other).
	Mesh string `json:"mesh,omitempty"`
	// Launching are the launches transit asked a cloud for and has no
	// answer to yet: written before the cloud is asked, so a run killed
	// before it heard back leaves the next run a record of a machine
	// that may exist although no listing shows it yet.
	Launching      []Launching     `json:"launching,omitempty"`
	Nodes          []Node          `json:"nodes"`
	SecurityGroups []SecurityGroup `json:"security_groups"`
}

// ResourcesVersion is the resources.json schema version this build writes;
// it reads every version from 1 on.
const ResourcesVersion = 2

// Launching is a launch transit asked for without an answer yet: the
// node id the machine carries, its district, when transit asked, and how
// many observations since then showed no such machine.
type Launching struct {
	Node     string    `json:"node"`
	District string    `json:"district"`
	At       time.Time `json:"at"`
	Unseen   int       `json:"unseen,omitempty"`
}

// Failure is a deployment's run of failed joins: launches back off after
// a few in a row.
type Failure struct {
	Count     int       `json:"count"`
	LastError string    `json:"last_error"`
	LastAt    time.Time `json:"last_at"`
}

// Node is a machine transit launched (or adopted) for a cluster.
type Node struct {
	Type       string `json:"type,omitempty"` // "node"
	ID         string `json:"id"`
	Cluster    string `json:"cluster"`
	District   string `json:"district"`
	Role       string `json:"role"`
	Flavor     string `json:"flavor"`
	ProviderID string `json:"provider_id"`
	Zone       string `json:"zone,omitempty"`
	PublicIP   string `json:"public_ip,omitempty"`
	PrivateIP  string `json:"private_ip,omitempty"`
	// MeshIP is the node's address in the cluster's mesh (network.go),
	// kept for its life; MeshKey its WireGuard public key, made on the
	// node (the private key never leaves it).
	MeshIP  string `json:"mesh_ip,omitempty"`
	MeshKey string `json:"mesh_key,omitempty"`
	// MeshTaken is the digest of the mesh peers the node last took: a
	// node whose digest is not the live nodes' is owed its peers,
	// whatever its addresses (a machine started again at the same ones).
	MeshTaken string `json:"mesh_taken,omitempty"`
	// MeshKeyAt is when transit recorded the node's current mesh key: a
	// key older than network.key_max_age is rotated (a node without it
	// counts from CreatedAt).
	MeshKeyAt time.Time `json:"mesh_key_at,omitzero"`
	// MeshKeyNext is the public half of the key a rotation under way
	// moves the node to: made on the node, recorded before any peer is
	// given it, so a run killed halfway finishes the rotation.
	MeshKeyNext string `json:"mesh_key_next,omitempty"`
	// MeshRotate says why the node's key must rotate before its age says
	// so: a machine answered with it (a copy of the node's disk).
	MeshRotate string            `json:"mesh_rotate,omitempty"`
	Tags       map[string]string `json:"tags,omitempty"` // user tags, applied as node labels
	Phase      Phase             `json:"phase"`
	// Message says why the node is in its phase when that needs saying
	// (a refused drain, a failed join).
	Message string `json:"message,omitempty"`
	// JoinFailed says an install or join of this machine failed; once the
	// platform confirms it is no member, it is replaced.
	JoinFailed bool `json:"join_failed,omitempty"`
	// CordonedByTransit says transit's own drain cordoned the node, so
	// transit may make it schedulable again; a cordon set by a person is
	// left alone.
	CordonedByTransit bool `json:"cordoned_by_transit,omitempty"`
	// NotReadySince is when the platform first reported the member not
	// ready (strategy.replace_unhealthy_after counts from it).
	NotReadySince time.Time `json:"not_ready_since,omitzero"`
	// StartingSince is when transit first saw the machine not yet running
	// (pending, or without an address): the wait for it is bounded from
	// then, across runs.
	StartingSince time.Time `json:"starting_since,omitzero"`
	// Machine is what the cloud reports of the machine when it does not
	// run: "stopped" or "failed"; empty while it runs or starts.
	Machine string `json:"machine,omitempty"`
	// CopyOf is the node id this machine's tags claim while the platform
	// (or, failing that, resources.json) says another machine is that
	// node: a copy (an image or launch template made from a node), which
	// is tracked under its provider id and terminated, never drained.
	CopyOf    string    `json:"copy_of,omitempty"`
	CreatedAt time.Time `json:"created_at,omitzero"`
	UpdatedAt time.Time `json:"updated_at,omitzero"`
}

// Key is the deployment line the node belongs to.
func (n Node) Key() DeploymentKey {
	return DeploymentKey{District: n.District, Flavor: n.Flavor, Role: n.Role}
}

// Addresses returns the node's distinct non-empty addresses.
func (n Node) Addresses() []string {
	var out []string
	for _, a := range []string{n.PublicIP, n.PrivateIP} {
		if a != "" && (len(out) == 0 || out[0] != a) {
			out = append(out, a)
		}
	}
	return out
}

// Phase is where a node is in its life.
type Phase string

// Node phases, in order of a normal life.
const (
	PhaseLaunched    Phase = "launched"    // the machine runs, not yet in the platform
	PhaseJoined      Phase = "joined"      // a healthy member of the platform
	PhaseNotReady    Phase = "not-ready"   // a member the platform reports unhealthy
	PhaseCordoned    Phase = "cordoned"    // a member someone else made unschedulable
	PhaseDraining    Phase = "draining"    // cordoned by transit; workloads moving away
	PhaseDrained     Phase = "drained"     // no workloads left; ready to leave
	PhaseLeft        Phase = "left"        // removed from the platform
	PhaseTerminating Phase = "terminating" // the cloud is deleting the machine
	// PhaseStopped: the cloud reports the machine of a member stopped
	// (it may run again): not ready, replaced after
	// strategy.replace_unhealthy_after like any unhealthy member, removed
	// through drain, remove, terminate. Never counted as gone.
	PhaseStopped Phase = "stopped"
	// PhaseFailed: a machine that is no member and will not become one:
	// its launch ended in the cloud's failed or stopped state, it did not
	// run within the start timeout, or the cloud lists running a machine
	// transit terminated. It is terminated and replaced.
	PhaseFailed Phase = "failed"
)

// Member says a node in phase p is in the platform, by its observed
// phase: joined, possibly not ready, cordoned or on its way out.
func (p Phase) Member() bool {
	switch p {
	case PhaseJoined, PhaseNotReady, PhaseCordoned, PhaseDraining, PhaseDrained, PhaseStopped:
		return true
	}
	return false
}

// SecurityGroup is a district's firewall for a cluster: all traffic from the
// cluster's node addresses, SSH from the operator.
type SecurityGroup struct {
	Type       string   `json:"type,omitempty"` // "security_group"
	ID         string   `json:"id"`
	Cluster    string   `json:"cluster"`
	District   string   `json:"district"`
	ProviderID string   `json:"provider_id"`
	Sources    []string `json:"sources"`
	// MeshPort is the node mesh's UDP port the group lets in from
	// anywhere (a cluster on the mesh); 0 when it does not.
	MeshPort  int       `json:"mesh_port,omitempty"`
	CreatedAt time.Time `json:"created_at,omitzero"`
	UpdatedAt time.Time `json:"updated_at,omitzero"`
}

// Identity tags transit puts on everything it creates. Nothing without them
// is ever touched.
const (
	TagCluster  = "transit-cluster"
	TagDistrict = "transit-district"
	TagRole     = "transit-role"
	TagFlavor   = "transit-flavor"
	TagNode     = "transit-node"
	TagGroup    = "transit-group"
	TagLineage  = "transit-lineage"
)
