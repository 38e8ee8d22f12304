package cli

import (
	"errors"
	"fmt"
	"time"

	"github.com/spf13/pflag"

	"github.com/cloudtransit/transit"
)

// Settings only the environment gives.
const (
	envLocalRoot    = "TRANSIT_LOCAL_ROOT"    // the local provider's records (default /var/lib/transit/local)
	envPollInterval = "TRANSIT_POLL_INTERVAL" // how often a cloud is re-asked and the loop re-observes while it waits
	envSSHTimeout   = "TRANSIT_SSH_TIMEOUT"   // how long to wait for a node's sshd (default 2m)
	envBundle       = "TRANSIT_BUNDLE"        // the Kubernetes bundle of the districts that name none
	envMeshBinary   = "TRANSIT_MESH_BINARY"   // the transit-mesh a Swarm on the node mesh sends to its nodes
	envStateLease   = "TRANSIT_STATE_LEASE"   // a remote state lock's lease (default 2m)
	// envStateKey is the age identity sealing a remote state's secrets:
	// never a flag, so it does not show in process listings.
	envStateKey = "TRANSIT_STATE_KEY"
)

// minStateLease keeps a lease's renewals (every quarter of it) longer
// than a slow request to the store.
const minStateLease = 4 * time.Second

// environment is what the root command read from the environment before
// the command runs: the TRANSIT_* variables of its flags and settings, and
// $KUBECONFIG and $HOME for kubeconfig --merge. Nothing else reads the
// environment.
type environment struct {
	vars map[string]string
}

// readEnvironment reads, once, every variable the command may use: one
// per flag of fs, and the settings only the environment gives.
func readEnvironment(lookup func(string) (string, bool), fs *pflag.FlagSet) environment {
	e := environment{vars: map[string]string{}}
	if lookup == nil {
		return e
	}
	names := []string{envLocalRoot, envPollInterval, envSSHTimeout, envBundle, envMeshBinary, envStateLease, envStateKey, "KUBECONFIG", "HOME"}
	fs.VisitAll(func(f *pflag.Flag) { names = append(names, envName(f.Name)) })
	for _, name := range names {
		if v, ok := lookup(name); ok {
			e.vars[name] = v
		}
	}
	return e
}

// getenv returns a variable as read, "" when unset.
func (e environment) getenv(name string) string { return e.vars[name] }

// builtin maps the environment's settings to the options of transit's
// drivers.
func (e environment) builtin() (transit.BuiltinOptions, error) {
	o := transit.BuiltinOptions{LocalRoot: e.getenv(envLocalRoot), Bundle: e.getenv(envBundle), MeshBinary: e.getenv(envMeshBinary)}
	var err error
	if o.PollInterval, err = e.duration(envPollInterval, "500ms"); err != nil {
		return o, err
	}
	if o.SSHTimeout, err = e.duration(envSSHTimeout, "30s"); err != nil {
		return o, configError(err)
	}
	return o, nil
}

// duration parses a positive duration setting; 0 when unset.
func (e environment) duration(name, example string) (time.Duration, error) {
	v := e.getenv(name)
	if v == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("%s=%q: want a positive duration such as %s", name, v, example)
	}
	return d, nil
}

// sessionOptions map the global flags and the environment to the options
// of a session with access a; command is recorded in the lock.
func (g *GlobalFlags) sessionOptions(deps Deps, a transit.Access, command string) (transit.Options, error) {
	logger, err := g.logger(deps.Err)
	if err != nil {
		return transit.Options{}, err
	}
	lease, err := g.env.duration(envStateLease, "2m")
	if err == nil && lease > 0 && lease < minStateLease {
		err = fmt.Errorf("%s=%s: at least %s (the holder renews it every quarter, over the network)", envStateLease, lease, minStateLease)
	}
	if err != nil {
		return transit.Options{}, configError(err)
	}
	o := transit.Options{
		Files:       g.paths(),
		Access:      a,
		Command:     command,
		LockTimeout: g.LockTimeout,
		LockLease:   lease,
		Stores:      deps.Stores,
		StateKey:    g.env.getenv(envStateKey),
		Clock:       deps.clock(),
		Logger:      logger,
	}
	if a == transit.ReadState {
		return o, nil // no driver, no setting of one
	}
	b, err := g.env.builtin()
	if err != nil {
		return transit.Options{}, err
	}
	o.PollInterval = b.PollInterval
	if deps.Drivers != nil {
		o.Drivers = deps.Drivers(b)
	}
	return o, nil
}

// closeInto closes s and adds a failure to *err.
func closeInto(s *transit.Session, err *error) {
	if cerr := s.Close(); cerr != nil {
		*err = errors.Join(*err, cerr)
	}
}

// districtOrder is the districts' ids in districts.json order.
func districtOrder(s *transit.Session) []string {
	ds := s.Config().Districts
	ids := make([]string, len(ds))
	for i, d := range ds {
		ids[i] = d.ID
	}
	return ids
}
