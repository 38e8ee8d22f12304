package kubernetes

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cloudtransit/transit/provider"
)

// kubeNode is a Node as the API server lists it.
func kubeNode(name string, ready bool, labels map[string]string, addrs ...corev1.NodeAddress) corev1.Node {
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	return corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Status: corev1.NodeStatus{
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: status}},
			Addresses:  addrs,
		},
	}
}

func internal(a string) corev1.NodeAddress {
	return corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: a}
}

var controlPlane = map[string]string{labelControlPlane: ""}

func TestMembersOf(t *testing.T) {
	t.Parallel()
	tagged := kubeNode("k-worker-2", true, map[string]string{"site": "b", "by-hand": "x"}, internal("10.0.0.5"),
		corev1.NodeAddress{Type: corev1.NodeExternalIP, Address: "203.0.113.5"},
		corev1.NodeAddress{Type: corev1.NodeHostName, Address: "k-worker-2"})
	tagged.Annotations = map[string]string{annotationManaged: "site,node-role.kubernetes.io/worker"}
	tagged.Spec.ProviderID = "aws:///eu-central-1a/i-0abc"
	cordoned := kubeNode("k-worker-3", true, nil, internal("10.0.0.6"))
	cordoned.Spec.Unschedulable = true
	tests := []struct {
		name  string
		nodes []corev1.Node
		etcd  []etcdMember
		want  []provider.Member
	}{
		{
			name: "voters, a learner, workers",
			nodes: []corev1.Node{
				kubeNode("k-master-1", true, controlPlane, internal("10.0.0.2")),
				kubeNode("k-master-2", true, controlPlane, internal("10.0.0.3")),
				kubeNode("k-worker-1", true, nil, internal("10.0.0.4")),
			},
			etcd: []etcdMember{
				{ID: 1, Name: "k-master-1", PeerURL: "https://10.0.0.2:2380", Healthy: true},
				// Joining: a learner is a master that does not vote yet.
				{ID: 2, Name: "k-master-2", PeerURL: "https://10.0.0.3:2380", Learner: true, Healthy: true},
			},
			want: []provider.Member{
				{NodeID: "k-master-1", Role: "master", Voter: true, Ready: true, Labels: map[string]string{}, Addresses: []string{"10.0.0.2"}},
				{NodeID: "k-master-2", Role: "master", Ready: true, Labels: map[string]string{}, Addresses: []string{"10.0.0.3"}},
				{NodeID: "k-worker-1", Role: "worker", Ready: true, Labels: map[string]string{}, Addresses: []string{"10.0.0.4"}},
			},
		},
		{
			name: "a voter that does not answer is a master that is not ready",
			nodes: []corev1.Node{
				kubeNode("k-master-1", true, controlPlane, internal("10.0.0.2")),
				kubeNode("k-master-2", true, controlPlane, internal("10.0.0.3")),
			},
			etcd: []etcdMember{
				{ID: 1, Name: "k-master-1", PeerURL: "https://10.0.0.2:2380", Healthy: true},
				{ID: 2, Name: "k-master-2", PeerURL: "https://10.0.0.3:2380"},
			},
			want: []provider.Member{
				{NodeID: "k-master-1", Role: "master", Voter: true, Ready: true, Labels: map[string]string{}, Addresses: []string{"10.0.0.2"}},
				{NodeID: "k-master-2", Role: "master", Voter: true, Ready: false, Labels: map[string]string{}, Addresses: []string{"10.0.0.3"}},
			},
		},
		{
			name: "a member added but never started is found by its address",
			nodes: []corev1.Node{
				kubeNode("k-master-1", true, controlPlane, internal("10.0.0.2")),
				kubeNode("k-master-2", false, nil, internal("10.0.0.3")),
			},
			etcd: []etcdMember{
				{ID: 1, Name: "k-master-1", PeerURL: "https://10.0.0.2:2380", Healthy: true},
				{ID: 2, PeerURL: "https://10.0.0.3:2380", Learner: true},
			},
			want: []provider.Member{
				{NodeID: "k-master-1", Role: "master", Voter: true, Ready: true, Labels: map[string]string{}, Addresses: []string{"10.0.0.2"}},
				{NodeID: "k-master-2", Role: "master", Ready: false, Labels: map[string]string{}, Addresses: []string{"10.0.0.3"}},
			},
		},
		{
			name: "a control-plane Node without an etcd member votes nowhere",
			nodes: []corev1.Node{
				kubeNode("k-master-1", true, controlPlane, internal("10.0.0.2")),
				kubeNode("k-master-2", true, controlPlane, internal("10.0.0.3")),
			},
			etcd: []etcdMember{{ID: 1, Name: "k-master-1", PeerURL: "https://10.0.0.2:2380", Healthy: true}},
			want: []provider.Member{
				{NodeID: "k-master-1", Role: "master", Voter: true, Ready: true, Labels: map[string]string{}, Addresses: []string{"10.0.0.2"}},
				{NodeID: "k-master-2", Role: "master", Ready: true, Labels: map[string]string{}, Addresses: []string{"10.0.0.3"}},
			},
		},
		{
			name:  "labels, provider id, addresses, cordon",
			nodes: []corev1.Node{tagged, cordoned},
			want: []provider.Member{
				{NodeID: "k-worker-2", Role: "worker", Ready: true, Labels: map[string]string{"site": "b"},
					ProviderID: "aws:///eu-central-1a/i-0abc", Addresses: []string{"10.0.0.5", "203.0.113.5"}},
				{NodeID: "k-worker-3", Role: "worker", Ready: true, Draining: true, Labels: map[string]string{}, Addresses: []string{"10.0.0.6"}},
			},
		},
		{
			// Its machine was deleted behind transit's back and its
			// Node with it: etcd still counts it.
			name:  "an etcd member whose Node is gone",
			nodes: []corev1.Node{kubeNode("k-master-1", true, controlPlane, internal("10.0.0.2"))},
			etcd: []etcdMember{
				{ID: 1, Name: "k-master-1", PeerURL: "https://10.0.0.2:2380", Healthy: true},
				{ID: 3, Name: "k-master-3", PeerURL: "https://10.0.0.9:2380"},
				{ID: 4, Name: "k-master-4", PeerURL: "https://10.0.0.8:2380", Learner: true},
				{ID: 5, PeerURL: "https://10.0.0.7:2380"}, // never started, no Node: nameless
			},
			want: []provider.Member{
				{NodeID: "k-master-1", Role: "master", Voter: true, Ready: true, Labels: map[string]string{}, Addresses: []string{"10.0.0.2"}},
				{NodeID: "k-master-3", Role: "master", Voter: true, Addresses: []string{"10.0.0.9"}},
				{NodeID: "k-master-4", Role: "master", Addresses: []string{"10.0.0.8"}},
			},
		},
		{
			name: "no Nodes, no members",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if diff := cmp.Diff(tt.want, membersOf(tt.nodes, tt.etcd)); diff != "" {
				t.Errorf("members (-want +got):\n%s", diff)
			}
		})
	}
}
