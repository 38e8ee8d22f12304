// Package gce is cloudsim's Compute Engine front end: the subset of the
// Compute Engine v1 REST API that drivers/gce uses, in its wire format, so
// that cloud.google.com/go/compute/apiv1 is what gets tested.
//
// Served, under /compute/v1/projects/{project}/:
//
//   - zones/{zone}/instances: insert (with requestId: a repeated request
//     answers the first one's operation), get, list, delete, stop, start,
//     and getGuestAttributes (queryPath hostkeys/, as the guest agent
//     publishes a machine's SSH host keys once it runs);
//   - aggregated/instances, with maxResults and pageToken;
//   - zones/{zone}/operations/{name} and global/operations/{name}: get and
//     wait (wait answers when the operation is done, or after at most two
//     minutes, as Compute Engine does); zones/{zone}/operations: list,
//     filtered by name, status, operationType, targetId, targetLink;
//   - global/firewalls: insert, get, list, patch, delete;
//   - global/images/{name} and global/images/family/{family} of any
//     project (DefaultImages);
//   - zones/{zone}/machineTypes/{name}: get, for the predefined types of
//     the n1, e2, n2, n2d, c2, t2d and c3 families (standard, highmem,
//     highcpu as the family has them) with their published vCPUs and
//     memory, and the shared-core e2-micro, e2-small, e2-medium, f1-micro
//     and g1-small (isSharedCpu); another name is 404 notFound.
//
// Lists take a filter of one or more comparisons "field = value" (or !=),
// each optionally parenthesised, with fields name, status and labels.KEY.
//
// Every request needs a bearer token: an access token from the token
// endpoint (POST /token, the OAuth 2.0 JWT bearer grant a service account
// key's token_uri names), or a JWT the service account signed itself.
// Options.Accounts are the service accounts whose keys are accepted.
//
// Instances go PROVISIONING → RUNNING after the profile's GCE launch
// latency (the insert operation is done then); delete makes them STOPPING
// until the profile's termination latency has passed (the delete
// operation's duration), whatever their status. stop makes a RUNNING
// instance STOPPING for the Stop latency (the stop operation's duration),
// then TERMINATED, Compute Engine's word for stopped: it keeps its
// networkIP and gives its ephemeral natIP back; start makes a TERMINATED
// one PROVISIONING, STAGING, then RUNNING after the Start latency, with a
// new natIP. Stopping a stopped instance or starting a running one is an
// operation done at once; stopping one that is being made, or starting
// one that is STOPPING, and either while it is deleted, answers 400
// resourceNotReady. A firewall exists once its insert operation is
// done (GroupCreate) and a patch or delete takes effect when its
// operation is done (GroupUpdate, GroupDelete). A firewall with no
// sourceRanges allows every source, as in Compute Engine; one whose
// sourceRanges mix IPv4 and IPv6 is refused (400 invalid, "Invalid value
// for field 'resource.sourceRanges[i]': ..."), as Compute Engine refuses
// it, and so is one with ports on a protocol other than tcp, udp or sctp,
// or a port that is neither a port nor a range ("22", "30000-32767").
//
// Errors are Google's JSON errors with Compute Engine's reasons:
// notFound, alreadyExists, invalid, rateLimitExceeded (HTTP 429),
// quotaExceeded (403, "Quota 'X' exceeded"), authError (401),
// resourceNotReady (400). Injected faults (cloudsim.Faults) map onto
// those; FaultFailed on an insert lets it succeed and the instance be
// TERMINATED when it would have run, with the fault's Reason (default a
// host error's words) as its statusMessage.
//
// With a cloudsim.Backer each instance is a real machine in backing
// region "gce:{region}" that accepts the keys of the instance's ssh-keys
// metadata for their user; its address is the instance's natIP (and its
// private address networkIP), and the enabled firewalls' IPv4 rules
// (each allowed protocol and port or port range from each source range,
// none meaning every address; esp, ah, sctp and ipip left out) are every
// backing region's firewall (Backer.Allow). stop powers the machine off
// (Backer.PowerOff, releasing its public address; STOPPING until it is
// off) and start powers it on again (STAGING until it is up, at its new
// address).
//
// Plant, Remove, Stop, Start and Fail (TERMINATED at once, as after a
// host failure) act on an instance outside any client.
package gce
