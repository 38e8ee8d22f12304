package cli

import (
	"context"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/cloudtransit/transit"
	"github.com/cloudtransit/transit/control"
	"github.com/cloudtransit/transit/provider"
	"github.com/cloudtransit/transit/statestore"
)

// ErrorKinds is the code's own table: every error of a kind gets that kind
// and one of its exit codes, and each exit code it lists is one some error
// of the kind ends with. docs/troubleshooting.md is checked against it.
func TestErrorKinds(t *testing.T) {
	t.Parallel()
	// What the loop returns when a round could do nothing, and why.
	notConverged := func(cause error) error {
		return fmt.Errorf("%w: round 2 made no progress: %w", control.ErrNotConverged, cause)
	}
	type pair struct {
		kind string
		exit int
	}
	seen := map[pair]bool{}
	for _, tc := range []struct {
		err  error
		kind string
		exit int
	}{
		{withKind(kindUsage, errors.New("--max-rounds 0")), kindUsage, ExitError},
		{fmt.Errorf("mesh rotate: %w", control.ErrUnknownNode), kindUsage, ExitError},
		{configError(errors.New("read the saved plan: not a plan")), kindConfig, ExitError},
		{fmt.Errorf("%w: cluster.json: id: missing", transit.ErrConfig), kindConfig, ExitError},
		{fmt.Errorf("%w: no deployment has autoscale bounds", transit.ErrNoAutoscale), kindConfig, ExitError},
		{fmt.Errorf("resources.json is locked by pid 4242: %w", transit.ErrLocked), kindLocked, ExitError},
		{fmt.Errorf("save: %w", statestore.ErrConflict), kindStateConflict, ExitError},
		{statestore.ErrLockLost, kindLockLost, ExitError},
		{fmt.Errorf("%w: district aws-europe: connection refused", transit.ErrRefresh), kindRefresh, ExitError},
		{transit.ErrCancelled, kindCancelled, ExitError},
		{control.ErrWouldDestroy, kindWouldDestroy, ExitError},
		{control.ErrOverBudget, kindOverBudget, ExitError},
		{control.ErrStalePlan, kindStalePlan, ExitError},
		{control.ErrForeign, kindForeign, ExitError},
		{notConverged(control.ErrForeign), kindForeign, ExitNotConverged},
		{provider.ErrPlatformUnreachable, kindPlatformUnreachable, ExitError},
		{notConverged(provider.ErrPlatformUnreachable), kindPlatformUnreachable, ExitNotConverged},
		{notConverged(control.ErrPlatformLost), kindPlatformLost, ExitNotConverged},
		{notConverged(control.ErrMissingMachines), kindMissingMachines, ExitNotConverged},
		{notConverged(provider.ErrAddonInUse), kindAddonInUse, ExitNotConverged},
		{notConverged(errors.New("launch: no capacity")), kindNotConverged, ExitNotConverged},
		{withKind(kindRefresh, fmt.Errorf("list: %w", provider.ErrCloudAuth)), kindCloudAuth, ExitError},
		{fmt.Errorf("launch: %w", provider.ErrThrottled), kindCloudThrottled, ExitError},
		{fmt.Errorf("launch: %w", provider.ErrQuota), kindCloudQuota, ExitError},
		{context.Canceled, kindInterrupted, ExitInterrupted},
		{errors.New("write resources.json: no space left on device"), kindError, ExitError},
	} {
		kind, exit := errorKind(tc.err), ExitCode(explain(tc.err, control.Result{}, "apply"))
		seen[pair{kind, exit}] = true
		if kind != tc.kind || exit != tc.exit {
			t.Errorf("%v: kind %q exit %d, want %q exit %d", tc.err, kind, exit, tc.kind, tc.exit)
		}
		i := slices.IndexFunc(errorKinds, func(k ErrorKind) bool { return k.Name == kind })
		if i < 0 {
			t.Errorf("%v: kind %q is not in ErrorKinds", tc.err, kind)
		} else if !slices.Contains(errorKinds[i].Exits, exit) {
			t.Errorf("%v: exit %d is not one of kind %q's in ErrorKinds, %v", tc.err, exit, kind, errorKinds[i].Exits)
		}
	}
	// And the other way: every exit code of the table is one an error
	// above ends with.
	for _, k := range ErrorKinds() {
		if k.Meaning == "" || len(k.Exits) == 0 {
			t.Errorf("kind %q: no meaning or no exit code", k.Name)
		}
		for _, exit := range k.Exits {
			if !seen[pair{k.Name, exit}] {
				t.Errorf("kind %q: no case above ends with its exit code %d", k.Name, exit)
			}
		}
	}
}

// No kind constant is left out of the table, and the table names no kind
// that has none.
func TestErrorKindsComplete(t *testing.T) {
	t.Parallel()
	f, err := parser.ParseFile(token.NewFileSet(), "errors.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var consts []string
	ast.Inspect(f, func(n ast.Node) bool {
		vs, ok := n.(*ast.ValueSpec)
		if !ok {
			return true
		}
		for i, name := range vs.Names {
			if !strings.HasPrefix(name.Name, "kind") || i >= len(vs.Values) {
				continue
			}
			if lit, ok := vs.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
				v, err := strconv.Unquote(lit.Value)
				if err != nil {
					t.Fatal(err)
				}
				consts = append(consts, v)
			}
		}
		return true
	})
	var names []string
	for _, k := range ErrorKinds() {
		names = append(names, k.Name)
	}
	slices.Sort(consts)
	slices.Sort(names)
	if diff := cmp.Diff(consts, names); diff != "" {
		t.Errorf("kind constants (-) and ErrorKinds (+) differ:\n%s", diff)
	}
}

// ErrorKinds hands out copies: a caller cannot change the table.
func TestErrorKindsCopies(t *testing.T) {
	t.Parallel()
	ks := ErrorKinds()
	ks[0].Exits[0] = 99
	if ErrorKinds()[0].Exits[0] == 99 {
		t.Error("ErrorKinds shares its exit codes with the caller")
	}
}
