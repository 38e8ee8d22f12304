package testenv

import (
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

func TestMain(m *testing.M) {
	os.Exit(StopShared(m.Run()))
}

// withControllerManager is the server the tests share.
var withControllerManager = Options{ControllerManager: true}

// TestControllerManager: the bundle's API server serves, its
// kube-controller-manager makes a Deployment's ReplicaSet, the garbage
// collector deletes it with its Deployment, and kubectl reaches the server
// through the written kubeconfig.
func TestControllerManager(t *testing.T) {
	e := Shared(t, "controller-manager", withControllerManager)
	ns := e.Namespace(t)
	ctx := t.Context()
	labels := map[string]string{"app": "web"}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns},
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
		return e.Client.List(ctx, &rs, client.InNamespace(ns)) == nil && len(rs.Items) == 1
	})
	if err := e.Client.Delete(ctx, d, client.PropagationPolicy(metav1.DeletePropagationBackground)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the garbage collector to delete the ReplicaSet", func() bool {
		return e.Client.List(ctx, &rs, client.InNamespace(ns)) == nil && len(rs.Items) == 0
	})
	out, err := exec.CommandContext(ctx, e.Kubectl, "--kubeconfig", e.Kubeconfig, "get", "namespaces", "-o", "name").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "namespace/"+ns) {
		t.Fatalf("kubectl get namespaces: %v\n%s", err, out)
	}
}

// TestShared: the tests asking for one key share its server; each has a
// namespace of its own, named after it, deleted once it ends.
func TestShared(t *testing.T) {
	e := Shared(t, "controller-manager", withControllerManager)
	var names []string
	for _, name := range []string{"a", "b"} {
		t.Run(name, func(t *testing.T) {
			if again := Shared(t, "controller-manager", withControllerManager); again != e {
				t.Error("a second test asking for the key got another server")
			}
			ns := e.Namespace(t)
			if !strings.HasPrefix(ns, "testshared-"+name+"-") {
				t.Errorf("namespace %s, want one named after the test", ns)
			}
			names = append(names, ns)
		})
	}
	if len(names) != 2 || names[0] == names[1] {
		t.Fatalf("namespaces %v, want one each", names)
	}
	for _, ns := range names {
		waitFor(t, "namespace "+ns+" deleted", func() bool {
			return apierrors.IsNotFound(e.Client.Get(t.Context(), client.ObjectKey{Name: ns}, &corev1.Namespace{}))
		})
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
