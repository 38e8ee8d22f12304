package control

import (
	"context"
	"errors"

	"github.com/cloudtransit/transit/districts"
)

// Refresh observes every district and the platform and returns the current
// state: tagged machines missing from state are adopted, state entries the
// clouds no longer have are dropped. It saves the result with opts.Save.
func Refresh(ctx context.Context, opts Options) (districts.Resources, error) {
	return districts.Resources{}, errors.New("TODO")
}

// MakePlan builds the plan for the next round. With refresh false it works
// from opts.State alone and calls no cloud and no platform.
func MakePlan(ctx context.Context, opts Options, refresh bool) (Plan, error) {
	return Plan{}, errors.New("TODO")
}

// Apply runs rounds (observe, plan, execute, persist) until the cluster
// matches opts.Cluster or a round makes no progress. A run that ends
// unconverged returns an error matching ErrNotConverged.
func Apply(ctx context.Context, opts Options) (Result, error) {
	return Result{}, errors.New("TODO")
}
