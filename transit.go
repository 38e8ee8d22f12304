// Package transit is the session API: everything the transit command does
// to a cluster, callable from Go. The command and any other program — a
// MAPE auto-scaling loop, a CI step written in Go — use the same entry
// point:
//
//	s, err := transit.Open(ctx, transit.Options{Files: files, Access: transit.Change, Drivers: transit.BuiltinDrivers(transit.BuiltinOptions{})})
//	if err != nil { ... }
//	defer s.Close()
//	plan, err := s.Plan(ctx, transit.PlanOptions{Refresh: true})
//	...
//	res, err := s.Apply(ctx, transit.ApplyOptions{Confirmed: &plan})
//
// Open loads and validates cluster.json, districts.json and
// credentials.json, and, as its Access asks, takes the state lock, reads
// resources.json, the cluster's SSH key and its nodes' pinned host keys,
// and builds the drivers through an explicit registry (Drivers). The
// session then plans, applies (saving resources.json after every action),
// destroys, reports the status and exports a Kubernetes cluster's
// kubeconfig, until Close releases what it holds.
//
// The package never prints and never reads the environment: logs go to
// Options.Logger, progress to the callbacks of ApplyOptions, and every
// setting comes in through an options struct.
package transit

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/cloudtransit/transit/clock"
	"github.com/cloudtransit/transit/control"
	"github.com/cloudtransit/transit/districts"
	"github.com/cloudtransit/transit/filelock"
	"github.com/cloudtransit/transit/platforms/ssh"
	"github.com/cloudtransit/transit/provider"
	"github.com/cloudtransit/transit/state"
)

// The control loop's values, as the session returns them.
type (
	// Plan is what one round will do: Plan returns it, Apply executes
	// exactly it.
	Plan = control.Plan
	// Action is one step of a plan.
	Action = control.Action
	// Result is how an apply or destroy ended.
	Result = control.Result
	// Event reports the loop's progress (ApplyOptions.OnEvent).
	Event = control.Event
)

// Access says what a session may do with the clouds and the state.
type Access int

const (
	// ReadState reads the files as they are: no driver, no lock, no
	// write. Enough for Plan and Status without Refresh, and Kubeconfig.
	ReadState Access = iota
	// Observe also asks the clouds and the platform, and keeps what they
	// say in memory: the drivers, no lock, no write. Plan and Status with
	// Refresh; it runs beside another session that holds the lock.
	Observe
	// Change may change the cluster: Open takes the state lock and the
	// cluster's SSH key, and Apply and Destroy save resources.json after
	// every action. Only one session may change a cluster at a time.
	Change
)

func (a Access) String() string {
	switch a {
	case ReadState:
		return "ReadState"
	case Observe:
		return "Observe"
	case Change:
		return "Change"
	}
	return fmt.Sprintf("Access(%d)", int(a))
}

// Options configure a session.
type Options struct {
	// Files are the paths of cluster.json, districts.json,
	// credentials.json (optional: a missing file, or an empty path, is
	// none) and resources.json (a missing file is an empty state). The
	// cluster's SSH key, host-key pins, admin kubeconfig and the lock file
	// live beside resources.json. Files.State may instead be the URL of a
	// remote state store ("s3://bucket/prefix"), opened with Stores: the
	// store then holds all of them, the secrets sealed with StateKey.
	Files districts.Paths
	// Stores opens remote state stores by URL scheme ("s3");
	// BuiltinStores returns transit's own.
	Stores map[string]StoreFunc
	// StateKey is the age identity that seals the secrets in a remote
	// state (the cluster's SSH private key, the admin kubeconfig); empty
	// is the state_key of the credential the URL names, if any.
	StateKey string
	// Access says what the session may do; the zero value reads only.
	Access Access
	// Command is recorded in the lock file as its holder's command, e.g.
	// "transit apply" or "autoscaler", so that a second run names it.
	Command string
	// LockTimeout is how long Open waits for another run's lock (Change
	// only): 0 fails at once with an error naming the holder (ErrLocked),
	// a negative value waits until ctx ends.
	LockTimeout time.Duration
	// LockLease is a remote store's lease (0: statestore.DefaultLease):
	// the holder stops acting three quarters of it after its last
	// renewal, and another run may take its lock over a lease and a
	// quarter after it.
	LockLease time.Duration
	// Drivers builds each district's infrastructure driver and the
	// cluster's platform driver. ReadState needs none. BuiltinDrivers
	// returns transit's own.
	Drivers Drivers
	// PollInterval is how often the loop re-observes while it waits for
	// what only time fixes; 0 is the loop's default (2s).
	PollInterval time.Duration
	// Clock tells time and waits; nil is the wall clock.
	Clock clock.Clock
	// Logger receives the session's and the loop's logs; nil discards
	// them.
	Logger *slog.Logger
}

// Session is an open cluster: its configuration and state as read at Open,
// the drivers it needs and, for Change, the state lock. Its methods are
// meant for one goroutine at a time. A session reads the files once: to
// see a rewritten cluster.json, open a new one. Close it when done.
type Session struct {
	opts     Options
	cfg      districts.Config
	state    districts.Resources
	lock     *filelock.Lock
	key      *ssh.Key
	hosts    *ssh.HostKeys
	infra    map[string]provider.Infrastructure
	platform provider.Platform
	remote   *remote // a remote state store, nil for a path
	journal  *state.Journal
	// inputs are the SHA-256 of cluster.json, districts.json and prices.json, and
	// stateSum the state's, as Open read them: a saved plan records them.
	inputs   map[string]string
	stateSum string
	save     func(districts.Resources, control.Changed) error
	saves    atomic.Int64 // successful saves, to know when to re-read the state
	closed   bool
}

// Open loads and validates the configuration and opens the cluster for
// opts.Access. In this order, and stopping at the first failure: it loads
// the three configuration files (every problem at once, each naming its
// file and JSON path; ErrConfig), takes the state lock (Change; ErrLocked
// names the holder), reads resources.json (ErrConfig; a state of another
// cluster is refused), reads or creates the cluster's SSH key and reads
// its host-key pins (Observe and Change), and builds every district's
// infrastructure driver (ErrConfig). The platform driver is built when a
// method first needs it; Destroy never does. Nothing is written but the
// lock file and, the first time, the cluster's SSH key.
func Open(ctx context.Context, opts Options) (_ *Session, err error) {
	if opts.Clock == nil {
		opts.Clock = clock.Real{}
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if opts.Access < ReadState || opts.Access > Change {
		return nil, fmt.Errorf("open: unknown access %v", opts.Access)
	}
	inputs := map[string]string{}
	for label, path := range inputFiles(opts.Files) {
		if inputs[label], err = hashFile(path); err != nil {
			return nil, configError(err)
		}
	}
	cfg, err := LoadConfig(opts.Files)
	if err != nil {
		return nil, err
	}
	// The hashes name what was loaded only if no edit landed between:
	// a saved plan must not record inputs it was not made from.
	for label, path := range inputFiles(opts.Files) {
		if h, err := hashFile(path); err != nil || h != inputs[label] {
			return nil, configError(fmt.Errorf("%s changed while transit read it: run again", path))
		}
	}
	s := &Session{opts: opts, cfg: cfg, inputs: inputs}
	defer func() {
		if err != nil {
			err = errors.Join(err, s.Close())
		}
	}()
	if IsRemote(opts.Files.State) {
		if err := s.openRemote(ctx); err != nil {
			return nil, err
		}
	} else if opts.Access == Change {
		if err := s.takeLock(ctx); err != nil {
			return nil, err
		}
	}
	statePath := s.statePath()
	if opts.Access == Change {
		// A run killed before it wrote the state whole left a journal.
		if err := state.Compact(statePath); err != nil {
			return nil, configError(err)
		}
	}
	if s.state, err = s.loadState(); err != nil {
		return nil, configError(err)
	}
	s.stateSum = stateHash(s.state)
	if opts.Access == ReadState {
		return s, nil
	}
	// Every machine gets the cluster's SSH key; platform drivers log in
	// with it and check the pinned host keys.
	stateDir := filepath.Dir(statePath)
	if err := s.keyKept(stateDir); err != nil {
		return nil, err
	}
	if s.key, err = ssh.EnsureKey(stateDir, cfg.Cluster.ID); err != nil {
		return nil, err
	}
	if s.remote != nil && s.remote.lock != nil {
		// A key made now is in the store before any machine gets it: a
		// run killed later must not leave machines with a key no other
		// run has.
		if err := s.remote.push(); err != nil {
			return nil, err
		}
	}
	if s.hosts, err = ssh.OpenHostKeys(ssh.HostKeysPath(stateDir, cfg.Cluster.ID)); err != nil {
		return nil, err
	}
	if s.infra, err = opts.Drivers.infrastructures(ctx, cfg); err != nil {
		return nil, configError(err)
	}
	if opts.Access == Change {
		s.journal = state.NewJournal(statePath, s.state.Serial, opts.Clock.Now)
		if s.remote != nil {
			s.journal.Sink = s.remote.log
		}
		s.save = func(r districts.Resources, ch control.Changed) error {
			if s.remote != nil {
				if err := s.remote.writable(); err != nil {
					return err
				}
			}
			if err := s.journal.Save(r, ch.Nodes, ch.Groups, ch.All); err != nil {
				return err
			}
			s.saves.Add(1)
			if s.remote != nil {
				s.remote.saved = true
				return s.remote.push()
			}
			return nil
		}
		// Host keys a provider reports are pinned at launch; a machine's
		// pin goes when transit terminates it.
		for id, drv := range s.infra {
			s.infra[id] = ssh.PinHostKeys(drv, s.hosts)
		}
	}
	return s, nil
}

// takeLock takes the state lock, reports a lock that a dead run left, and
// removes the temporary files of an interrupted write: every writer of the
// state holds the lock, so they are no other run's.
func (s *Session) takeLock(ctx context.Context) error {
	path, logger := s.opts.Files.State, s.opts.Logger
	lock, err := filelock.Acquire(ctx, path, filelock.Options{
		Timeout: s.opts.LockTimeout,
		Command: s.opts.Command,
		Clock:   s.opts.Clock,
		Waiting: func(e *filelock.LockedError) {
			logger.Info("waiting for the state lock", "state", e.Path, "holder", e.Holder, "timeout", s.opts.LockTimeout)
		},
	})
	if err != nil {
		return err // names the state file and the holder
	}
	s.lock = lock
	if p := lock.Previous; p != nil {
		logger.Warn("took over the state lock of a run that ended without releasing it", "previous", p)
	}
	leftovers, err := state.RemoveLeftovers(path)
	if err != nil {
		return fmt.Errorf("lock %s: remove temporary files of an interrupted write: %w", path, err)
	}
	if len(leftovers) > 0 {
		logger.Info("removed temporary files of an interrupted state write", "files", leftovers)
	}
	return nil
}

// Close closes the platform driver's connections and releases the state
// lock. It is safe to call more than once; the session is unusable after.
func (s *Session) Close() error {
	if s == nil {
		return nil
	}
	s.closed = true
	var errs []error
	if c, ok := s.platform.(io.Closer); ok {
		s.platform = nil
		if err := c.Close(); err != nil {
			errs = append(errs, fmt.Errorf("close the platform driver: %w", err))
		}
	}
	if s.journal != nil {
		if s.remote != nil && (s.remote.lock == nil || s.remote.writable() != nil) {
			s.journal.Sink = nil // another run's state is not overwritten
		}
		if err := s.journal.Close(); err != nil {
			errs = append(errs, fmt.Errorf("write the state whole: %w", err))
		} else if s.remote == nil && s.saves.Load() > 0 {
			errs = append(errs, keepLocal(s.opts.Files.State, s.state.Serial))
		}
		s.journal = nil // the remote state's close pushes and keeps what it wrote
	}
	if s.lock != nil {
		l := s.lock
		s.lock = nil
		if err := l.Release(); err != nil {
			errs = append(errs, fmt.Errorf("release state lock: %w", err))
		}
	}
	if s.remote != nil {
		r := s.remote
		s.remote = nil
		errs = append(errs, r.close(s.state.Serial))
	}
	return errors.Join(errs...)
}

// Config is the configuration Open loaded and validated.
func (s *Session) Config() districts.Config { return s.cfg }

// State is resources.json as Open read it, or as the last Apply or Destroy
// of this session left it.
func (s *Session) State() districts.Resources { return s.state }

// use checks that the session is open with at least access a, for what.
func (s *Session) use(a Access, what string) error {
	switch {
	case s.closed:
		return fmt.Errorf("%s: the session is closed", what)
	case s.opts.Access < a:
		return fmt.Errorf("%s needs a session opened with %v access, this one has %v", what, a, s.opts.Access)
	}
	return nil
}

// platformDriver builds the platform driver the first time it is needed.
func (s *Session) platformDriver(ctx context.Context) (provider.Platform, error) {
	if s.platform != nil {
		return s.platform, nil
	}
	p, err := s.opts.Drivers.platform(ctx, s.cfg.Cluster, PlatformEnv{
		StateDir:      filepath.Dir(s.statePath()),
		Districts:     s.cfg.Districts,
		DistrictsFile: s.opts.Files.Districts,
		Changes:       s.opts.Access == Change,
		Key:           s.key,
		HostKeys:      s.hosts,
		Clock:         s.opts.Clock,
		Logger:        s.opts.Logger,
	})
	if err != nil {
		return nil, configError(err)
	}
	s.platform = p
	return p, nil
}

// loopOptions are the control loop's options for this session: its
// configuration, state and drivers. Only a session that changes the
// cluster saves.
func (s *Session) loopOptions() control.Options {
	o := control.Options{
		// Autoscaled deployments at the quantity transit autoscale chose.
		Cluster:     s.cfg.Cluster.Effective(s.state),
		Districts:   s.cfg.Districts,
		Infra:       s.infra,
		Prices:      s.cfg.PriceTable(),
		State:       s.state,
		SaveChanged: s.save,
		Clock:       s.opts.Clock,
		Logger:      s.opts.Logger,
	}
	if s.opts.Access != ReadState {
		o.PollInterval = s.opts.PollInterval
	}
	if s.key != nil && s.opts.Access == Change {
		o.AuthorizedKey = s.key.AuthorizedKey
	}
	return o
}

// LoadConfig loads and validates cluster.json, districts.json and
// credentials.json together, as Open does, and reports every problem at
// once, each with its file and JSON path. The error matches ErrConfig and
// districts.ErrInvalid; several problems print one per line under a count.
func LoadConfig(files districts.Paths) (districts.Config, error) {
	cfg, err := districts.Load(files)
	if err != nil {
		return cfg, configError(problemList(err))
	}
	return cfg, nil
}

// loadState reads the state and makes sure it is the cluster's: a run
// against another cluster's state would forget every node in it.
func (s *Session) loadState() (districts.Resources, error) {
	cluster := s.cfg.Cluster.ID
	res, err := districts.LoadResources(s.statePath())
	if err != nil {
		return res, problemList(err)
	}
	if res.Cluster != "" && res.Cluster != cluster {
		return res, fmt.Errorf("%s holds the state of cluster %q, but cluster.json describes cluster %q: point --state at %q's state",
			s.opts.Files.State, res.Cluster, cluster, cluster)
	}
	return res, nil
}

// reload re-reads resources.json after the loop saved it.
func (s *Session) reload() error {
	res, err := s.loadState()
	if err != nil {
		return fmt.Errorf("re-read the state: %w", err)
	}
	s.state = res
	return nil
}
