// Package kubernetes is transit's Kubernetes platform driver: kubeadm over
// SSH on every provider. It installs containerd, the kubelet and kubeadm
// (from a bundle uploaded over SSH, or from the distribution's and
// Kubernetes' package repositories), initialises the first master, joins
// workers and further masters (stacked etcd), keeps the deployment's tags
// as node labels, drains through the Eviction API and removes nodes
// without losing etcd quorum.
//
// The API server and etcd, as their masters report them, decide
// membership, roles and quorum; transit reaches both through SSH tunnels
// to a master, so no port but SSH needs to be open to the operator. A
// member is a master when it is a control-plane node (an etcd member,
// voting or still a learner, or a Node with kubeadm's control-plane
// label), and a voter when its etcd member votes. Its ProviderID is its
// Node's spec.providerID as the cluster records it (empty unless a
// kubelet flag or a cloud controller set one), its addresses the Node's
// InternalIP and ExternalIP. When no API server answers, the nodes are
// asked over SSH what they hold; a node that does not answer is never
// taken to hold nothing.
package kubernetes
