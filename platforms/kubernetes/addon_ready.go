package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	relations "github.com/cloudtransit/transit/controllers/relations/annotations"
	"github.com/cloudtransit/transit/districts"
	"github.com/cloudtransit/transit/provider"
)

// addonReadyTimeout bounds the wait for an installed addon to serve.
var addonReadyTimeout = 4 * time.Minute

// AddonStatus reports whether each addon serves: its workloads are
// available, and an addon with a webhook answers a dry run. The platform's
// own addons come first.
func (d *driver) AddonStatus(ctx context.Context, addons []districts.Addon) ([]provider.AddonStatus, error) {
	a, err := d.client(ctx)
	if err != nil {
		return nil, err
	}
	var out []provider.AddonStatus
	for _, ad := range append(slices.Clone(platformAddons), addons...) {
		st := provider.AddonStatus{Name: ad.Name, Ready: true}
		if err := addonServes(ctx, a, ad); err != nil {
			st.Ready, st.Message = false, err.Error()
		}
		out = append(out, st)
	}
	return out, nil
}

// waitAddon waits, bounded, until addon ad serves.
func waitAddon(ctx context.Context, a *api, ad districts.Addon) error {
	name := ad.Name
	ctx, cancel := context.WithTimeout(ctx, addonReadyTimeout)
	defer cancel()
	for {
		err := addonServes(ctx, a, ad)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return fmt.Errorf("addon %s does not serve after %s: %w (kubectl -n %s get pods,events shows why)", name, addonReadyTimeout, err, addonNamespace(name))
			}
			return ctx.Err()
		case <-time.After(2 * time.Second):
		}
	}
}

// addonNamespaces are where cluster.json's addons run their workloads;
// the platform's own run in kube-system.
var addonNamespaces = map[string]string{"relations": "transit-relations", "streams": "transit-streams"}

// addonNamespace is where an addon's workloads run.
func addonNamespace(name string) string {
	if ns, ok := addonNamespaces[name]; ok {
		return ns
	}
	return "kube-system"
}

// addonDeployments are the Deployments (namespace/name) addon ad serves
// with: without them it does not serve, whatever else is there. The
// streams addon runs the development broker only without a Kafka of the
// user's (setting bootstrap).
func addonDeployments(ad districts.Addon) []string {
	switch ad.Name {
	case "relations":
		return []string{"transit-relations/transit-relations"}
	case "streams":
		deps := []string{"transit-streams/transit-streams"}
		if ad.Setting("bootstrap") == "" {
			deps = append(deps, "transit-streams/streams-broker")
		}
		return deps
	}
	return nil
}

// addonServes says why addon ad does not serve yet: a workload missing or
// not available, or (relations) a dry-run consumer its webhook did not
// mutate. (Whether the streams broker answers Kafka requests cannot be
// asked from here: only the API server is reachable. Its pod is Ready
// once it accepts connections.)
func addonServes(ctx context.Context, a *api, ad districts.Addon) error {
	name := ad.Name
	sel := metav1.ListOptions{LabelSelector: labelManagedBy + "=transit," + labelAddon + "=" + name}
	deps, err := a.c.AppsV1().Deployments("").List(ctx, sel)
	if err != nil {
		return err
	}
	for _, want := range addonDeployments(ad) {
		if !slices.ContainsFunc(deps.Items, func(dep appsv1.Deployment) bool { return dep.Namespace+"/"+dep.Name == want }) {
			return fmt.Errorf("deployment %s does not exist", want)
		}
	}
	for _, dep := range deps.Items {
		if err := deploymentAvailable(&dep); err != nil {
			return err
		}
	}
	dss, err := a.c.AppsV1().DaemonSets("").List(ctx, sel)
	if err != nil {
		return err
	}
	for _, ds := range dss.Items {
		st := ds.Status
		if st.ObservedGeneration < ds.Generation || st.UpdatedNumberScheduled < st.DesiredNumberScheduled || st.NumberAvailable < st.DesiredNumberScheduled {
			return fmt.Errorf("DaemonSet %s/%s: %d of %d pods updated and available", ds.Namespace, ds.Name, min(st.UpdatedNumberScheduled, st.NumberAvailable), st.DesiredNumberScheduled)
		}
	}
	if name == "relations" {
		return relationsWebhookServes(ctx, a)
	}
	return nil
}

func deploymentAvailable(dep *appsv1.Deployment) error {
	want := ptr.Deref(dep.Spec.Replicas, 1)
	st := dep.Status
	if st.ObservedGeneration < dep.Generation || st.UpdatedReplicas < want || st.AvailableReplicas < want {
		return fmt.Errorf("deployment %s/%s: %d of %d pods updated, %d available", dep.Namespace, dep.Name, st.UpdatedReplicas, want, st.AvailableReplicas)
	}
	return nil
}

// relationsWebhookServes creates, as a dry run, a consumer of a provider
// that does not exist: the webhook must come back with the wait container.
// Nothing is stored.
func relationsWebhookServes(ctx context.Context, a *api) error {
	labels := map[string]string{"app": "transit-relations-probe"}
	probe := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "transit-relations-probe", Namespace: metav1.NamespaceDefault, Annotations: map[string]string{
			relations.AnnotationConsumes: "transit-probe", relations.AnnotationRelationship: "transit-relations-probe-provider"}},
		Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "probe", Image: "transit.local/pause"}}}},
		},
	}
	got, err := a.c.AppsV1().Deployments(metav1.NamespaceDefault).Create(ctx, probe, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	if err != nil {
		return fmt.Errorf("a dry-run consumer was refused: %w", err)
	}
	for _, c := range got.Spec.Template.Spec.InitContainers {
		if c.Name == relations.WaitContainer {
			return nil
		}
	}
	var names []string
	for _, c := range got.Spec.Template.Spec.InitContainers {
		names = append(names, c.Name)
	}
	return fmt.Errorf("the webhook did not mutate a dry-run consumer (init containers: [%s]): is the MutatingWebhookConfiguration transit-relations there?", strings.Join(names, " "))
}
