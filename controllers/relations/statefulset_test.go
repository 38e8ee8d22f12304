package relations_test

import (
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/cloudtransit/transit/controllers/relations"
	"github.com/cloudtransit/transit/controllers/relations/api/v1alpha1"
)

// TestStatefulSetUnblocked: a StatefulSet consumer created before its
// provider holds its first pod in the wait container; once the
// relationship is established, that pod (of the old revision) is deleted,
// since OrderedReady would wait for it forever, and the StatefulSet
// controller makes it again at the new revision. RolledOut says the
// rollout is not done while pods are not ready.
func TestStatefulSetUnblocked(t *testing.T) {
	e, ns := startEnvWithWebhook(t)
	startController(t, e)
	ctx := t.Context()
	c := e.Client
	labels := map[string]string{"app": "cache"}
	sts := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: "cache", Namespace: ns,
			Annotations: map[string]string{relations.AnnotationConsumes: "db", relations.AnnotationRelationship: "pg"}},
		Spec: appsv1.StatefulSetSpec{
			Replicas: ptr.To[int32](1), ServiceName: "cache",
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "busybox"}}}},
		},
	}
	if err := c.Create(ctx, sts); err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{}
	podKey := types.NamespacedName{Namespace: ns, Name: "cache-0"}
	eventually(t, "pod cache-0", func() (bool, string) { return c.Get(ctx, podKey, pod) == nil, "" })
	if len(pod.Spec.InitContainers) != 1 || pod.Spec.InitContainers[0].Name != relations.WaitContainer {
		t.Fatalf("cache-0 has no wait container: %+v", pod.Spec.InitContainers)
	}
	// What a kubelet reports of a pod held in the wait container.
	pod.Status.Phase = corev1.PodPending
	pod.Status.InitContainerStatuses = []corev1.ContainerStatus{{Name: relations.WaitContainer,
		State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.Now()}}}}
	if err := c.Status().Update(ctx, pod); err != nil {
		t.Fatal(err)
	}
	held := pod.UID

	if err := c.Create(ctx, externalService(ns, "pg", "db1.example.com")); err != nil {
		t.Fatal(err)
	}
	eventually(t, "cache-0 made again at the new revision", func() (bool, string) {
		if err := c.Get(ctx, podKey, pod); err != nil {
			return false, err.Error()
		}
		return pod.UID != held && len(pod.Spec.InitContainers) == 0 && len(pod.Spec.Containers[0].Env) == 1, "uid " + string(pod.UID)
	})
	if !hasEvent(ctx, c, ns, "cache", "Unblocked", "deleted pod cache-0") {
		t.Error("no Unblocked event on the StatefulSet")
	}
	rel := &v1alpha1.Relationship{}
	eventually(t, "RolledOut=False while the pod is not ready", func() (bool, string) {
		if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: "statefulset-cache-db"}, rel); err != nil {
			return false, err.Error()
		}
		cond := meta.FindStatusCondition(rel.Status.Conditions, v1alpha1.ConditionRolledOut)
		return cond != nil && cond.Status == metav1.ConditionFalse && strings.Contains(cond.Message, "ready"), condString(rel)
	})
}
