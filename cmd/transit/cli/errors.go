package cli

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/cloudtransit/transit"
	"github.com/cloudtransit/transit/control"
	"github.com/cloudtransit/transit/provider"
	"github.com/cloudtransit/transit/statestore"
)

// Error kinds: the error_kind of a --json result line, so that a script
// can act on how a run failed without reading the message. What each
// means, and the exit codes it comes with, is errorKinds.
const (
	kindUsage               = "usage"
	kindConfig              = "config"
	kindLocked              = "locked"
	kindStateConflict       = "state_conflict"
	kindLockLost            = "lock_lost"
	kindRefresh             = "refresh"
	kindCancelled           = "cancelled"
	kindWouldDestroy        = "would_destroy"
	kindOverBudget          = "over_budget"
	kindStalePlan           = "stale_plan"
	kindInterrupted         = "interrupted"
	kindPlatformUnreachable = "platform_unreachable"
	kindPlatformLost        = "platform_lost"
	kindMissingMachines     = "missing_machines"
	kindAddonInUse          = "addon_in_use"
	kindForeign             = "foreign"
	kindNotConverged        = "not_converged"
	kindCloudAuth           = "cloud_auth"
	kindCloudThrottled      = "cloud_throttled"
	kindCloudQuota          = "cloud_quota"
	kindError               = "error"
)

// ErrorKind is one error_kind transit prints: its name, the exit codes a
// run that fails so ends with, and what it means.
type ErrorKind struct {
	Name string
	// Exits are the exit codes it comes with, the usual one first: a
	// kind found by the loop ends a run not converged (3), the same kind
	// found before the loop exits 1.
	Exits   []int
	Meaning string
}

// errorKinds is every kind errorKind returns, in the order the docs list
// them.
var errorKinds = []ErrorKind{
	{kindUsage, []int{ExitError}, "a bad flag or argument, or --auto-approve missing without a terminal"},
	{kindConfig, []int{ExitError}, "cluster.json, districts.json, credentials.json, prices.json, resources.json or a saved plan is invalid, or a driver could not be set up"},
	{kindLocked, []int{ExitError}, "another run holds the state lock"},
	{kindStateConflict, []int{ExitError}, "another run wrote the state since this one read it: this run stopped without overwriting it"},
	{kindLockLost, []int{ExitError}, "the state lock stopped being this run's (a lease not renewed in time, taken over, force-unlocked): the run stopped before its next write or action"},
	{kindRefresh, []int{ExitError}, "asking the clouds before the loop failed"},
	{kindCancelled, []int{ExitError}, "the confirmation was not given"},
	{kindWouldDestroy, []int{ExitError}, "apply of a cluster.json that wants no node at all"},
	{kindOverBudget, []int{ExitError}, "the cluster would cost more an hour than cluster.json's budget allows; nothing was launched"},
	{kindStalePlan, []int{ExitError}, "the cluster, the state or the files changed since the plan was shown or saved; nothing was done"},
	{kindForeign, []int{ExitError, ExitNotConverged}, "the clouds hold resources of the cluster's name from another lineage"},
	{kindPlatformUnreachable, []int{ExitNotConverged, ExitError}, "no master answered (exit 1 when found before the loop); no node was changed"},
	{kindPlatformLost, []int{ExitNotConverged}, "no master serves the platform any more while workers remain; see --rebuild-platform"},
	{kindMissingMachines, []int{ExitNotConverged}, "the clouds' listings lack machines that must be there; see --forget-missing"},
	{kindAddonInUse, []int{ExitNotConverged}, "an addon's removal was refused: objects only its controller can see out still exist"},
	{kindNotConverged, []int{ExitNotConverged}, "a round made no progress or --max-rounds ran out"},
	{kindCloudAuth, []int{ExitError}, "a cloud refused the credentials: retrying will not help"},
	{kindCloudThrottled, []int{ExitError}, "a cloud kept refusing requests for their rate: retry later"},
	{kindCloudQuota, []int{ExitError}, "a cloud refused for a quota: raise it or ask for less"},
	{kindInterrupted, []int{ExitInterrupted}, "SIGINT or SIGTERM; the state is saved"},
	{kindError, []int{ExitError}, "anything else (e.g. the state could not be written)"},
}

// ErrorKinds lists every error_kind transit prints, for documentation and
// its tests.
func ErrorKinds() []ErrorKind {
	out := make([]ErrorKind, len(errorKinds))
	for i, k := range errorKinds {
		k.Exits = slices.Clone(k.Exits)
		out[i] = k
	}
	return out
}

// stageError marks an error with the stage it happened in, for errors that
// carry no sentinel of their own.
type stageError struct {
	kind string
	err  error
}

func (e *stageError) Error() string { return e.err.Error() }
func (e *stageError) Unwrap() error { return e.err }

func withKind(kind string, err error) error {
	if err == nil {
		return nil
	}
	return &stageError{kind: kind, err: err}
}

func configError(err error) error { return withKind(kindConfig, err) }

// errorKind says how a command failed; "" for no error. What the error
// says of itself wins over the stage it happened in: an unreachable
// platform during the refresh is platform_unreachable.
func errorKind(err error) string {
	switch {
	case err == nil:
		return ""
	case errors.Is(err, statestore.ErrLockLost):
		return kindLockLost
	case errors.Is(err, context.Canceled):
		return kindInterrupted
	case errors.Is(err, transit.ErrLocked):
		return kindLocked
	case errors.Is(err, statestore.ErrConflict):
		return kindStateConflict
	case errors.Is(err, control.ErrWouldDestroy):
		return kindWouldDestroy
	case errors.Is(err, control.ErrOverBudget):
		return kindOverBudget
	case errors.Is(err, control.ErrStalePlan):
		return kindStalePlan
	case errors.Is(err, control.ErrUnknownNode), errors.Is(err, control.ErrNoMesh):
		return kindUsage
	case errors.Is(err, control.ErrPlatformLost):
		return kindPlatformLost
	case errors.Is(err, control.ErrMissingMachines):
		return kindMissingMachines
	case errors.Is(err, provider.ErrAddonInUse):
		return kindAddonInUse
	case errors.Is(err, provider.ErrPlatformUnreachable):
		return kindPlatformUnreachable
	case errors.Is(err, control.ErrForeign):
		return kindForeign
	case errors.Is(err, provider.ErrCloudAuth):
		return kindCloudAuth
	case errors.Is(err, provider.ErrThrottled):
		return kindCloudThrottled
	case errors.Is(err, provider.ErrQuota):
		return kindCloudQuota
	case errors.Is(err, control.ErrNotConverged):
		return kindNotConverged
	case errors.Is(err, transit.ErrConfig), errors.Is(err, transit.ErrNoAutoscale):
		return kindConfig
	case errors.Is(err, transit.ErrRefresh):
		return kindRefresh
	case errors.Is(err, transit.ErrCancelled):
		return kindCancelled
	}
	if ke, ok := errors.AsType[*stageError](err); ok {
		return ke.kind
	}
	return kindError
}

// interruptedError is a loop that a signal stopped: the actions under way
// finished or were abandoned, and the state records what was done.
type interruptedError struct {
	verb string
	left []string // actions of the round not finished
	err  error
}

func (e *interruptedError) Error() string {
	msg := "interrupted: the state is saved"
	if len(e.left) > 0 {
		msg += "; left undone: " + strings.Join(e.left, ", ")
	}
	return msg + "; run " + e.verb + " again to finish"
}

func (e *interruptedError) Unwrap() error { return e.err }

// explain gives an error the exit code and the words it ends the run
// with: a not-converged run names every reason and exits 3, an interrupted
// one exits 130.
func explain(err error, res control.Result, verb string) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, context.Canceled):
		if _, ok := errors.AsType[*interruptedError](err); !ok {
			err = fmt.Errorf("interrupted before %s changed anything: %w", verb, err)
		}
		return &CodeError{Code: ExitInterrupted, Err: err}
	case errors.Is(err, control.ErrNotConverged):
		return withProblems(err, res)
	}
	return err
}

// withProblems makes sure a not-converged error names every reason and
// carries exit code 3; a lost platform says how to go on.
func withProblems(err error, res control.Result) error {
	msg := err.Error()
	var missing []string
	for _, p := range unique(res.Problems) {
		if !strings.Contains(msg, p) {
			missing = append(missing, "  "+p)
		}
	}
	if len(missing) > 0 {
		err = fmt.Errorf("%w:\n%s", err, strings.Join(missing, "\n"))
	}
	if errors.Is(err, control.ErrPlatformLost) && !strings.Contains(msg, "--rebuild-platform") {
		err = fmt.Errorf("%w\n  apply --rebuild-platform initialises a new platform over the nodes (what ran on the lost one is not recovered)", err)
	}
	return &CodeError{Code: ExitNotConverged, Err: err}
}
