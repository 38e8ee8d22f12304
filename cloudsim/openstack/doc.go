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
// delete, os-getConsoleOutput). A server is BUILD until the profile's
// launch latency has passed (and, backed, its machine runs), then ACTIVE;
// after delete its task_state is "deleting" until the termination latency
// has passed (and its machine is gone), then it is gone. The console shows
// the host keys the way cloud-init prints them.
//
// Neutron: networks, ports (one per server), security groups and rules
// (single and bulk create; a group some server still uses answers 409
// SecurityGroupInUse), floating IPs from an external network. Group
// changes take the profile's group latencies. Glance: images by name.
//
// Faults map onto OpenStack's answers: throttle 429 overLimit, quota 403
// "Quota exceeded for instances", server 500, auth 401, lost (done, then
// 500) and slow. Backed (sim.Backer set), each server is a real machine in
// region "openstack:REGION": its fixed address is the machine's, its key
// pair's public key lets root in, and the union of the region's /32
// ingress sources is the machines' firewall.
package openstack
