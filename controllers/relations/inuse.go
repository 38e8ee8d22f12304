package relations

import (
	"bytes"
	"context"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/cloudtransit/transit/controllers/relations/api/v1alpha1"
)

// inUse are the values Secrets of a consumer that something still refers
// to: its pods, and the revisions it can roll back to.
type inUse struct {
	// pods refer to these: they go as a rollout ends.
	pods map[string]bool
	// targets are the ReplicaSets (a Deployment's) or ControllerRevisions
	// (a StatefulSet's, a DaemonSet's) its rollback would run.
	targets map[string]bool
}

// secretsInUse reads what refers to the values Secrets of rel's consumer
// named: the pods and rollback targets its selector matches. withTargets
// false: pods only.
func (r *kindReconciler) secretsInUse(ctx context.Context, rel *v1alpha1.Relationship, names []string, withTargets bool) (inUse, error) {
	used := inUse{pods: map[string]bool{}, targets: map[string]bool{}}
	w := r.new()
	err := r.Client.Get(ctx, types.NamespacedName{Namespace: rel.Namespace, Name: rel.Spec.Consumer.Name}, w)
	if err != nil {
		return used, client.IgnoreNotFound(err) // gone: its Secrets go with their Relationship
	}
	var sel *metav1.LabelSelector
	switch o := w.(type) {
	case *appsv1.Deployment:
		sel = o.Spec.Selector
	case *appsv1.StatefulSet:
		sel = o.Spec.Selector
	case *appsv1.DaemonSet:
		sel = o.Spec.Selector
	}
	selector, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil || selector.Empty() {
		return used, err
	}
	in := []client.ListOption{client.InNamespace(rel.Namespace), client.MatchingLabelsSelector{Selector: selector}}
	var pods corev1.PodList
	if err := r.Reader.List(ctx, &pods, in...); err != nil {
		return used, err
	}
	for i := range pods.Items {
		podSecrets(&pods.Items[i].Spec, used.pods)
	}
	if !withTargets {
		return used, nil
	}
	if r.kind == "Deployment" {
		var sets appsv1.ReplicaSetList
		if err := r.Reader.List(ctx, &sets, in...); err != nil {
			return used, err
		}
		for i := range sets.Items {
			podSecrets(&sets.Items[i].Spec.Template.Spec, used.targets)
		}
		return used, nil
	}
	var revisions appsv1.ControllerRevisionList
	if err := r.Reader.List(ctx, &revisions, in...); err != nil {
		return used, err
	}
	// A ControllerRevision holds its template as a raw patch: a Secret's
	// quoted name in it refers to it.
	for _, rev := range revisions.Items {
		for _, name := range names {
			if bytes.Contains(rev.Data.Raw, []byte(`"`+name+`"`)) {
				used.targets[name] = true
			}
		}
	}
	return used, nil
}

// podSecrets adds the Secrets spec refers to (variables, volumes) to into.
func podSecrets(spec *corev1.PodSpec, into map[string]bool) {
	for _, ctrs := range [][]corev1.Container{spec.InitContainers, spec.Containers} {
		for _, c := range ctrs {
			for _, e := range c.Env {
				if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
					into[e.ValueFrom.SecretKeyRef.Name] = true
				}
			}
			for _, e := range c.EnvFrom {
				if e.SecretRef != nil {
					into[e.SecretRef.Name] = true
				}
			}
		}
	}
	for _, v := range spec.Volumes {
		if v.Secret != nil {
			into[v.Secret.SecretName] = true
		}
		if v.Projected != nil {
			for _, p := range v.Projected.Sources {
				if p.Secret != nil {
					into[p.Secret.Name] = true
				}
			}
		}
	}
}
