package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"net"
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

// addonReadyTimeout bounds the addons step's wait for every addon to
// serve; addonPollInterval paces it.
var (
	addonReadyTimeout = 4 * time.Minute
	addonPollInterval = 2 * time.Second
)

// dnsQueryTimeout bounds one query of the cluster DNS.
const dnsQueryTimeout = 5 * time.Second

// AddonStatus reports whether each addon serves (addonServes). The
// platform's own addons come first.
func (d *driver) AddonStatus(ctx context.Context, addons []districts.Addon) ([]provider.AddonStatus, error) {
	a, err := d.client(ctx)
	if err != nil {
		return nil, err
	}
	var out []provider.AddonStatus
	for _, ad := range append(slices.Clone(platformAddons), addons...) {
		st := provider.AddonStatus{Name: ad.Name, Ready: true}
		if err := d.addonServes(ctx, a, ad); err != nil {
			st.Ready, st.Message = false, err.Error()
		}
		out = append(out, st)
	}
	return out, nil
}

// waitAddons waits until each addon of addons serves, in order, all
// within addonReadyTimeout (on the driver's clock), logging what it waits
// for; past it, the error names the addon and why it does not serve.
func (d *driver) waitAddons(ctx context.Context, a *api, addons []districts.Addon) error {
	start := d.opts.Clock.Now()
	deadline := start.Add(addonReadyTimeout)
	for _, ad := range addons {
		name, waiting := ad.Name, ""
		for {
			err := d.addonServes(ctx, a, ad)
			if err == nil {
				if waiting != "" {
					d.opts.Logger.Info("addon serves", "addon", name, "after", d.opts.Clock.Now().Sub(start).Round(time.Second))
				}
				break
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if !d.opts.Clock.Now().Before(deadline) {
				return fmt.Errorf("addon %s does not serve after %s: %w (kubectl -n %s get pods,events shows why)", name, addonReadyTimeout, err, addonNamespace(name))
			}
			if why := err.Error(); why != waiting {
				d.opts.Logger.Info("waiting for an addon to serve", "addon", name, "why", why)
				waiting = why
			}
			if err := d.opts.Clock.Sleep(ctx, addonPollInterval); err != nil {
				return err
			}
		}
	}
	return nil
}

// addonNamespaces are where addons run their workloads; CoreDNS runs in
// kube-system.
var addonNamespaces = map[string]string{"flannel": flannelNamespace, "relations": "transit-relations", "streams": "transit-streams"}

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
	case "coredns":
		return []string{"kube-system/coredns"}
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
// not available; for flannel, a node without the pod network
// (podNetworkUp); for CoreDNS, the cluster DNS not answering
// (clusterDNSAnswers); for relations, a dry-run consumer its webhook did
// not mutate. (Whether the streams broker answers Kafka requests is not
// asked: its pod is Ready once it accepts connections.)
func (d *driver) addonServes(ctx context.Context, a *api, ad districts.Addon) error {
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
	if name == "flannel" && !slices.ContainsFunc(dss.Items, func(ds appsv1.DaemonSet) bool { return ds.Namespace+"/"+ds.Name == flannelDaemonSetKey }) {
		return fmt.Errorf("DaemonSet %s does not exist", flannelDaemonSetKey)
	}
	for i := range dss.Items {
		if err := daemonSetServes(ctx, a, &dss.Items[i]); err != nil {
			return err
		}
	}
	switch name {
	case "flannel":
		return podNetworkUp(ctx, a)
	case "coredns":
		return d.clusterDNSAnswers(ctx, a)
	case "relations":
		return relationsWebhookServes(ctx, a)
	}
	return nil
}

// daemonSetServes says why DaemonSet ds is not rolled out and available.
// Its pods that are not available on nodes the platform reports not ready
// are left out, as podNetworkUp leaves those nodes out: a member that is
// down (its machine gone behind transit's back, a kubelet registered
// under another name) keeps a pod it will never run until the Node goes,
// and the loop reports it; the addon serves the other nodes.
func daemonSetServes(ctx context.Context, a *api, ds *appsv1.DaemonSet) error {
	st := ds.Status
	served := min(st.UpdatedNumberScheduled, st.NumberAvailable)
	if st.ObservedGeneration >= ds.Generation && served >= st.DesiredNumberScheduled {
		return nil
	}
	down, err := podsOnNodesDown(ctx, a, ds)
	if err != nil {
		return err
	}
	if st.ObservedGeneration < ds.Generation || served+down < st.DesiredNumberScheduled {
		msg := fmt.Sprintf("DaemonSet %s/%s: %d of %d pods updated and available", ds.Namespace, ds.Name, served, st.DesiredNumberScheduled)
		if down > 0 {
			msg += fmt.Sprintf(" (%d more on nodes not ready, left out)", down)
		}
		return errors.New(msg)
	}
	return nil
}

// podsOnNodesDown counts ds's pods that are not available on nodes that
// are not ready.
func podsOnNodesDown(ctx context.Context, a *api, ds *appsv1.DaemonSet) (int32, error) {
	sel, err := metav1.LabelSelectorAsSelector(ds.Spec.Selector)
	if err != nil {
		return 0, fmt.Errorf("DaemonSet %s/%s: its selector: %w", ds.Namespace, ds.Name, err)
	}
	pods, err := a.c.CoreV1().Pods(ds.Namespace).List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
	if err != nil {
		return 0, err
	}
	nodes, err := a.c.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return 0, err
	}
	ready := map[string]bool{} // a Node gone is not ready either
	for i := range nodes.Items {
		ready[nodes.Items[i].Name] = nodeReady(&nodes.Items[i])
	}
	var down int32
	for i := range pods.Items {
		p := &pods.Items[i]
		if ref := metav1.GetControllerOf(p); ref == nil || ref.UID != ds.UID || p.Spec.NodeName == "" || podReady(p) {
			continue
		}
		if !ready[p.Spec.NodeName] {
			down++
		}
	}
	return down, nil
}

// Where flannel runs, and what it writes on each Node once its flanneld
// took the node's lease (flannel's pkg/subnet/kube).
const (
	flannelNamespace         = "kube-flannel"
	flannelDaemonSetKey      = flannelNamespace + "/kube-flannel-ds"
	annotationFlannelManaged = "flannel.alpha.coreos.com/kube-subnet-manager"
	annotationFlannelPublic  = "flannel.alpha.coreos.com/public-ip"
)

// podNetworkUp says on which nodes the pod network is not up. It is up on
// a node once flannel's pod there is Ready and its flanneld took the
// node's lease (the Node carries flannel's annotations), announcing the
// node's public address where transit set one (annotationPublicIP): a
// flanneld that started before it announces the private one until it
// restarts. A DaemonSet's counts cannot say it: they leave out the nodes
// flannel does not run on yet. A node the platform reports not ready is
// left out (the loop reports it, and replaces it as the strategy says;
// a node that joined in the run is waited for until ready before the
// addons step), unless transit still holds its pod network back.
func podNetworkUp(ctx context.Context, a *api) error {
	nodes, err := a.c.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	pods, err := a.c.CoreV1().Pods(flannelNamespace).List(ctx, metav1.ListOptions{LabelSelector: "app=flannel"})
	if err != nil {
		return err
	}
	ready := map[string]bool{}
	for i := range pods.Items {
		if p := &pods.Items[i]; p.DeletionTimestamp == nil && podReady(p) {
			ready[p.Spec.NodeName] = true
		}
	}
	var down []string
	for i := range nodes.Items {
		kn := &nodes.Items[i]
		_, held := kn.Labels[labelNetworkPending]
		announced, want := kn.Annotations[annotationFlannelPublic], kn.Annotations[annotationPublicIP]
		switch {
		case held:
			down = append(down, kn.Name+" (not released by transit yet: label "+labelNetworkPending+")")
		case !nodeReady(kn):
			continue
		case !ready[kn.Name]:
			down = append(down, kn.Name+" (no Ready flannel pod)")
		case kn.Annotations[annotationFlannelManaged] != "true":
			down = append(down, kn.Name+" (flanneld has not taken the node's lease)")
		case want != "" && announced != want:
			down = append(down, fmt.Sprintf("%s (flanneld announces %s, not the node's public address %s: it started before the annotation; delete its flannel pod)", kn.Name, announced, want))
		}
	}
	if len(down) > 0 {
		return fmt.Errorf("the pod network is not up on %d of %d nodes: %s", len(down), len(nodes.Items), strings.Join(down, ", "))
	}
	return nil
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// clusterDNSAnswers asks the cluster DNS (the kube-dns Service's address)
// for the kubernetes Service's name from the master the API client goes
// through, over TCP tunnelled like the API (Go's resolver frames DNS as
// TCP on a connection that is not a packet one), and says why it did not
// answer with that Service's address. It needs CoreDNS serving the
// cluster's zone, the Service's rules on the master and the pod network
// from the master to a CoreDNS pod.
func (d *driver) clusterDNSAnswers(ctx context.Context, a *api) error {
	dnsIP, err := nthAddress(d.k8s.ServiceCIDR, 10)
	if err != nil {
		return err
	}
	apiIP, err := nthAddress(d.k8s.ServiceCIDR, 1)
	if err != nil {
		return err
	}
	name := "kubernetes.default.svc." + clusterDomain + "."
	server := net.JoinHostPort(dnsIP, "53")
	r := &net.Resolver{PreferGo: true, StrictErrors: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return d.r.DialContext(ctx, a.master, "tcp", server)
	}}
	qctx, cancel := context.WithTimeout(ctx, dnsQueryTimeout)
	defer cancel()
	addrs, err := r.LookupHost(qctx, name)
	if err != nil {
		return fmt.Errorf("the cluster DNS %s does not answer %s (asked from master %s): %w", dnsIP, name, a.master.ID, err)
	}
	if !slices.Contains(addrs, apiIP) {
		return fmt.Errorf("the cluster DNS %s answers %s with %s, not the kubernetes Service's %s", dnsIP, name, strings.Join(addrs, " "), apiIP)
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
