// Package local is the embedded infrastructure driver: a district of
// provider "local" is a Linux bridge on this host, a node is a set of Linux
// namespaces that behaves like a small VM, and the district's security group
// is an iptables chain. Nothing is mocked: SSH, the firewall and whatever a
// platform installs on the nodes are real. It needs root and the packages
// iproute2, iptables, openssh-server and util-linux (Check).
//
// # Nodes
//
// A district has its own subnet (local_subnet, e.g. 10.240.1.0/24) and
// bridge ("tb" + 8 hex digits of the district id); the host holds the
// subnet's first address on it and is the nodes' gateway and the operator.
// A node ("ln-" + 12 hex digits) has
//
//   - its own network namespace (transit-<provider id>): a veth pair ("tv" +
//     hex) from the bridge to eth0 with an address of the subnet, lo, and a
//     default route through the host, which forwards between districts;
//   - its own cgroups, transit/<provider id> in every hierarchy, and a
//     cgroup namespace rooted there, with cgroupfs mounted again inside, so
//     dockerd or the kubelet see their cgroup as "/";
//   - its own mount namespace: private copies of /etc/docker,
//     /var/lib/docker, /etc/containerd, /var/lib/containerd,
//     /etc/kubernetes, /var/lib/kubelet, /etc/cni/net.d, /var/lib/cni,
//     /var/log/pods, /var/log/containers and /var/lib/transit, fresh tmpfs
//     on /run and /tmp, and <root>/images (the provider's "machine image",
//     container images to preload) read-only at /var/lib/transit/images;
//   - its own UTS namespace: the hostname is the transit node id;
//   - sshd as its init, listening on the node's address only, root by key
//     only, with a host key of its own.
//
// The init is detached (its own session, logs in files), so nodes outlive
// the transit process. A node can be powered off and on again as a cloud
// stops and starts a VM (power.go, what cloudsim's backed machines use):
// off, its processes, cgroups, netns and veth are gone and it is listed
// stopped, keeping its record, address, disk and host key; on, it boots
// anew from them. A running node whose init died unasked is not stopped
// but dead (see List). Launch returns once the node sends its SSH banner.
// Terminate starts a detached teardown (a shell script, like the boot and
// init scripts built by pure functions) that kills every process in the
// node's cgroups, removes them, the namespace and the veth, the node's files
// and record, and the bridge once the district has no nodes and groups.
//
// # Networks
//
// With Options.Network a district lives in a network namespace instead of
// the host's: its bridge, chains and host-side veths are made there and
// the namespace is the nodes' gateway (netns.go). Two such districts may
// share a subnet. cloudsim uses it to keep emulated cloud networks apart.
//
// # Records
//
// The host is the "cloud API". Records live under Options.Root
// (DefaultRoot):
//
//	<root>/lock                                        flock: addresses, bridges, records
//	<root>/created-dirs                                host mount points transit created
//	<root>/images/                                     optional machine image (read-only in nodes)
//	<root>/districts/<district>/groups/<chain>.json    a security group
//	<root>/districts/<district>/nodes/<id>/record.json a node: tags, address, state, resource names, pids
//	<root>/districts/<district>/nodes/<id>/boot/       boot.sh, init.sh, sshd_config, keys, logs
//	<root>/districts/<district>/nodes/<id>/fs/         the node's private directories
//
// A node's record is written (state pending, with the name of every
// resource) before anything is created, so List reports an interrupted
// launch and Terminate cleans it up; List also resumes a teardown whose
// process died. List reads the records, so it works after transit crashed
// and restarted. Purge tears down everything under a root.
//
// # Firewall
//
// A cluster's group in a district is the chain "TRANSIT-" + 10 hex digits
// (its provider id), reached from FORWARD by "-o <bridge>". It accepts
// established traffic, the group's sources and, on the node mesh, the
// mesh's UDP port from anywhere ("-p udp -m udp --dport PORT", while
// GroupSpec.MeshPort is not 0), and drops the rest, so a node in another
// district (or the same one: the host filters bridged traffic too when
// br_netfilter is loaded) reaches a node only once its address is in the
// group, or on the mesh's port only. EnsureGroup refills the chain in one
// iptables-restore transaction; the group it returns and List's are read
// back from the chain (iptables -S): its sources and its mesh port. A
// chain whose jump is gone (a firewalld reload flushed FORWARD) is listed
// with neither, so the loop ensures it again. The operator's SSH from the
// host goes through OUTPUT and is always allowed. A local district holds
// one cluster.
package local
