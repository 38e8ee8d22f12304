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
// to a master, so no port but SSH needs to be open to the operator.
package kubernetes
