package relations

import (
	"context"
	"sync"
	"time"

	"golang.org/x/time/rate"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/cloudtransit/transit/controllers/relations/api/v1alpha1"
)

// pruneWorkers is how many Relationships' old values Secrets are deleted
// at once: few, so that a change's cleanup (what still uses them, then a
// deletion, per consumer) takes a small share of the API server while
// the next change's values propagate.
const pruneWorkers = 2

// pruneItem is a Relationship whose values Secrets beyond its history
// may go, and its consumer's kind (what reads the pods that use them).
type pruneItem struct {
	kind string
	rel  types.NamespacedName
}

// pruner deletes old values Secrets behind the consumers' reconciles: a
// change writes each consumer's new revision, status and template first,
// and hands the Relationships whose history it trimmed (or whose consent
// was withdrawn) to this queue.
// Items are lost with the process; the next trim finds every Secret the
// history no longer keeps, those included.
type pruner struct {
	queue workqueue.TypedRateLimitingInterface[pruneItem]
	kinds map[string]*kindReconciler
}

func newPruner() *pruner {
	// A failed cleanup is tried again sooner or later, never after more
	// than half a minute (the controllers' default waits up to 1,000 s);
	// at most 10 a second in all, as theirs.
	limiter := workqueue.NewTypedMaxOfRateLimiter(
		workqueue.NewTypedItemExponentialFailureRateLimiter[pruneItem](5*time.Millisecond, 30*time.Second),
		&workqueue.TypedBucketRateLimiter[pruneItem]{Limiter: rate.NewLimiter(rate.Limit(10), 100)},
	)
	return &pruner{
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(limiter, workqueue.TypedRateLimitingQueueConfig[pruneItem]{Name: "relations-prune"}),
		kinds: map[string]*kindReconciler{},
	}
}

// add queues rel's prune; call it once rel's status (its history) is
// written.
func (p *pruner) add(kind string, rel types.NamespacedName) {
	p.queue.Add(pruneItem{kind, rel})
}

// Start runs the workers until ctx ends (a manager runnable, on the
// leader only).
func (p *pruner) Start(ctx context.Context) error {
	var wg sync.WaitGroup
	for range pruneWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for p.next(ctx) {
			}
		}()
	}
	<-ctx.Done()
	p.queue.ShutDown()
	wg.Wait()
	return nil
}

// NeedLeaderElection: only the leader writes.
func (p *pruner) NeedLeaderElection() bool { return true }

// next prunes one queued Relationship; false once the queue shut down.
// Secrets pods still use are looked at again after the recheck interval.
func (p *pruner) next(ctx context.Context) bool {
	item, shutdown := p.queue.Get()
	if shutdown {
		return false
	}
	defer p.queue.Done(item)
	r := p.kinds[item.kind]
	rel := &v1alpha1.Relationship{}
	// What this process wrote last, while the cache lags behind it.
	held := false
	err := r.written.get(ctx, r.Client, item.rel, rel)
	if err == nil {
		held, err = r.pruneRevisions(ctx, rel)
	}
	switch {
	case apierrors.IsNotFound(err):
		p.queue.Forget(item) // its Secrets go with it (owned)
	case err != nil:
		logf.FromContext(ctx).Error(err, "prune old values Secrets", "relationship", item.rel)
		p.queue.AddRateLimited(item)
	default:
		p.queue.Forget(item)
		if held {
			p.queue.AddAfter(item, r.Options.Recheck)
		}
	}
	return true
}
