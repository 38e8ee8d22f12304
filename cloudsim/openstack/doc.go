// Package openstack is cloudsim's OpenStack front end: the subset of
// Keystone v3, Nova (compute v2.1), Neutron (network v2.0) and Glance
// (image v2) that drivers/openstack uses, in the real wire format, so that
// gophercloud is what gets tested.
//
// One Server is one cloud: its Keystone issues tokens (password or
// application credential) whose catalog lists a compute, network and image
// endpoint per region, at BASE/REGION/compute/v2.1, BASE/REGION/network
// and BASE/REGION/image. Every other request must carry a token Keystone
// issued (X-Auth-Token); an unknown one answers 401, as an expired one
// does.
//
// Nova: flavors, key pairs (import, show, delete), servers (create, list
// with details filtered by name and paged by limit and marker, show,
// delete, and the actions os-getConsoleOutput, os-stop, os-start,
// forceDelete, restore). A server is BUILD until the profile's launch
// latency has passed (and, backed, its machine runs), then ACTIVE; after
// delete its task_state is "deleting" until the termination latency has
// passed (and its machine is gone), then it is gone. os-stop makes an
// ACTIVE or ERROR server ACTIVE with task_state powering-off for the Stop
// latency, then SHUTOFF (vm_state stopped, power_state 4); os-start makes
// a SHUTOFF one SHUTOFF with powering-on for the Start latency, then
// ACTIVE; its fixed address and floating IPs stay. A server in another
// vm_state, or with a task, answers 409 "Cannot 'stop' instance ... while
// it is in vm_state ...", one without a host (never scheduled) 409 "is
// not ready", as Nova does. With Options.ReclaimInterval (Nova's
// reclaim_instance_interval) a DELETE soft-deletes a server that was ever
// ACTIVE (task_state soft-deleting, then SOFT_DELETED, powered off) until
// the interval has passed; a DELETE of a SOFT_DELETED server soft-deletes
// it again (it stays, its reclaim time starts anew: Nova's soft_delete of
// it), forceDelete deletes it now, restore brings it back. The console
// shows the host keys the way cloud-init prints them.
//
// Neutron: networks, ports (one per server), security groups and rules
// (single and bulk create; a group some server still uses answers 409
// SecurityGroupInUse; a tcp or udp rule's port range is both ends or
// neither, 1 to 65535, in order: 400 SecurityGroupInvalidPortRange or
// SecurityGroupInvalidPortValue otherwise), floating IPs from an
// external network. Group
// changes take the profile's group latencies. A project's "default"
// group appears at its first security group list or create (or a server
// created without a group), with Neutron's four rules; every other group
// is made with two egress rules. Neutron's per-project quotas hold in
// each region (Options.Quotas, SetQuotas; DefaultQuotas: 10 security
// groups, 100 security group rules, 50 floating IPs), counting the
// default group and every group's own rules: a create past one answers
// 409 {"NeutronError": {"type": "OverQuota", "message": "Quota exceeded
// for resources: ['security_group_rule'].", "detail": ""}}, a bulk rule
// create all or none. Glance: images by name.
//
// Faults map onto OpenStack's answers: throttle 429 overLimit, quota 403
// "Quota exceeded for instances" from Nova and 409 OverQuota (naming the
// fault's Quota, default the resource the request makes) from Neutron,
// server 500, auth 401, lost (done, then 500) and slow; failed (on a
// create) lets the create succeed and the
// server turn ERROR when it would have been ACTIVE, with the fault's
// Reason (default Nova's "No valid host was found. ...") as its fault and
// no host. os-stop, os-start and restore are cloudsim.OpPower requests,
// forceDelete an OpTerminate one. Backed (sim.Backer set), each server is a real machine in
// region "openstack:REGION": its fixed address is the machine's, its key
// pair's public key lets root in, and the union of the region's IPv4
// ingress rules (protocol, port range, remote_ip_prefix, none meaning
// every address; rules whose remote is a group left out) is the machines'
// firewall (Backer.Allow). os-stop and soft delete power
// the machine off (Backer.PowerOff; its public address, a floating IP's,
// stays), os-start and restore power it on (a machine that does not come
// up leaves the server ERROR). Plant, Remove, Stop, Start and Fail (ERROR
// at once, with a fault) act on a server outside any client.
package openstack
