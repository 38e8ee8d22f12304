// Package ec2 is cloudsim's EC2 front end: an http.Handler that speaks the
// EC2 Query API (form-encoded requests, Action=...&Version=2016-11-15, XML
// answers in the EC2 namespace, EC2's error document and status codes), so
// that aws-sdk-go-v2's service/ec2 client works against it unmodified.
//
// Every request must be signed (Signature Version 4) with an access key
// the Server knows (Options.Credentials; default DefaultAccessKeyID and
// DefaultSecretAccessKey); the signature is verified, and an unknown key
// or a bad signature is answered 401 AuthFailure. The region is the
// signature's credential scope: any name shaped like a region exists, with
// Options.Zones zones (region+"a", "b", ...), a default VPC
// (172.31.0.0/16), a default subnet per zone and a default security group.
//
// Served actions: DescribeAvailabilityZones; DescribeImages (ImageId,
// Owner incl. "self", filters name, owner-id, owner-alias, architecture,
// state, ...); DescribeVpcs, DescribeSubnets; ImportKeyPair (ed25519 and
// RSA), DescribeKeyPairs (IncludePublicKey), DeleteKeyPair;
// CreateSecurityGroup (TagSpecifications), DescribeSecurityGroups,
// AuthorizeSecurityGroupIngress (TagSpecifications of type
// security-group-rule tag the new rules) and RevokeSecurityGroupIngress
// (CIDR sources only, a range's Description kept; a duplicate is one
// whatever its description), UpdateSecurityGroupRuleDescriptionsIngress,
// DescribeSecurityGroupRules, DeleteSecurityGroup (DependencyViolation
// while an instance that is not terminated uses it); CreateTags,
// DeleteTags (instances, groups, rules, VPCs, subnets, key pairs),
// DescribeTags; RunInstances (ImageId, InstanceType, KeyName, SecurityGroupId(s),
// SubnetId or one NetworkInterface, Placement.AvailabilityZone, UserData,
// TagSpecifications, ClientToken, MinCount/MaxCount); DescribeInstances;
// TerminateInstances; StopInstances and StartInstances;
// DescribeInstanceStatus; GetConsoleOutput
// (Latest). Describe filters take EC2's names
// (tag:<key>, tag-key, instance-state-name, client-token, group-name,
// vpc-id, ...) and wildcards; an unknown filter is refused as EC2 refuses
// it. Describe actions that page on EC2 page here with MaxResults and
// NextToken; SetPageSize forces small pages.
//
// Every security group rule has an id (sgr-...) from the moment it is
// made until it is revoked, a new group's default egress rule (all
// traffic to 0.0.0.0/0) included. DescribeSecurityGroupRules lists the
// rules of the region's groups, ingress and egress, in the order they
// were made: securityGroupRuleId, groupId, groupOwnerId, isEgress,
// ipProtocol, fromPort and toPort (-1 for all), cidrIpv4 or cidrIpv6 (no
// referencedGroupInfo: group sources are not emulated), description,
// tags and ARN; SecurityGroupRuleId.N (an unknown id is
// InvalidSecurityGroupRuleId.NotFound, a malformed one .Malformed),
// filters group-id, security-group-rule-id and tag:<key>, MaxResults
// 5-1000. DescribeTags lists one entry per resource and tag key (resource
// types instance, security-group, security-group-rule, vpc, subnet and
// key-pair; terminated instances while they are listed, none hidden by
// VisibilityLag), with filters key, value, resource-id, resource-type and
// tag:<key> (the tags of resources that have that tag), MaxResults
// 5-1000. DescribeInstanceStatus answers running instances, or with
// IncludeAllInstances every listed one, each with its zone, state, and
// system and instance status: not-applicable unless running, else
// initializing (detail reachability initializing) for
// Options.StatusCheckDelay (default 2 minutes, scaled) after it started
// running, this run, then ok (reachability passed); the emulator's
// instances never fail their checks and have no scheduled events.
// InstanceId.N answers as DescribeInstances does (unknown ids
// InvalidInstanceID.NotFound; a listed instance that is not running is
// left out without IncludeAllInstances), and cannot be combined with
// MaxResults (5-1000); filters availability-zone, instance-state-name,
// instance-state-code, instance-status.status, system-status.status,
// instance-status.reachability, system-status.reachability and event.*.
//
// Instances live by the sim's AWS latencies (Server.SetLatency replaces
// them): pending until Launch has passed, running, shutting-down from
// TerminateInstances until Terminate has passed, then terminated and still
// listed for Options.TerminatedVisible. StopInstances makes a running
// instance stopping until Stop has passed, then stopped (state reason
// Client.UserInitiatedShutdown); a stopped instance keeps its private
// address and gives its auto-assigned public one back; StartInstances
// makes it pending until Start has passed, then running with a new public
// address. As on EC2, stopping an instance that never ran, one shutting
// down or terminated, or starting one that is stopping or gone, answers
// IncorrectInstanceState (the whole request fails); stopping a stopped or
// starting a running one is no error; a stopped instance can be
// terminated; StartInstances counts against the vCPU quota. Security group changes take
// GroupCreate, GroupUpdate or GroupDelete before they answer. Without a
// zone or subnet RunInstances always picks the region's first zone.
// Options.VisibilityLag hides a new instance from DescribeInstances for
// a while, as EC2's eventual consistency does. Quotas: Options.VCPULimit (VcpuLimitExceeded) and Options.RulesPerGroup
// (RulesPerSecurityGroupLimitExceeded). ClientToken makes RunInstances
// idempotent: the same token returns the same reservation, with other
// arguments IdempotentParameterMismatch.
//
// Injected faults (sim.Faults) are answered as EC2 answers: FaultThrottle
// 503 RequestLimitExceeded, FaultQuota 400 InstanceLimitExceeded or
// VcpuLimitExceeded (the message names any other quota), FaultServer 500
// InternalError, FaultLost the same after doing the request, FaultAuth
// 401 AuthFailure, FaultSlow a delay. Faults for cloudsim.OpAuth hit every
// request, since EC2 checks credentials on each. FaultFailed on a launch
// lets RunInstances succeed and its instances go pending, then, when they
// would run, terminated with state reason Server.InternalError, or, if
// the fault's Reason is Server.InsufficientInstanceCapacity, stopped with
// it (other reasons: terminated with that code).
//
// Without a Backer, private addresses come from the subnet, public ones
// from 198.18.0.0/15 (RFC 2544, never routed), and each instance gets an
// ed25519 host key, printed on its console in cloud-init's "BEGIN SSH HOST
// KEY KEYS" block once it runs.
//
// The console has EC2's two views. GetConsoleOutput with Latest=true
// answers what the machine printed in its last boot, host keys included,
// from the moment it runs (a stopped instance, or one started again and
// pending, shows the boot before's; one that never ran, nothing). Without
// Latest it answers what EC2 last posted, with the post's timestamp: EC2
// posts the console, as it is then, Options.ConsolePostDelay (default 3
// minutes, scaled) after each boot, stop and termination, and before the
// first post there is no output. So a freshly running instance shows no
// host keys without Latest for those minutes, as on EC2, whose post comes
// "shortly after" the boot, and one started again shows the run before's
// output until its new boot is posted. With sim.Backer, RunInstances starts
// Backer.Start(ctx, "aws:"+region, <instance id>, <the key pair's public
// key>) in the background; the instance runs once the latency has passed
// and the machine is up, its public and private address is the machine's,
// and its console shows the machine's host keys. Every change of a
// region's security group rules calls Backer.Allow with the union of the
// IPv4 ingress rules of its groups (protocol, ports and CIDR of each; "-1"
// is every protocol, icmp every type; IPv6 ranges, icmpv6 and other
// protocols by number left out); TerminateInstances calls Backer.Stop. StopInstances calls
// Backer.PowerOff (releasing the public address; the instance is stopping
// until the machine is off) and StartInstances Backer.PowerOn (pending
// until the machine is up again, at its new public address; a machine
// that does not come up leaves the instance stopped with
// Server.InsufficientInstanceCapacity).
//
// Resources lists what exists (for checks that nothing is left), Plant
// creates an instance as another tool would, Remove terminates one, Stop
// and Start stop and start one (StopInstances' and StartInstances'
// effect, outside any client), Fail makes one end as EC2 ends an instance
// it gave up on.
package ec2
