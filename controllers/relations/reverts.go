package relations

import (
	"fmt"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// A writer that keeps taking out what the controller injected (another
// operator, a mutating webhook that strips variables) would have it
// re-apply forever. Re-applying the same patch more than maxReapplies
// times within reapplyWindow stops it: a Conflict, looked at again after
// the window.
const (
	maxReapplies  = 3
	reapplyWindow = 10 * time.Minute
)

// reapplies remembers, per consumer, the last patch applied and when the
// same patch had to be applied again.
type reapplies struct {
	mu sync.Mutex
	m  map[types.NamespacedName]reapplyLog
}

type reapplyLog struct {
	hash string
	at   []time.Time
}

// errReverted says the consumer's injected fields keep being reverted.
type errReverted struct{ times int }

func (e errReverted) Error() string {
	return fmt.Sprintf("another writer removed the injected fields %d times in the last %s; the controller stops re-applying them and looks again in %s (the workload's managedFields name the writers)",
		e.times, reapplyWindow, reapplyWindow)
}

// applying records that patch hash is to be applied to key now; it fails
// once the same patch was re-applied more than maxReapplies times within
// the window.
func (r *reapplies) applying(key types.NamespacedName, hash string, now time.Time) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.m == nil {
		r.m = map[types.NamespacedName]reapplyLog{}
	}
	log := r.m[key]
	if log.hash != hash {
		r.m[key] = reapplyLog{hash: hash}
		return nil
	}
	var recent []time.Time
	for _, t := range log.at {
		if now.Sub(t) < reapplyWindow {
			recent = append(recent, t)
		}
	}
	if len(recent) >= maxReapplies {
		log.at = recent
		r.m[key] = log
		return errReverted{times: len(recent)}
	}
	log.at = append(recent, now)
	r.m[key] = log
	return nil
}

// forget drops key's log (the consumer is gone).
func (r *reapplies) forget(key types.NamespacedName) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.m, key)
}
