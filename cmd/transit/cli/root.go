// Package cli holds transit's cobra commands. Each command maps its flags to
// an options struct, calls the session API (package transit) and renders
// the result; the package owns the output streams and reads the
// environment, the libraries do neither.
package cli

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/cloudtransit/transit"
	"github.com/cloudtransit/transit/clock"
	"github.com/cloudtransit/transit/districts"
)

// Deps is everything the commands take from outside: the streams, the
// terminal checks, time, the environment and the driver registry.
type Deps struct {
	In  io.Reader
	Out io.Writer
	Err io.Writer
	// IsTerminal reports whether a stream (Deps.In or Deps.Out) is an
	// interactive terminal. Nil means never.
	IsTerminal func(stream any) bool
	// Clock tells time and waits (apply --watch); nil is the wall clock.
	Clock clock.Clock
	// LookupEnv reads the environment, once per command, before it runs:
	// the TRANSIT_* settings of flags and drivers, and $KUBECONFIG and
	// $HOME for kubeconfig --merge. main passes os.LookupEnv; nil is an
	// empty environment.
	LookupEnv func(key string) (string, bool)
	// Drivers returns the driver registry, tuned by the environment's
	// settings (TRANSIT_LOCAL_ROOT, TRANSIT_POLL_INTERVAL,
	// TRANSIT_SSH_TIMEOUT, TRANSIT_BUNDLE, TRANSIT_MESH_BINARY): main passes
	// transit.BuiltinDrivers. Nil means no driver.
	Drivers func(transit.BuiltinOptions) transit.Drivers
	// Stores opens remote state stores (--state s3://…) by URL scheme:
	// main passes transit.BuiltinStores(). Nil means paths only.
	Stores map[string]transit.StoreFunc
}

func (d Deps) isTerminal(stream any) bool {
	return d.IsTerminal != nil && stream != nil && d.IsTerminal(stream)
}

func (d Deps) clock() clock.Clock {
	if d.Clock == nil {
		return clock.Real{}
	}
	return d.Clock
}

// GlobalFlags are the persistent flags every command shares, and the
// settings the root command read from the environment before the command
// runs.
type GlobalFlags struct {
	Cluster     string
	Districts   string
	Credentials string
	Prices      string
	State       string
	LockTimeout time.Duration
	LogLevel    string

	env environment
}

func (g *GlobalFlags) paths() districts.Paths {
	return districts.Paths{
		Cluster:     g.Cluster,
		Districts:   g.Districts,
		Credentials: g.Credentials,
		Prices:      g.Prices,
		State:       g.State,
	}
}

// logger returns the slog logger writing to w at the --log-level.
func (g *GlobalFlags) logger(w io.Writer) (*slog.Logger, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(g.LogLevel)); err != nil {
		return nil, withKind(kindUsage, fmt.Errorf("--log-level %q: use debug, info, warn or error", g.LogLevel))
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: level})), nil
}

// EnvPrefix is the prefix of the environment variables that set flags:
// --lock-timeout is TRANSIT_LOCK_TIMEOUT, --auto-approve TRANSIT_AUTO_APPROVE.
const EnvPrefix = "TRANSIT"

// NewRootCommand builds the transit command tree.
func NewRootCommand(deps Deps) *cobra.Command {
	if deps.In == nil {
		deps.In = strings.NewReader("")
	}
	if deps.Out == nil {
		deps.Out = io.Discard
	}
	if deps.Err == nil {
		deps.Err = io.Discard
	}
	g := &GlobalFlags{}

	cmd := &cobra.Command{
		Use:   "transit",
		Short: "Provision elastic container platforms across clouds",
		Long: `transit provisions an elastic container platform (Kubernetes or Docker Swarm)
across several clouds. It diffs the intended state (cluster.json) against the
current state (resources.json, refreshed from the clouds) and adds, joins,
drains and removes nodes until they match.

Every flag can also be set from the environment: --lock-timeout is
TRANSIT_LOCK_TIMEOUT, --auto-approve is TRANSIT_AUTO_APPROVE. A flag given on
the command line wins.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			g.env = readEnvironment(deps.LookupEnv, cmd.Flags())
			return flagsFromEnv(g.env, cmd.Flags())
		},
	}
	cmd.SetIn(deps.In)
	cmd.SetOut(deps.Out)
	cmd.SetErr(deps.Err)

	pf := cmd.PersistentFlags()
	pf.StringVarP(&g.Cluster, "cluster", "c", "./cluster.json", "intended state of the cluster")
	pf.StringVarP(&g.Districts, "districts", "d", "./districts.json", "districts the cluster may run in")
	pf.StringVar(&g.Credentials, "credentials", "./credentials.json", "provider credentials (must not be readable by group or others; optional)")
	pf.StringVar(&g.Prices, "prices", "./prices.json", "hourly prices of district flavors that districts.json does not price (transit prices writes it; optional)")
	pf.StringVar(&g.State, "state", "./resources.json", "current state transit tracks")
	pf.DurationVar(&g.LockTimeout, "lock-timeout", 0, "how long to wait for another run's lock on the state (0: fail at once, naming the holder)")
	pf.StringVar(&g.LogLevel, "log-level", "info", "log level: debug, info, warn or error")

	cmd.AddCommand(
		NewValidateCommand(deps, g),
		NewPlanCommand(deps, g),
		NewApplyCommand(deps, g),
		NewAutoscaleCommand(deps, g),
		NewShowCommand(deps, g),
		NewStatusCommand(deps, g),
		NewDestroyCommand(deps, g),
		NewKubeconfigCommand(deps, g),
		NewMeshCommand(deps, g),
		NewPricesCommand(deps, g),
		NewStateCommand(deps, g),
		NewForceUnlockCommand(deps, g),
		NewVersionCommand(deps),
	)
	return cmd
}

// flagsFromEnv sets every flag not given on the command line from its
// TRANSIT_* environment variable (an empty one counts as unset), so the
// flags structs see one value.
func flagsFromEnv(env environment, fs *pflag.FlagSet) error {
	var errs []error
	fs.VisitAll(func(f *pflag.Flag) {
		if f.Changed || f.Name == "help" {
			return
		}
		name := envName(f.Name)
		val := env.getenv(name)
		if val == "" {
			return
		}
		if err := fs.Set(f.Name, val); err != nil {
			errs = append(errs, fmt.Errorf("%s=%q (for --%s): %w", name, val, f.Name, err))
		}
	})
	return errors.Join(errs...)
}

func envName(flag string) string {
	return EnvPrefix + "_" + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

// Args is the command line as the root command parses it: Terraform's
// single-dash -out (plan -out FILE, the CI habit) becomes --out, which it
// means, rather than the shorthands -o -u -t.
func Args(args []string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		if a == "-out" || strings.HasPrefix(a, "-out=") {
			a = "-" + a
		}
		out[i] = a
	}
	return out
}
