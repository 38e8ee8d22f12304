package cli

import (
	"context"
	"errors"
	"fmt"

	"github.com/cloudtransit/transit/control"
)

// Exit codes of the transit command.
const (
	ExitOK           = 0   // success; plan --detailed-exitcode: the plan has no actions
	ExitError        = 1   // any error
	ExitChanges      = 2   // plan --detailed-exitcode: the plan has actions
	ExitNotConverged = 3   // apply or destroy ended with the cluster not converged
	ExitUnpriced     = 4   // prices: some district flavors have no price (named); districts.json's hourly_price prices them by hand
	ExitInterrupted  = 130 // interrupted (SIGINT, SIGTERM); the state is saved, the next run finishes
)

// CodeError carries the exit code a command ends with. A CodeError without
// Err says nothing: the command has printed all it had to say (plan
// --detailed-exitcode with changes).
type CodeError struct {
	Code int
	Err  error
}

func (e *CodeError) Error() string {
	if e.Err == nil {
		return fmt.Sprintf("exit status %d", e.Code)
	}
	return e.Err.Error()
}

func (e *CodeError) Unwrap() error { return e.Err }

// ExitCode maps the error a command returned to the process exit code.
func ExitCode(err error) int {
	if err == nil {
		return ExitOK
	}
	if ce, ok := errors.AsType[*CodeError](err); ok {
		return ce.Code
	}
	switch {
	case errors.Is(err, context.Canceled):
		return ExitInterrupted
	case errors.Is(err, control.ErrNotConverged):
		return ExitNotConverged
	}
	return ExitError
}

// Silent reports whether err is only an exit code with nothing to print.
func Silent(err error) bool {
	ce, ok := errors.AsType[*CodeError](err)
	return ok && ce.Err == nil
}
