// Package openstack is the infrastructure driver of OpenStack districts,
// on github.com/gophercloud/gophercloud/v2. A district is one region
// (os_region) of one cloud, whose Keystone is at os_auth_url (or the
// credential's clouds.yaml entry's, or OS_AUTH_URL), optionally spread
// over Nova availability zones (os_zones).
//
// Credentials: the district's credential's os_username and os_password
// (with os_project_name and os_domain_name, default "Default"), or its
// os_application_credential_id and secret, or os_cloud naming an entry of
// clouds.yaml (found where python-openstackclient looks, or at
// OS_CLIENT_CONFIG_FILE); without one, the OS_* variables an openrc file
// sets. The driver authenticates at its first request and again when the
// token expires. A refused credential is provider.ErrCloudAuth naming the
// credential id, never its secret.
//
// Nodes: a Nova server with the image os_image (a Glance name or id,
// default debian-12), the flavor's os_flavor (a name or id), one port on
// os_network (default: the project's only network that is not external),
// the district's security group, the cluster's key pair (imported once,
// named by the key's hash), cloud-config user data that lets root in with
// the cluster's key, and transit's tags as server metadata. The server's
// name is the node id plus a hash of cluster, lineage, district and node,
// so a create whose answer was lost is found by the next attempt. Launch
// waits for ACTIVE with a fixed address (a server that went to ERROR is
// deleted and its fault reported), gives it a floating IP from
// os_floating_network if the district names one (nodes are reached on
// it; without, on the fixed address), and reads the host keys cloud-init
// prints on the console for up to Options.HostKeyWait.
//
// List reads every server of the project (all pages) and keeps those
// whose metadata carries the cluster; a server whose task_state is
// deleting is terminating. Terminate looks first, refuses a server
// without transit's cluster tag, releases its floating IPs (Neutron keeps
// them otherwise), deletes it, and does not wait.
//
// Groups: one Neutron security group per cluster and district, its
// identity as JSON in the description, with an ingress rule for all
// traffic from each node's address, one for UDP GroupSpec.MeshPort from
// 0.0.0.0/0 while the cluster is on the node mesh (it then has no node
// address), one for TCP 22 from each of ssh_cidrs (default 0.0.0.0/0)
// and one for TCP 6443 from each of api_cidrs, each described as
// transit's. EnsureGroup adds the missing rules in one bulk request and
// deletes transit's extra ones: an operator's rules stay, and one
// identical to a rule transit needs becomes transit's. Group.MeshPort is
// the port of transit's UDP rule from 0.0.0.0/0. DeleteGroup retries
// while Neutron says the group is in use by servers still being deleted;
// a group holding an operator's rules stays, without transit's rules and
// identity. GroupLimit counts a rule per address, SSH and API block, one
// for the mesh, the group's two egress rules and the default group's
// four against Neutron's default 100 rules per project.
//
// Every request is retried on 429, 5xx answers and connection errors,
// with exponential backoff and full jitter, up to
// Options.RetryMaxAttempts; creates look for what a lost answer made
// before they make it again. Still rate-limited then is
// provider.ErrThrottled; Nova's "Quota exceeded" is provider.ErrQuota
// naming the quota, and so is Neutron's 409 OverQuota (security groups,
// their rules, floating IPs: per project, the default group and every
// group's own egress rules counted), naming the resource, the project
// and what to do; an unknown image, flavor, network, zone or region is
// districts.ErrInvalid naming the district key.
package openstack
