package districts

import (
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestCompareNodeIDs(t *testing.T) {
	t.Parallel()
	got := []string{"worker-10", "worker-2", "master-1", "worker-1", "worker-2a", "w", "worker-", "paper-worker-9", "paper-worker-11", "i-0abd", "i-0abc"}
	want := []string{"i-0abc", "i-0abd", "master-1", "paper-worker-9", "paper-worker-11", "w", "worker-", "worker-1", "worker-2", "worker-2a", "worker-10"}
	slices.SortFunc(got, CompareNodeIDs)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("-want +got:\n%s", diff)
	}
}
