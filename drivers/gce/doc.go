// Package gce is the infrastructure driver of GCE districts, on
// cloud.google.com/go/compute/apiv1 (REST). A district is one project
// (gce_project_id), one region (gce_region) and its zones (gce_zones), on
// one VPC network (gce_network, default "default"). gce_endpoint points
// the client at another Compute Engine API, such as cloudsim/gce.
//
// Credentials: the district's credential's gce_key_file (a service account
// key; a relative path is relative to credentials.json), else application
// default credentials (GOOGLE_APPLICATION_CREDENTIALS, gcloud's, the
// metadata server's). A refused or missing credential is
// provider.ErrCloudAuth, naming the credential id and key file, never the
// key.
//
// Nodes: instances.insert with the image (gce_image, a name in
// gce_image_project or the district's project, or a URL; else the newest
// of gce_image_family, default debian-12, in gce_image_project, default
// debian-cloud), the flavor's machine_type, the spec's tags as labels
// (encoded reversibly, see labels.go), the group's network tag, an
// external address, ssh-keys metadata and a startup script that let root
// in with the cluster's key, and enable-guest-attributes so the guest
// agent publishes the host keys. The instance's name is the node id plus
// a hash of cluster lineage, district and node, so a create whose answer
// was lost is found by the next attempt; each request carries a requestId
// its retries repeat. A node goes to Node.Zone if set, else to the zone
// of gce_zones holding the fewest of the cluster's live instances in the
// district, launches in flight included. Launch waits for the insert
// operation and for the instance to run with its addresses, then reads
// the host keys (guest attributes hostkeys/) for up to
// Options.HostKeyWait.
//
// List finds instances by the transit-cluster label (aggregated list,
// every page) in the district's region, and firewall rules by the JSON in
// their description. PROVISIONING, STAGING and stopped instances are
// pending, STOPPING ones terminating. Terminate looks first, refuses an
// instance without transit's cluster label, and does not wait for the
// delete operation.
//
// Groups: firewall rules per cluster and district on the network,
// targeting the group's network tag: all traffic from each node's /32
// (or /128), TCP 22 from ssh_cidrs (default 0.0.0.0/0), TCP 6443 from
// api_cidrs, and UDP GroupSpec.MeshPort from 0.0.0.0/0 while the cluster
// is on the node mesh (it then has no node address). Compute Engine
// refuses a rule that mixes IPv4 and IPv6 ranges, so each is one rule
// per family: NAME and NAME-ssh for IPv4, always there, and NAME-6 and
// NAME-ssh6 for IPv6, only while they have sources; NAME-api and
// NAME-api6 exist while api_cidrs hold blocks of their family, NAME-mesh
// while there is a mesh port (a new port patches it). A rule with no
// sources would allow every address, so the IPv4 nodes' rule is disabled
// while the group has none. EnsureGroup inserts or patches them (and
// deletes an optional rule left with nothing to let in) and waits for
// their operations; DeleteGroup deletes them all and waits. A rule of one
// of those names that belongs to another group is not touched, nor is
// any firewall of another name (an operator's on the group's tag).
// Group.MeshPort is NAME-mesh's port. GroupLimit is the fuller of the
// nodes' rule's source ranges (5000 at most) and the rules the group
// takes of the project's FIREWALLS quota (100 by default, shared with
// every other rule of the project; see limits.go).
//
// Prices (transit prices) reads the Cloud Billing Catalog API
// (cloud.google.com/go/billing/apiv1, REST) at gce_endpoint too, with the
// same credentials: the On-Demand core and RAM rates of the machine
// type's family in gce_region, times its vCPUs and GiB as machineTypes.get
// gives them (see pricing.go for shared-core types and what is
// unpriced).
//
// Every request is retried on throttling (429, rateLimitExceeded), 5xx
// answers and connection errors, with exponential backoff and full
// jitter, up to Options.RetryMaxAttempts; what is still throttled then is
// provider.ErrThrottled. quotaExceeded (in an answer or an operation) is
// provider.ErrQuota naming the quota; an unknown image, network, zone or
// machine type districts.ErrInvalid naming the key.
package gce
