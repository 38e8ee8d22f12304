package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"path/filepath"
	"slices"
	"strings"

	"github.com/cloudtransit/transit/control"
	"github.com/cloudtransit/transit/districts"
	"github.com/cloudtransit/transit/filelock"
	"github.com/cloudtransit/transit/platforms/ssh"
	"github.com/cloudtransit/transit/provider"
	"github.com/cloudtransit/transit/state"
)

// session is what a command that runs the control loop holds: the loaded
// configuration, the state lock and the loop's options.
type session struct {
	cfg  districts.Config
	opts control.Options
	lock *filelock.Lock
}

// access says what a command does with the clouds and the state.
type access int

const (
	// readState reads resources.json as it is: no driver, no lock, no
	// write (plan and status with --refresh=false).
	readState access = iota
	// observe asks the clouds and the platform and writes nothing: the
	// drivers, no lock (plan and status).
	observe
	// mutate may change the cluster and writes resources.json: the lock,
	// the cluster's SSH key and the drivers (apply and destroy).
	mutate
)

// sessionOptions say how to open a session.
type sessionOptions struct {
	command string // recorded in the lock: "transit apply"
	access  access
	// noPlatform builds no platform driver: destroy never asks the
	// platform, so it works when the masters are unreachable.
	noPlatform bool
}

// openSession loads the configuration and the state, takes the state lock
// to mutate, and builds the drivers unless it only reads the state. Only a
// session that mutates can write resources.json: otherwise Options.Save is
// nil and the loop writes nothing. The caller must close the session.
func openSession(ctx context.Context, deps Deps, g *GlobalFlags, so sessionOptions) (_ *session, err error) {
	logger, err := g.logger(deps.Err)
	if err != nil {
		return nil, err
	}
	cfg, err := loadConfig(g)
	if err != nil {
		return nil, configError(err)
	}
	s := &session{cfg: cfg}
	if so.access == mutate {
		s.lock, err = filelock.Acquire(ctx, g.State, filelock.Options{
			Timeout: g.LockTimeout,
			Command: so.command,
			Clock:   deps.Clock,
			Waiting: func(e *filelock.LockedError) {
				logger.Info("waiting for the state lock", "state", e.Path, "holder", e.Holder, "timeout", g.LockTimeout)
			},
		})
		if err != nil {
			return nil, err // names the state file and the holder
		}
		defer func() {
			if err != nil {
				s.closeInto(&err)
			}
		}()
		if p := s.lock.Previous; p != nil {
			logger.Warn("took over the state lock of a run that ended without releasing it", "previous", p)
		}
		// Every writer of the state holds the lock: what an interrupted
		// write left is no other run's.
		leftovers, err := state.RemoveLeftovers(g.State)
		if err != nil {
			return nil, fmt.Errorf("lock %s: remove temporary files of an interrupted write: %w", g.State, err)
		}
		if len(leftovers) > 0 {
			logger.Info("removed temporary files of an interrupted state write", "files", leftovers)
		}
	}
	res, err := loadResources(g.State, cfg.Cluster.ID)
	if err != nil {
		return nil, configError(err)
	}
	s.opts = control.Options{
		Cluster:   cfg.Cluster,
		Districts: cfg.Districts,
		State:     res,
		Clock:     deps.clock(),
		Logger:    logger,
	}
	if so.access == readState {
		return s, nil
	}
	if s.opts.PollInterval, err = pollInterval(); err != nil {
		return nil, err
	}
	// Every machine gets the cluster's SSH key; platform drivers log in
	// with it and check the pinned host keys. Both are read once per
	// command.
	stateDir := filepath.Dir(g.State)
	var key *ssh.Key
	var hosts *ssh.HostKeys
	if so.access == mutate || !so.noPlatform {
		if key, err = ssh.EnsureKey(stateDir, cfg.Cluster.ID); err != nil {
			return nil, err
		}
		if hosts, err = ssh.OpenHostKeys(ssh.HostKeysPath(stateDir, cfg.Cluster.ID)); err != nil {
			return nil, err
		}
	}
	s.opts.Infra, err = buildInfrastructures(ctx, deps, cfg)
	if err != nil {
		return nil, configError(err)
	}
	if so.access == mutate {
		s.opts.Save = state.Saver(g.State, res.Serial, deps.clock().Now)
		s.opts.AuthorizedKey = key.AuthorizedKey
		// Host keys a provider reports are pinned at launch; a machine's
		// pin goes when transit terminates it.
		for id, drv := range s.opts.Infra {
			s.opts.Infra[id] = ssh.PinHostKeys(drv, hosts)
		}
	}
	if !so.noPlatform {
		s.opts.Platform, err = buildPlatform(ctx, deps, cfg.Cluster,
			PlatformEnv{StateDir: stateDir, Districts: cfg.Districts, DistrictsFile: g.Districts, Changes: so.access == mutate, Key: key, HostKeys: hosts, Clock: deps.clock(), Logger: logger})
		if err != nil {
			return nil, configError(err)
		}
	}
	return s, nil
}

// closeInto releases the state lock and adds a failure to *err.
func (s *session) closeInto(err *error) {
	if cerr := s.close(); cerr != nil {
		*err = errors.Join(*err, cerr)
	}
}

// close closes the platform driver's connections and releases the state
// lock, if held.
func (s *session) close() error {
	var errs []error
	if c, ok := s.opts.Platform.(io.Closer); ok {
		s.opts.Platform = nil
		if err := c.Close(); err != nil {
			errs = append(errs, fmt.Errorf("close the platform driver: %w", err))
		}
	}
	if s.lock != nil {
		l := s.lock
		s.lock = nil
		if err := l.Release(); err != nil {
			errs = append(errs, fmt.Errorf("release state lock: %w", err))
		}
	}
	return errors.Join(errs...)
}

func buildInfrastructures(ctx context.Context, deps Deps, cfg districts.Config) (map[string]provider.Infrastructure, error) {
	infra := make(map[string]provider.Infrastructure, len(cfg.Districts))
	var errs []error
	for _, d := range cfg.Districts {
		newInfra, ok := deps.Infrastructures[d.Provider]
		if !ok || newInfra == nil {
			errs = append(errs, fmt.Errorf("district %q: no infrastructure driver for provider %q in this build (available: %s)",
				d.ID, d.Provider, available(deps.Infrastructures)))
			continue
		}
		drv, err := newInfra(ctx, d, credential(cfg.Credentials, d.CredentialID))
		if err != nil {
			errs = append(errs, fmt.Errorf("district %q: %s driver: %w", d.ID, d.Provider, err))
			continue
		}
		infra[d.ID] = drv
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return infra, nil
}

func buildPlatform(ctx context.Context, deps Deps, c districts.Cluster, env PlatformEnv) (provider.Platform, error) {
	newPlatform, ok := deps.Platforms[c.Platform]
	if !ok || newPlatform == nil {
		return nil, fmt.Errorf("cluster %q: no platform driver for %q in this build (available: %s)",
			c.ID, c.Platform, available(deps.Platforms))
	}
	p, err := newPlatform(ctx, c, env)
	if err != nil {
		return nil, fmt.Errorf("cluster %q: %s platform driver: %w", c.ID, c.Platform, err)
	}
	return p, nil
}

func credential(creds []districts.Credential, id string) *districts.Credential {
	if id == "" {
		return nil
	}
	for i := range creds {
		if creds[i].ID == id {
			return &creds[i]
		}
	}
	return nil
}

func available[F any](m map[string]F) string {
	names := slices.Sorted(maps.Keys(m))
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}

// districtOrder is the districts' ids in districts.json order.
func (s *session) districtOrder() []string {
	ids := make([]string, len(s.cfg.Districts))
	for i, d := range s.cfg.Districts {
		ids[i] = d.ID
	}
	return ids
}

// loadConfig loads and validates the configuration files.
func loadConfig(g *GlobalFlags) (districts.Config, error) {
	cfg, err := districts.Load(g.paths())
	return cfg, problemList(err)
}

// loadResources reads the state and makes sure it is the cluster's: a run
// against another cluster's state would forget every node in it.
func loadResources(path, cluster string) (districts.Resources, error) {
	res, err := districts.LoadResources(path)
	if err != nil {
		return res, problemList(err)
	}
	if res.Cluster != "" && res.Cluster != cluster {
		return res, fmt.Errorf("%s holds the state of cluster %q, but cluster.json describes cluster %q: point --state at %q's state file",
			path, res.Cluster, cluster, cluster)
	}
	return res, nil
}

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
