package cli

import (
	"context"
	"errors"

	"github.com/cloudtransit/transit/control"
	"github.com/cloudtransit/transit/state"
)

// Error kinds: the error_kind of a --json result line, so that a script
// can act on how a run failed without reading the message.
const (
	kindUsage               = "usage"                // a flag, or --auto-approve missing without a terminal
	kindConfig              = "config"               // configuration, state file or driver set-up
	kindLocked              = "locked"               // another run holds the state lock
	kindRefresh             = "refresh"              // asking the clouds before the loop failed
	kindCancelled           = "cancelled"            // the confirmation was not given
	kindWouldDestroy        = "would_destroy"        // apply of a cluster.json that wants no node
	kindStalePlan           = "stale_plan"           // the cluster changed since the plan was shown
	kindInterrupted         = "interrupted"          // SIGINT or SIGTERM
	kindPlatformUnreachable = "platform_unreachable" // no master answered
	kindPlatformLost        = "platform_lost"        // no master is left; see --rebuild-platform
	kindForeign             = "foreign"              // resources of the cluster's name from another lineage
	kindNotConverged        = "not_converged"        // a round made no progress or the rounds ran out
	kindError               = "error"                // anything else
)

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
	case errors.Is(err, context.Canceled):
		return kindInterrupted
	case errors.Is(err, state.ErrLocked):
		return kindLocked
	case errors.Is(err, control.ErrWouldDestroy):
		return kindWouldDestroy
	case errors.Is(err, control.ErrStalePlan):
		return kindStalePlan
	case errors.Is(err, control.ErrPlatformLost):
		return kindPlatformLost
	case errors.Is(err, control.ErrPlatformUnreachable):
		return kindPlatformUnreachable
	case errors.Is(err, control.ErrForeign):
		return kindForeign
	case errors.Is(err, control.ErrNotConverged):
		return kindNotConverged
	}
	if ke, ok := errors.AsType[*stageError](err); ok {
		return ke.kind
	}
	return kindError
}
