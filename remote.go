package transit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/cloudtransit/transit/districts"
	"github.com/cloudtransit/transit/platforms/kubernetes"
	"github.com/cloudtransit/transit/platforms/ssh"
	"github.com/cloudtransit/transit/statestore"
	"github.com/cloudtransit/transit/statestore/seal"
)

// StoreFunc opens the state store a URL names (Options.Files.State), e.g.
// "s3://bucket/prefix?endpoint=…".
type StoreFunc func(ctx context.Context, location *url.URL, env StoreEnv) (statestore.Store, error)

// StoreEnv is what a StoreFunc gets besides the URL.
type StoreEnv struct {
	// Credentials are credentials.json's entries, from which the store
	// takes the one the URL names.
	Credentials []districts.Credential
	// Logger is the session's (never nil): the store's client library
	// logs to it, at debug level, rather than to stderr.
	Logger *slog.Logger
}

// RemoteStateObject is the name of the state in a remote store.
const RemoteStateObject = "resources.json"

// remoteSaveTimeout bounds one write to a remote store after a save; it
// runs even when the loop's context ended, so the last state is stored.
const remoteSaveTimeout = 2 * time.Minute

// IsRemote says a state location is a URL (a remote store), not a path.
func IsRemote(location string) bool {
	u, err := url.Parse(location)
	// A one-letter scheme is a Windows drive (C:\…), not a store.
	return err == nil && len(u.Scheme) > 1 && strings.Contains(location, "://")
}

// remote is a session's remote state: the store, its lock (Change), and
// the private local copy the session's file-based parts work in.
type remote struct {
	store  statestore.Store
	mirror *statestore.Mirror   // the files besides the state
	log    *statestore.StateLog // the state
	lock   statestore.Lock
	// saved says the session wrote the state: Close keeps it in the
	// store's history.
	saved bool
	// conflict is the conflict that stopped the session's writes: none
	// is tried after it, Close's neither.
	conflict error
}

// openStore opens the store of a remote location with the registry's
// function for its scheme.
func (o Options) openStore(ctx context.Context, location string, creds []districts.Credential) (statestore.Store, error) {
	u, err := url.Parse(location)
	if err != nil {
		return nil, configError(fmt.Errorf("state %q: %w", location, err))
	}
	open, ok := o.Stores[u.Scheme]
	if !ok || open == nil {
		var schemes []string
		for s := range o.Stores {
			schemes = append(schemes, s+"://")
		}
		slices.Sort(schemes)
		return nil, configError(fmt.Errorf("state %q: no state store for %s:// in this build (a path, or one of: %s)", location, u.Scheme, strings.Join(schemes, ", ")))
	}
	logger := o.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	s, err := open(ctx, u, StoreEnv{Credentials: creds, Logger: logger})
	if err != nil {
		return nil, configError(fmt.Errorf("state %s: %w", location, err))
	}
	return s, nil
}

// stateKey is the key that seals the secrets of a remote state:
// Options.StateKey, else the state_key of the credential the URL names.
func (o Options) stateKey(location string, creds []districts.Credential) (*seal.Key, string, error) {
	text, hint := o.StateKey, "TRANSIT_STATE_KEY"
	if text == "" {
		if u, err := url.Parse(location); err == nil {
			if id := u.Query().Get("credential_id"); id != "" {
				if c := credential(creds, id); c != nil && c.StateKey != "" {
					text, hint = c.StateKey.Reveal(), fmt.Sprintf("state_key of credential %q", id)
				}
			}
		}
	}
	if text == "" {
		return nil, hint, nil
	}
	k, err := seal.Parse(text)
	if err != nil {
		return nil, hint, configError(fmt.Errorf("%s: %w", hint, err))
	}
	return k, hint, nil
}

// openRemote opens the remote state at opts.Files.State: the store, its
// lock for Change, and the local copy, pulled. Without a state key, Change
// and Observe are refused (the cluster's SSH key is sealed) and ReadState
// copies only what is not sealed.
func (s *Session) openRemote(ctx context.Context) error {
	location, cluster := s.opts.Files.State, s.cfg.Cluster.ID
	store, err := s.opts.openStore(ctx, location, s.cfg.Credentials)
	if err != nil {
		return err
	}
	key, hint, err := s.opts.stateKey(location, s.cfg.Credentials)
	if err != nil {
		return err
	}
	if key == nil && s.opts.Access != ReadState {
		return configError(fmt.Errorf("state %s keeps the cluster's SSH key sealed: set %s (an age identity; `transit state keygen` makes one) — the same key for every run of this cluster",
			store.Location(), hint))
	}
	r := &remote{store: store}
	s.remote = r
	tookOver := false
	if s.opts.Access == Change {
		lock, err := store.Lock(ctx, statestore.LockOptions{
			Command: s.opts.Command,
			Timeout: s.opts.LockTimeout,
			Lease:   s.opts.LockLease,
			Waiting: func(e *statestore.LockedError) {
				s.opts.Logger.Info("waiting for the state lock", "state", e.Store, "holder", e.Holder.String(), "timeout", s.opts.LockTimeout)
			},
			TookOver: func(p statestore.LockInfo) {
				tookOver = true
				s.opts.Logger.Warn("took over the state lock of a run that ended without releasing it", "previous", p.String())
			},
		})
		if err != nil {
			return err
		}
		r.lock = lock
	}
	dir, err := mirrorDir(cluster)
	if err != nil {
		return err
	}
	r.mirror = &statestore.Mirror{Store: store, Dir: dir, Files: remoteFiles(cluster, key != nil), Key: key, KeyHint: hint}
	if err := r.mirror.Pull(ctx); err != nil {
		return fmt.Errorf("read the state from %s: %w", store.Location(), err)
	}
	base, journal, lines, err := statestore.ReadState(ctx, store, RemoteStateObject)
	if err != nil {
		return fmt.Errorf("read the state from %s: %w", store.Location(), err)
	}
	if s.opts.Access == Change && (len(lines) > 0 || tookOver && base.Data != nil) {
		// A run killed before it wrote the state whole left lines: the
		// state object takes them now. A lock taken over may be a live
		// run's that was only paused: the state is written with the
		// next serial (the fence), so that run's next write names a
		// version that is gone and is refused.
		if base, err = foldLines(store, base, journal, lines, tookOver); err != nil {
			if errors.Is(err, statestore.ErrConflict) {
				return r.conflicted(err)
			}
			return err
		}
		journal, lines = nil, nil
	}
	if err := writeLocal(dir, base, journal); err != nil {
		return err
	}
	r.log = &statestore.StateLog{Store: store, Name: RemoteStateObject, Base: base.Version, Lines: lines, OnConflict: r.conflicted, Timeout: remoteSaveTimeout, Fence: r.writable}
	return nil
}

// remoteFiles are the files a remote store holds for cluster besides the
// state (the session's StateLog keeps that); secrets only with a key.
func remoteFiles(cluster string, secrets bool) []statestore.MirrorFile {
	files := []statestore.MirrorFile{
		{File: filepath.Base(ssh.KeyPath("", cluster)) + ".pub"},
		{File: filepath.Base(ssh.HostKeysPath("", cluster))},
	}
	if secrets {
		files = append(files,
			statestore.MirrorFile{File: filepath.Base(ssh.KeyPath("", cluster)), Sealed: true},
			statestore.MirrorFile{File: filepath.Base(kubernetes.AdminConfigPath("", cluster)), Sealed: true})
	}
	return files
}

// mirrorPrefix starts the name of every local copy of a remote state.
const mirrorPrefix = "transit-state-"

// migratePrefix started the name of the copies `state migrate` made
// before it copied through memory, opened secrets among them.
const migratePrefix = "transit-migrate-"

// migrateLeftoverAge is the age after which a migrate's copy is a killed
// run's: a migrate takes seconds.
const migrateLeftoverAge = time.Hour

// removeLeftovers removes from tmp the copies that killed runs left, best
// effort (another user's are not ours to remove): a session's local copy
// whose pid is gone, and an older transit's migrate copy once an hour
// old.
func removeLeftovers(tmp string) {
	entries, err := os.ReadDir(tmp)
	if err != nil {
		return
	}
	for _, e := range entries {
		dir := filepath.Join(tmp, e.Name())
		switch {
		case !e.IsDir():
		case strings.HasPrefix(e.Name(), mirrorPrefix):
			pid, err := os.ReadFile(filepath.Join(dir, "pid"))
			if err != nil {
				continue
			}
			if n, err := strconv.Atoi(strings.TrimSpace(string(pid))); err == nil && !processAlive(n) {
				_ = os.RemoveAll(dir)
			}
		case strings.HasPrefix(e.Name(), migratePrefix):
			if fi, err := e.Info(); err == nil && time.Since(fi.ModTime()) > migrateLeftoverAge {
				_ = os.RemoveAll(dir)
			}
		}
	}
}

// mirrorDir makes the private directory of a session's local copy, and
// removes the copies that killed runs left (removeLeftovers): they hold
// opened secrets.
func mirrorDir(cluster string) (string, error) {
	tmp := os.TempDir()
	removeLeftovers(tmp)
	dir, err := os.MkdirTemp(tmp, mirrorPrefix+cluster+"-")
	if err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(dir, "pid"), []byte(strconv.Itoa(os.Getpid())+"\n"), 0o600); err != nil {
		return "", errors.Join(err, os.RemoveAll(dir))
	}
	return dir, nil
}

// statePath is where the session reads and writes resources.json: the
// path given, or the local copy of a remote state.
func (s *Session) statePath() string {
	if s.remote != nil {
		return filepath.Join(s.remote.mirror.Dir, RemoteStateObject)
	}
	return s.opts.Files.State
}

// push writes what changed in the local copy to the store. A write
// refused because another run wrote the state first names who holds the
// lock now.
func (r *remote) push() error {
	if err := r.writable(); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), remoteSaveTimeout)
	defer cancel()
	err := r.mirror.Push(ctx)
	if errors.Is(err, statestore.ErrConflict) {
		return r.conflicted(err)
	}
	return err
}

// writable says the run may still write the store: no conflict stopped
// it and its lock is still its own (renewed in time by its own clock, not
// taken over, not force-unlocked).
func (r *remote) writable() error {
	if r.conflict != nil {
		return r.conflict
	}
	if r.lock != nil {
		if err := r.lock.Valid(); err != nil {
			return fmt.Errorf("%w: stopping before another run's state is overwritten", err)
		}
	}
	return nil
}

// conflicted records a refused write as the conflict that stops the run,
// naming who holds the lock now.
func (r *remote) conflicted(err error) error {
	if r.conflict != nil {
		return r.conflict
	}
	ctx, cancel := context.WithTimeout(context.Background(), remoteSaveTimeout)
	defer cancel()
	other := "another run"
	var holder statestore.LockInfo
	if obj, lerr := r.store.Get(ctx, "lock"); lerr == nil && json.Unmarshal(obj.Data, &holder) == nil && holder.ID != "" {
		other += " (the lock is now held by " + holder.String() + ")"
	}
	r.conflict = fmt.Errorf("%w: %s wrote the state since this run read it; this run stops without overwriting it", err, other)
	return r.conflict
}

// close stores what changed last (host-key pins, the kubeconfig), keeps
// the state at serial in the store's history if the session wrote it,
// releases the lock and removes the local copy.
func (r *remote) close(serial int64) error {
	var errs []error
	// A run whose lock is no longer its own stores nothing more: its
	// error said so already.
	if r.lock != nil && r.mirror != nil && r.writable() == nil {
		if err := r.push(); err != nil {
			errs = append(errs, err)
		} else if r.saved {
			ctx, cancel := context.WithTimeout(context.Background(), remoteSaveTimeout)
			data, err := os.ReadFile(filepath.Join(r.mirror.Dir, RemoteStateObject))
			if err == nil {
				err = statestore.Keep(ctx, r.store, RemoteStateObject, serial, data, 0)
			}
			cancel()
			if err != nil {
				errs = append(errs, err)
			}
		}
	}
	if r.lock != nil {
		ctx, cancel := context.WithTimeout(context.Background(), remoteSaveTimeout)
		if err := r.lock.Release(ctx); err != nil {
			errs = append(errs, err)
		}
		cancel()
	}
	if r.mirror != nil {
		if err := r.mirror.Remove(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// processAlive says a process with pid runs on this host.
func processAlive(pid int) bool {
	if pid <= 0 {
		return false
	}
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}
