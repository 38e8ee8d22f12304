package transit

import (
	"errors"
	"fmt"
	"strings"

	"github.com/cloudtransit/transit/districts"
	"github.com/cloudtransit/transit/filelock"
	"github.com/cloudtransit/transit/platforms/kubernetes"
)

// Errors a session's methods return, matched with errors.Is. The loop's own
// (control.ErrNotConverged, control.ErrWouldDestroy, control.ErrStalePlan,
// control.ErrPlatformLost, control.ErrForeign) and the drivers'
// (provider.ErrPlatformUnreachable, provider.ErrCloudAuth,
// provider.ErrThrottled, provider.ErrQuota) come through as they are. An
// error says what failed and where; these say at which stage.
var (
	// ErrConfig: cluster.json, districts.json, credentials.json or
	// resources.json is invalid, or a driver could not be set up. The
	// message names the file and the JSON path of every problem.
	ErrConfig = errors.New("configuration unusable")
	// ErrRefresh: asking the clouds and the platform for a plan or a
	// status failed, before anything was changed.
	ErrRefresh = errors.New("refresh failed")
	// ErrCancelled: ApplyOptions.Confirm did not approve the plan; nothing
	// was changed.
	ErrCancelled = errors.New("cancelled")
	// ErrLocked: another run holds the state lock; the error
	// (*filelock.LockedError) names it.
	ErrLocked = filelock.ErrLocked
	// ErrNotKubernetes: only a Kubernetes cluster has a kubeconfig.
	ErrNotKubernetes = kubernetes.ErrNotKubernetes
)

// stageError marks err with the stage it failed in; its message is err's.
type stageError struct {
	stage error
	err   error
}

func (e *stageError) Error() string   { return e.err.Error() }
func (e *stageError) Unwrap() []error { return []error{e.err, e.stage} }

func atStage(stage, err error) error {
	if err == nil {
		return nil
	}
	return &stageError{stage: stage, err: err}
}

func configError(err error) error { return atStage(ErrConfig, err) }

// problemsError prints several configuration problems under a count, one
// per line.
type problemsError struct{ ps districts.Problems }

func (e problemsError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d problems:", len(e.ps))
	for _, p := range e.ps {
		b.WriteString("\n  " + p.String())
	}
	return b.String()
}

func (e problemsError) Unwrap() error { return e.ps }

// problemList makes a report of several problems readable; one problem
// stays one line.
func problemList(err error) error {
	ps, ok := errors.AsType[districts.Problems](err)
	if !ok || len(ps) < 2 {
		return err
	}
	return problemsError{ps}
}
