package relations

import (
	"context"
	"sync"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/cloudtransit/transit/controllers/relations/api/v1alpha1"
)

// written remembers the Relationships this process wrote until the cache
// shows them: a consumer reconciled again right after its template patch
// (the patch's own watch event) would otherwise read the Relationship as
// it was before, redo the revision and lose a write race. Versions are
// only compared for equality, never ordered.
type written struct {
	mu sync.Mutex
	m  map[types.NamespacedName]writtenRel
}

type writtenRel struct {
	// before is the resourceVersion the write replaced: a cache still
	// holding it is stale.
	before string
	after  *v1alpha1.Relationship
}

// get reads a Relationship from c, or the one this process wrote last
// while c still holds the version that write replaced.
func (w *written) get(ctx context.Context, c client.Reader, key types.NamespacedName, rel *v1alpha1.Relationship) error {
	if err := c.Get(ctx, key, rel); err != nil {
		return err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	e, ok := w.m[key]
	switch {
	case !ok:
	case rel.ResourceVersion == e.before:
		e.after.DeepCopyInto(rel)
	default:
		// The cache caught up, or someone else wrote: it is the truth.
		delete(w.m, key)
	}
	return nil
}

// wrote records that rel, read at version before, was written.
func (w *written) wrote(before string, rel *v1alpha1.Relationship) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.m == nil {
		w.m = map[types.NamespacedName]writtenRel{}
	}
	w.m[client.ObjectKeyFromObject(rel)] = writtenRel{before: before, after: rel.DeepCopy()}
}

// forget drops what is remembered of a Relationship (deleted).
func (w *written) forget(key types.NamespacedName) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.m, key)
}
