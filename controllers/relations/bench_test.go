package relations_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	"github.com/cloudtransit/transit/controllers/relations"
	relationsconfig "github.com/cloudtransit/transit/controllers/relations/config"
	"github.com/cloudtransit/transit/controllers/testenv"
)

// BenchmarkPropagation measures, on the bundle's API server, the time from
// a provider's change until every consumer's pod template carries the new
// revision (no kubelet: the rollouts themselves are the cluster benchmark's
// part). Goals: ≤ 1 s for 55 consumers, ≤ 10 s for 1,000. The controller
// runs as the addon's settings allow at most (64 workers, 1,000 QPS) and
// as the addon installs it: its service account, roles and admission
// policies, and the webhook registered, which admits every user's write of
// a consumer and the controller's own only while the wait container is
// there. Before the timed changes the history fills (10 changes): each
// timed change also deletes the revision that leaves it, as every change
// does from a relationship's eleventh on, behind the templates (s/cleanup:
// from the change until the last of those n Secrets is deleted; the next
// change starts after it).
func BenchmarkPropagation(b *testing.B) {
	// A server of its own: no other test's leftovers in the measurement,
	// and the raised QPS is its client configuration's alone.
	e := testenv.Start(b, webhookOptions(false))
	e.Config.QPS, e.Config.Burst = 1000, 2000
	// As installed: the addon's identity, roles and admission policies.
	testenv.CreateYAML(b, e.Client, relationsconfig.Policy)
	const history = 10 // the default
	startControllerAs(b, e, asAddon(b, e), relations.Options{Workers: 64, History: history})
	k, err := kubernetes.NewForConfig(e.Config)
	if err != nil {
		b.Fatal(err)
	}
	for _, n := range []int{55, 1000} {
		// b.Run runs its function more than once: the consumers are made
		// on the first.
		ns := fmt.Sprintf("bench-%d", n)
		revision := int64(0)
		b.Run("consumers="+strconv.Itoa(n), func(b *testing.B) {
			if revision == 0 {
				setupConsumers(b, k, ns, n)
				waitAllAt(b, k, ns, n, 1, "", 0)
				for revision = 2; revision <= history+1; revision++ {
					deleted := 0
					if revision > history {
						deleted = n
					}
					waitAllAt(b, k, ns, n, revision, fmt.Sprintf("host-%d.example.com", revision), deleted)
				}
				revision--
			}
			b.ResetTimer()
			var total, cleanup time.Duration
			for range b.N {
				revision++
				// Each change after the cleanup of the one before: one
				// change's cost, not a backlog's.
				propagated, cleaned := waitAllAt(b, k, ns, n, revision, fmt.Sprintf("host-%d.example.com", revision), n)
				total, cleanup = total+propagated, cleanup+cleaned
			}
			b.ReportMetric(total.Seconds()/float64(b.N), "s/change")
			b.ReportMetric(total.Seconds()/float64(b.N)/float64(n)*1000, "ms/consumer")
			b.ReportMetric(cleanup.Seconds()/float64(b.N), "s/cleanup")
		})
	}
}

// setupConsumers makes namespace ns with a provider pg and n consumers.
func setupConsumers(b *testing.B, k kubernetes.Interface, ns string, n int) {
	b.Helper()
	ctx := context.Background()
	if _, err := k.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	pg := externalService(ns, "pg", "host-0.example.com")
	pg.Namespace = ns
	if _, err := k.CoreV1().Services(ns).Create(ctx, pg, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	for i := range n {
		d := deployment(ns, fmt.Sprintf("c%04d", i), map[string]string{relations.AnnotationConsumes: "db", relations.AnnotationRelationship: "pg"})
		d.Namespace = ns
		if _, err := k.AppsV1().Deployments(ns).Create(ctx, d, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
	}
}

// waitAllAt changes the provider's host (unless empty) and returns how
// long until all n consumers' templates carry revision, by a watch, and
// how long until deleted values Secrets were deleted after the change
// (the cleanup behind it; 0 for none).
func waitAllAt(b *testing.B, k kubernetes.Interface, ns string, n int, revision int64, host string, deleted int) (propagated, cleaned time.Duration) {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	list, err := k.AppsV1().Deployments(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		b.Fatal(err)
	}
	want := strconv.FormatInt(revision, 10)
	at := map[string]bool{}
	for _, d := range list.Items {
		if d.Spec.Template.Annotations[relations.RevisionAnnotationPrefix+"deployment-"+d.Name+"-db"] == want {
			at[d.Name] = true
		}
	}
	rv := list.ResourceVersion
	w, err := k.AppsV1().Deployments(ns).Watch(ctx, metav1.ListOptions{ResourceVersion: rv})
	if err != nil {
		b.Fatal(err)
	}
	defer func() { w.Stop() }()
	// The values Secrets' deletions, from now on (a list of one gives the
	// version to watch from without the namespace's every Secret).
	values := metav1.ListOptions{LabelSelector: relations.Prefix + "relationship"}
	secrets, err := k.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{LabelSelector: values.LabelSelector, Limit: 1})
	if err != nil {
		b.Fatal(err)
	}
	values.ResourceVersion = secrets.ResourceVersion
	sw, err := k.CoreV1().Secrets(ns).Watch(ctx, values)
	if err != nil {
		b.Fatal(err)
	}
	defer func() { sw.Stop() }()
	gone := 0
	start := time.Now()
	if host != "" {
		svc, err := k.CoreV1().Services(ns).Get(ctx, "pg", metav1.GetOptions{})
		if err != nil {
			b.Fatal(err)
		}
		svc.Spec.ExternalName = host
		if _, err := k.CoreV1().Services(ns).Update(ctx, svc, metav1.UpdateOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	for len(at) < n || gone < deleted {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				// The server ends watches now and then: go on from the
				// last version seen.
				if w, err = k.AppsV1().Deployments(ns).Watch(ctx, metav1.ListOptions{ResourceVersion: rv}); err != nil {
					b.Fatal(err)
				}
				continue
			}
			if ev.Type != watch.Modified && ev.Type != watch.Added {
				continue
			}
			d := ev.Object.(*appsv1.Deployment)
			rv = d.ResourceVersion
			if d.Spec.Template.Annotations[relations.RevisionAnnotationPrefix+"deployment-"+d.Name+"-db"] == want {
				at[d.Name] = true
			}
			if len(at) == n && propagated == 0 {
				propagated = time.Since(start)
			}
		case ev, ok := <-sw.ResultChan():
			if !ok {
				if sw, err = k.CoreV1().Secrets(ns).Watch(ctx, values); err != nil {
					b.Fatal(err)
				}
				continue
			}
			if s, isSecret := ev.Object.(*corev1.Secret); isSecret {
				values.ResourceVersion = s.ResourceVersion
			}
			if ev.Type == watch.Deleted {
				if gone++; gone == deleted {
					cleaned = time.Since(start)
				}
			}
		case <-ctx.Done():
			b.Fatalf("%d of %d consumers at revision %d, %d of %d old values Secrets deleted after 5 minutes", len(at), n, revision, gone, deleted)
		}
	}
	if propagated == 0 {
		propagated = time.Since(start) // every template was there already
	}
	return propagated, cleaned
}
