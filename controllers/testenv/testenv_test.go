package testenv

import (
	"os/exec"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// TestControllerManager: the bundle's API server serves, its
// kube-controller-manager makes a Deployment's ReplicaSet, the garbage
// collector deletes it with its Deployment, and kubectl reaches the server
// through the written kubeconfig.
func TestControllerManager(t *testing.T) {
	e := Start(t, Options{ControllerManager: true})
	ctx := t.Context()
	labels := map[string]string{"app": "web"}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default"},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](2),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "busybox"}}},
			},
		},
	}
	if err := e.Client.Create(ctx, d); err != nil {
		t.Fatal(err)
	}
	var rs appsv1.ReplicaSetList
	waitFor(t, "the Deployment's ReplicaSet", func() bool {
		return e.Client.List(ctx, &rs, client.InNamespace("default")) == nil && len(rs.Items) == 1
	})
	if err := e.Client.Delete(ctx, d, client.PropagationPolicy(metav1.DeletePropagationBackground)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the garbage collector to delete the ReplicaSet", func() bool {
		return e.Client.List(ctx, &rs, client.InNamespace("default")) == nil && len(rs.Items) == 0
	})
	out, err := exec.CommandContext(ctx, e.Kubectl, "--kubeconfig", e.Kubeconfig, "get", "namespaces", "-o", "name").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "namespace/default") {
		t.Fatalf("kubectl get namespaces: %v\n%s", err, out)
	}
}

func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("waited a minute for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
