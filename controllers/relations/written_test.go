package relations

import (
	"context"
	"errors"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/cloudtransit/transit/controllers/relations/api/v1alpha1"
)

// cacheAt is a reader whose one Relationship is at a given version.
type cacheAt struct {
	client.Reader
	rv       string
	revision int64
}

func (c cacheAt) Get(_ context.Context, key client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
	rel := obj.(*v1alpha1.Relationship)
	*rel = v1alpha1.Relationship{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name, ResourceVersion: c.rv},
		Status: v1alpha1.RelationshipStatus{Revision: c.revision}}
	return nil
}

// A Relationship this process wrote is read as written while the cache
// still holds the version the write replaced; once the cache moves on (to
// that write or another writer's), the cache is the truth again.
func TestWrittenRelationships(t *testing.T) {
	var w written
	key := types.NamespacedName{Namespace: "default", Name: "deployment-web-db"}
	mine := &v1alpha1.Relationship{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name, ResourceVersion: "11"},
		Status: v1alpha1.RelationshipStatus{Revision: 2}}
	w.wrote("10", mine)

	for _, tc := range []struct {
		name     string
		cache    cacheAt
		revision int64
		rv       string
	}{
		{"stale cache", cacheAt{rv: "10", revision: 1}, 2, "11"},
		{"stale cache, again", cacheAt{rv: "10", revision: 1}, 2, "11"},
		{"another writer", cacheAt{rv: "12", revision: 3}, 3, "12"},
		{"the old version again is not mistaken for stale", cacheAt{rv: "10", revision: 1}, 1, "10"},
	} {
		rel := &v1alpha1.Relationship{}
		if err := w.get(context.Background(), tc.cache, key, rel); err != nil {
			t.Fatal(err)
		}
		if rel.Status.Revision != tc.revision || rel.ResourceVersion != tc.rv {
			t.Errorf("%s: read revision %d at %s, want %d at %s", tc.name, rel.Status.Revision, rel.ResourceVersion, tc.revision, tc.rv)
		}
	}
}

// A lost write race is retried promptly, never through the rate limiter
// every failing item shares; other errors stay errors.
func TestRetryConflicts(t *testing.T) {
	conflict := apierrors.NewConflict(schema.GroupResource{Group: "relations.transit.io", Resource: "relationships"}, "x", nil)
	if res, err := retryConflicts(reconcile.Result{}, conflict); err != nil || res.RequeueAfter != conflictRetry {
		t.Errorf("a conflict: %+v, %v", res, err)
	}
	other := apierrors.NewServiceUnavailable("etcd")
	if _, err := retryConflicts(reconcile.Result{}, other); !errors.Is(err, other) {
		t.Errorf("another error became %v", err)
	}
}
