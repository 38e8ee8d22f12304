// Package aws is the infrastructure driver of AWS districts, on
// aws-sdk-go-v2's EC2 client. A district is one region (aws_region) and
// one VPC: aws_vpc_id, else the VPC of aws_subnet_ids, else the region's
// default VPC. aws_endpoint points the client at another EC2 API, such as
// cloudsim/ec2.
//
// Credentials: the district's credential's access key (aws_access_key_id,
// aws_secret_access_key, aws_session_token) or shared-config profile
// (aws_profile); without a credential the SDK's default chain
// (environment, shared config and SSO, the instance's role). A refused or
// missing credential is provider.ErrCloudAuth, naming the credential id,
// never a secret.
//
// Nodes: RunInstances with the image (aws_image_id, else the newest
// available image named aws_image_name owned by aws_image_owner, default
// "self"; without either the newest debian-12-amd64-* of Debian's account
// 136693071363), the flavor's instance_type, the cluster's key imported
// once as key pair "transit-<cluster>", user data that lets root in with
// that key, one network interface with a public address in the district's
// group, the spec's tags on the instance and its volume, and a client
// token derived from the node id, cluster, lineage and district, so a
// create whose answer is lost never makes a second machine. A node goes
// to Node.Zone if set, else to the subnet of aws_subnet_ids or the zone
// of aws_zones (default: every available zone) holding the fewest of the
// cluster's live instances in the district, launches in flight included.
// Launch polls until the instance runs with its addresses, then reads the
// SSH host keys cloud-init prints on the console, for up to
// Options.HostKeyWait, asking for the latest output (Latest=true): what
// EC2 answers without it is posted minutes after the instance runs.
//
// List finds instances and groups by the transit-cluster tag (and
// transit-district, when set); tags AWS itself adds ("aws:" prefix) are
// not reported. pending and stopped instances are pending, shutting-down
// and stopping ones terminating, terminated ones left out. Terminate
// refuses a machine without transit's cluster tag and does not wait.
//
// Groups: one security group per cluster and district, named by
// provider.GroupName, tagged with the spec's tags; transit's ingress is
// all traffic from each source (/32), UDP GroupSpec.MeshPort from
// 0.0.0.0/0 while the cluster is on the node mesh (it then has no
// source), TCP 22 from ssh_cidrs (default 0.0.0.0/0) and TCP 6443 from
// api_cidrs, each rule described as transit's ("transit: ..."). EnsureGroup
// authorizes and revokes only the difference among those (and adds spec
// tags the group lacks): an operator's rules stay, and one identical to a
// rule transit needs is marked as transit's in place. Group.Sources are
// the all-traffic sources, Group.MeshPort the port of transit's UDP rule
// from 0.0.0.0/0. DeleteGroup retries DependencyViolation while
// instances are terminating, up to Options.GroupWait; a group
// holding an operator's rules stays, without transit's rules and tags.
// GroupLimit counts a rule per source, SSH and API block, and one for
// the mesh, against EC2's default 60 inbound rules per group.
//
// Every request is retried by the SDK's standard retryer on throttling,
// 5xx answers and connection errors, with exponential backoff and full
// jitter, up to Options.RetryMaxAttempts; what is still throttled then is
// provider.ErrThrottled. Quota refusals (*LimitExceeded) are
// provider.ErrQuota naming the quota, values EC2 refuses from districts.json
// districts.ErrInvalid naming the key.
package aws
