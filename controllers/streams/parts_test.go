package streams_test

import (
	"fmt"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/cloudtransit/transit/controllers/streams"
	"github.com/cloudtransit/transit/controllers/streams/api/v1alpha1"
)

func revisionsOf(t testing.TB, c client.Client, ns, part string) map[int64]v1alpha1.TopologyPartRevision {
	t.Helper()
	var list v1alpha1.TopologyPartRevisionList
	if err := c.List(t.Context(), &list, client.InNamespace(ns), client.MatchingLabels{streams.LabelPart: part}); err != nil {
		t.Fatal(err)
	}
	out := map[int64]v1alpha1.TopologyPartRevision{}
	for _, r := range list.Items {
		out[r.Spec.Revision] = r
	}
	return out
}

// TestPartRevisions: every spec change of a part makes one revision, a
// repeated write none; a revision a Topology pins cannot be deleted (the
// policy names the Topology) or edited; unpinned, old revisions beyond the
// history go, and a deleted part's unused ones with it.
func TestPartRevisions(t *testing.T) {
	e, ns := startEnv(t)
	startController(t, e, ns, "127.0.0.1:1") // no Kafka needed for parts
	ctx, c := t.Context(), e.Client

	part := &v1alpha1.TopologyPart{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: ns},
		Spec: v1alpha1.PartSpec{Sources: map[string]v1alpha1.Endpoint{"orders": {Topic: "orders"}}}}
	if err := c.Create(ctx, part); err != nil {
		t.Fatal(err)
	}
	eventually(t, "revision 1", func() (bool, string) {
		revs := revisionsOf(t, c, ns, "a")
		return len(revs) == 1 && revs[1].Spec.Spec.Sources["orders"].Topic == "orders", fmt.Sprint(len(revs), " revisions")
	})
	// The controller writes the part's status meanwhile: a user's write
	// may meet a conflict, and is retried on the latest version.
	update := func(change func()) {
		t.Helper()
		if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			if err := c.Get(ctx, client.ObjectKeyFromObject(part), part); err != nil {
				return err
			}
			change()
			return c.Update(ctx, part)
		}); err != nil {
			t.Fatal(err)
		}
	}
	for i := 2; i <= 13; i++ {
		update(func() { part.Spec.Sources["orders"] = v1alpha1.Endpoint{Topic: fmt.Sprintf("orders-%d", i)} })
		eventually(t, fmt.Sprintf("revision %d", i), func() (bool, string) {
			_ = c.Get(ctx, client.ObjectKeyFromObject(part), part)
			return part.Status.LatestRevision == int64(i), fmt.Sprint("latest ", part.Status.LatestRevision)
		})
		if i == 2 { // pin revision 2 before it could be pruned
			topo := &v1alpha1.Topology{ObjectMeta: metav1.ObjectMeta{Name: "pipe", Namespace: ns},
				Spec: v1alpha1.TopologySpec{Parts: []v1alpha1.PartRef{{Name: "a", Revision: 2}}}}
			if err := c.Create(ctx, topo); err != nil {
				t.Fatal(err)
			}
		}
	}
	// A write of the same spec (a label) makes no revision.
	update(func() { part.Labels = map[string]string{"team": "a"} })
	revs := revisionsOf(t, c, ns, "a")
	eventually(t, "pruning to the history", func() (bool, string) {
		revs = revisionsOf(t, c, ns, "a")
		_, pinned := revs[2]
		_, pruned := revs[1]
		return len(revs) == 11 && pinned && !pruned, fmt.Sprint(len(revs), " revisions")
	})
	if _, ok := revs[14]; ok {
		t.Fatal("a write without a spec change made a revision")
	}

	pinned := revs[2]
	eventually(t, "revision 2 marked in use", func() (bool, string) {
		_ = c.Get(ctx, client.ObjectKeyFromObject(&pinned), &pinned)
		return pinned.Labels[streams.LabelInUse] != "", fmt.Sprint(pinned.Labels)
	})
	installPolicy(t, c, func() error { return c.Delete(ctx, pinned.DeepCopy(), client.DryRunAll) })
	err := c.Delete(ctx, &pinned)
	if !apierrors.IsInvalid(err) && !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "in use by Topology pipe") {
		t.Fatalf("deleting a pinned revision: %v", err)
	}
	pinned.Spec.Spec.Sources = map[string]v1alpha1.Endpoint{"x": {Topic: "x"}}
	if err := c.Update(ctx, &pinned); !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "immutable") {
		t.Fatalf("editing a revision: %v", err)
	}

	// Unpinned and the part deleted: its revisions go.
	if err := c.Delete(ctx, &v1alpha1.Topology{ObjectMeta: metav1.ObjectMeta{Name: "pipe", Namespace: ns}}); err != nil {
		t.Fatal(err)
	}
	if err := c.Delete(ctx, part); err != nil {
		t.Fatal(err)
	}
	eventually(t, "a deleted part's revisions gone", func() (bool, string) {
		revs := revisionsOf(t, c, ns, "a")
		return len(revs) == 0, fmt.Sprint(len(revs), " revisions")
	})
}
