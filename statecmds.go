package transit

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/cloudtransit/transit/districts"
	"github.com/cloudtransit/transit/state"
	"github.com/cloudtransit/transit/statestore"
	"github.com/cloudtransit/transit/statestore/filestore"
)

// storeAt opens the state store at a location: a path's directory (the
// file store) or a remote store's URL. stateName is the state's object
// name in it.
func (o Options) storeAt(ctx context.Context, location string, creds []districts.Credential) (s statestore.Store, stateName string, err error) {
	if IsRemote(location) {
		s, err := o.openStore(ctx, location, creds)
		return s, RemoteStateObject, err
	}
	fs, err := filestore.New(location)
	if err != nil {
		return nil, "", configError(err)
	}
	return fs, fs.StateName(), nil
}

// stateFiles are the files of cluster a store at location holds: a
// remote store's secrets sealed, a directory's as they are.
func stateFiles(location, stateName, cluster string) []statestore.MirrorFile {
	files := append([]statestore.MirrorFile{{File: stateName}}, remoteFiles(cluster, true)...)
	if !IsRemote(location) {
		for i := range files {
			files[i].Sealed = false
		}
	}
	return files
}

// foldState writes a store's state whole with the journal a killed run
// left (a path's file, a remote store's line objects); the caller holds
// the store's lock.
func foldState(ctx context.Context, s statestore.Store, location string) error {
	if !IsRemote(location) {
		return state.Compact(location)
	}
	base, journal, lines, err := statestore.ReadState(ctx, s, RemoteStateObject)
	if err != nil || len(lines) == 0 {
		return err
	}
	_, err = foldLines(s, base, journal, lines, false)
	return err
}

// foldLines writes a remote state read with its lines (statestore.
// ReadState's) whole into the state object, with the next serial when
// fence is set, removes the lines and returns the state object as it is
// now. Fenced, the state object is another version whatever the lines
// held: a run that read the one before, and still believes it holds the
// lock, has its next write refused.
func foldLines(s statestore.Store, base statestore.Object, journal []byte, lines []statestore.Entry, fence bool) (statestore.Object, error) {
	r, err := decodeStateJournal(base, journal, s.Location())
	if err != nil {
		return statestore.Object{}, err
	}
	if fence {
		r.Serial++
	}
	data, err := state.Encode(r)
	if err != nil {
		return statestore.Object{}, err
	}
	l := &statestore.StateLog{Store: s, Name: RemoteStateObject, Base: base.Version, Lines: lines, Timeout: remoteSaveTimeout}
	if err := l.Whole(r.Serial, data); err != nil {
		return statestore.Object{}, err
	}
	return statestore.Object{Data: data, Version: l.Base}, nil
}

// keepLocal keeps the state file as it is now among the past states of
// its directory (resources.json.history/), as a remote store keeps its.
func keepLocal(path string, serial int64) error {
	fs, err := filestore.New(path)
	if err != nil {
		return err
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	return statestore.Keep(context.Background(), fs, fs.StateName(), serial, data, 0)
}

// ForceUnlock frees the state lock whose ID is id: a remote store's lease
// lock whose holder died before its lease ran out (the error of a locked
// run names the ID). A path's lock is a file lock the kernel frees when
// its holder ends: it is refused, naming the holder.
func ForceUnlock(ctx context.Context, opts Options, id string) error {
	cfg, err := LoadConfig(opts.Files)
	if err != nil {
		return err
	}
	s, _, err := opts.storeAt(ctx, opts.Files.State, cfg.Credentials)
	if err != nil {
		return err
	}
	if err := s.ForceUnlock(ctx, id); err != nil {
		return err
	}
	return fenceState(ctx, s)
}

// fenceState writes a remote state whole with the next serial after its
// lock was forced: the run that held it may live (paused, cut off), and
// its next write, naming the version before, is refused. A write of that
// run racing the fence (a line or a whole state landing between the read
// and the fence's write) is read again and fenced in turn: the holder
// writes until the fence lands, never after. A run that takes the freed
// lock in that instant may have its first write refused as a conflict;
// nothing is lost.
func fenceState(ctx context.Context, s statestore.Store) error {
	var err error
	for range maxFenceTries {
		var base statestore.Object
		var journal []byte
		var lines []statestore.Entry
		base, journal, lines, err = statestore.ReadState(ctx, s, RemoteStateObject)
		if errors.Is(err, statestore.ErrNotFound) || err == nil && base.Data == nil {
			return nil
		}
		if err != nil {
			return fmt.Errorf("the lock is freed, but the state could not be read to fence its last holder: %w", err)
		}
		if _, err = foldLines(s, base, journal, lines, true); !errors.Is(err, statestore.ErrConflict) {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("the lock is freed, but the state could not be written to fence its last holder (its next write may still land; run force-unlock again): %w", err)
	}
	return nil
}

// maxFenceTries bounds the fences a still-writing holder's writes refuse.
const maxFenceTries = 20

// PastState is one state a store keeps; Current marks the state itself.
type PastState struct {
	Serial   int64     `json:"serial"`
	Current  bool      `json:"current,omitempty"`
	Size     int64     `json:"size,omitempty"`
	Modified time.Time `json:"modified,omitzero"`
}

// StateHistory lists the state and the past states the store keeps (the
// state as each run that changed it left it), newest first.
func StateHistory(ctx context.Context, opts Options) ([]PastState, error) {
	cfg, err := LoadConfig(opts.Files)
	if err != nil {
		return nil, err
	}
	s, name, err := opts.storeAt(ctx, opts.Files.State, cfg.Credentials)
	if err != nil {
		return nil, err
	}
	var out []PastState
	cur, err := pullState(ctx, s, name, opts.Files.State)
	switch {
	case errors.Is(err, statestore.ErrNotFound):
	case err != nil:
		return nil, err
	default:
		out = append(out, PastState{Serial: cur.Serial, Current: true})
	}
	past, err := statestore.History(ctx, s, name)
	if err != nil {
		return nil, err
	}
	for _, p := range past {
		out = append(out, PastState{Serial: p.Serial, Size: p.Size, Modified: p.Modified.UTC()})
	}
	return out, nil
}

// pullState reads the state of a store: a path's with its journal.
func pullState(ctx context.Context, s statestore.Store, name, location string) (districts.Resources, error) {
	if !IsRemote(location) {
		if _, err := os.Stat(location); errors.Is(err, os.ErrNotExist) {
			return districts.Resources{}, fmt.Errorf("%s: %w", location, statestore.ErrNotFound)
		}
		return districts.LoadResources(location)
	}
	base, journal, _, err := statestore.ReadState(ctx, s, RemoteStateObject)
	if err != nil {
		return districts.Resources{}, err
	}
	if base.Data == nil && len(journal) == 0 {
		return districts.Resources{}, fmt.Errorf("%s/%s: %w", s.Location(), name, statestore.ErrNotFound)
	}
	return decodeStateJournal(base, journal, s.Location()+"/"+name)
}

func decodeState(data []byte, where string) (districts.Resources, error) {
	return decodeStateJournal(statestore.Object{Data: data}, nil, where)
}

// decodeStateJournal reads a state and its journal as transit reads a
// state file.
func decodeStateJournal(base statestore.Object, journal []byte, where string) (districts.Resources, error) {
	dir, err := os.MkdirTemp("", "transit-pull-")
	if err != nil {
		return districts.Resources{}, err
	}
	defer func() { _ = os.RemoveAll(dir) }()
	if err := writeLocal(dir, base, journal); err != nil {
		return districts.Resources{}, err
	}
	r, err := districts.LoadResources(filepath.Join(dir, RemoteStateObject))
	if err != nil {
		return r, fmt.Errorf("%s: %w", where, err)
	}
	return r, nil
}

// PullState returns the state as JSON (resources.json's format): the
// current one, or with serial > 0 a past one the store keeps.
func PullState(ctx context.Context, opts Options, serial int64) ([]byte, error) {
	cfg, err := LoadConfig(opts.Files)
	if err != nil {
		return nil, err
	}
	s, name, err := opts.storeAt(ctx, opts.Files.State, cfg.Credentials)
	if err != nil {
		return nil, err
	}
	var r districts.Resources
	if serial > 0 {
		data, err := statestore.GetPast(ctx, s, name, serial)
		if err != nil {
			return nil, err
		}
		if r, err = decodeState(data, s.Location()+" state "+strconv.FormatInt(serial, 10)); err != nil {
			return nil, err
		}
	} else if r, err = pullState(ctx, s, name, opts.Files.State); err != nil {
		return nil, err
	}
	return state.Encode(r)
}

// PushState replaces the state with data (resources.json's format), under
// the state lock: only a state of this cluster and its lineage with a
// higher serial, unless force (a person restoring a past state on
// purpose: the pushed state then gets the next serial). It returns the
// serial written.
func PushState(ctx context.Context, opts Options, data []byte, force bool) (int64, error) {
	cfg, err := LoadConfig(opts.Files)
	if err != nil {
		return 0, err
	}
	in, err := decodeState(data, "the pushed state")
	if err != nil {
		return 0, configError(err)
	}
	s, name, err := opts.storeAt(ctx, opts.Files.State, cfg.Credentials)
	if err != nil {
		return 0, err
	}
	l, err := s.Lock(ctx, statestore.LockOptions{Command: "transit state push", Timeout: opts.LockTimeout})
	if err != nil {
		return 0, err
	}
	defer func() { err = errors.Join(err, l.Release(context.WithoutCancel(ctx))) }()
	if err := foldState(ctx, s, opts.Files.State); err != nil {
		return 0, err
	}
	// The checks below and the write name one version of the state: a
	// state another run wrote meanwhile (a broken lock, a store without
	// one) is a conflict, never overwritten.
	cur, write, err := readForPush(ctx, s, name, opts.Files.State)
	exists := err == nil
	if err != nil && !errors.Is(err, statestore.ErrNotFound) {
		return 0, err
	}
	switch {
	case in.Cluster != "" && in.Cluster != cfg.Cluster.ID:
		return 0, configError(fmt.Errorf("the pushed state is cluster %q's, cluster.json describes %q: refused", in.Cluster, cfg.Cluster.ID))
	case exists && cur.Lineage != "" && in.Lineage != cur.Lineage && !force:
		return 0, configError(fmt.Errorf("the pushed state is of lineage %s, the store's of lineage %s: another cluster of the same name (pass --force to replace it anyway)", in.Lineage, cur.Lineage))
	case exists && in.Serial <= cur.Serial && !force:
		return 0, configError(fmt.Errorf("the pushed state has serial %d, the store's %d: it is not newer (pass --force to restore it anyway)", in.Serial, cur.Serial))
	}
	if exists && in.Serial <= cur.Serial {
		in.Serial = cur.Serial + 1
	}
	out, err := state.Encode(in)
	if err != nil {
		return 0, err
	}
	if err := write(in.Serial, out); err != nil {
		if errors.Is(err, statestore.ErrConflict) {
			return 0, fmt.Errorf("%w: another run wrote the state after this push checked it against serial %d; nothing was pushed: pull the state and push again", err, cur.Serial)
		}
		return 0, err
	}
	if err := statestore.Keep(ctx, s, name, in.Serial, out, 0); err != nil {
		return 0, err
	}
	return in.Serial, nil
}

// readForPush reads the state of a store as pullState does, and returns
// how to replace it with the state written whole: a write conditional on
// the version read (a remote store's state object and its lines), so that
// nothing written after the read is overwritten.
func readForPush(ctx context.Context, s statestore.Store, name, location string) (districts.Resources, func(serial int64, data []byte) error, error) {
	if !IsRemote(location) {
		// The version first: a state changed after it fails the write,
		// whatever the read below saw.
		version := statestore.NoVersion
		obj, err := s.Get(ctx, name)
		switch {
		case err == nil:
			version = obj.Version
		case !errors.Is(err, statestore.ErrNotFound):
			return districts.Resources{}, nil, err
		}
		write := func(_ int64, data []byte) error {
			_, err := s.Put(ctx, name, data, version)
			return err
		}
		r, err := pullState(ctx, s, name, location)
		return r, write, err
	}
	base, journal, lines, err := statestore.ReadState(ctx, s, RemoteStateObject)
	if err != nil {
		return districts.Resources{}, nil, err
	}
	l := &statestore.StateLog{Store: s, Name: RemoteStateObject, Base: base.Version, Lines: lines, Timeout: remoteSaveTimeout}
	if base.Data == nil && len(journal) == 0 {
		return districts.Resources{}, l.Whole, fmt.Errorf("%s/%s: %w", s.Location(), name, statestore.ErrNotFound)
	}
	r, err := decodeStateJournal(base, journal, s.Location()+"/"+name)
	return r, l.Whole, err
}

// MigrateState copies the cluster's state, SSH key pair, host-key pins and
// admin kubeconfig from the store at opts.Files.State to the store at to
// (a path or a URL), holding both locks; a remote store gets the secrets
// sealed with the state key. A destination that holds a state already is
// refused unless force. Nothing is deleted at the source. The copy goes
// through memory: no opened secret is written anywhere but to the
// destination, so a killed migrate leaves none behind.
func MigrateState(ctx context.Context, opts Options, to string, force bool) (err error) {
	cfg, err := LoadConfig(opts.Files)
	if err != nil {
		return err
	}
	from := opts.Files.State
	key, hint, err := opts.stateKey(to, cfg.Credentials)
	if err != nil {
		return err
	}
	if key == nil && IsRemote(from) {
		key, hint, err = opts.stateKey(from, cfg.Credentials)
		if err != nil {
			return err
		}
	}
	if key == nil && (IsRemote(from) || IsRemote(to)) {
		return configError(fmt.Errorf("a remote state keeps the cluster's SSH key sealed: set %s (an age identity; `transit state keygen` makes one)", hint))
	}
	// An older transit copied through $TMPDIR/transit-migrate-*, opened
	// secrets among it, and a killed one left them there.
	removeLeftovers(os.TempDir())
	ends := []struct {
		location string
		store    statestore.Store
		lock     statestore.Lock
		mirror   *statestore.Mirror // Read and Write only: no directory
	}{{location: from}, {location: to}}
	defer func() {
		for _, e := range ends {
			if e.lock != nil {
				err = errors.Join(err, e.lock.Release(context.WithoutCancel(ctx)))
			}
		}
	}()
	for i := range ends {
		e := &ends[i]
		var name string
		if e.store, name, err = opts.storeAt(ctx, e.location, cfg.Credentials); err != nil {
			return err
		}
		if e.lock, err = e.store.Lock(ctx, statestore.LockOptions{Command: "transit state migrate", Timeout: opts.LockTimeout}); err != nil {
			return err
		}
		if err := foldState(ctx, e.store, e.location); err != nil {
			return err
		}
		e.mirror = &statestore.Mirror{Store: e.store, Files: stateFiles(e.location, name, cfg.Cluster.ID), Key: key, KeyHint: hint}
	}
	src, dst := ends[0], ends[1]
	// The files are in the same order at both ends, the state first.
	data := make([][]byte, len(src.mirror.Files))
	found := make([]bool, len(src.mirror.Files))
	for i, f := range src.mirror.Files {
		data[i], _, err = src.mirror.Read(ctx, f)
		if errors.Is(err, statestore.ErrNotFound) {
			continue
		}
		if err != nil {
			return err
		}
		found[i] = true
	}
	if !found[0] {
		return configError(fmt.Errorf("%s holds no state to migrate", from))
	}
	versions := make([]string, len(dst.mirror.Files))
	for i, f := range dst.mirror.Files {
		e, err := dst.store.Stat(ctx, f.Object())
		if errors.Is(err, statestore.ErrNotFound) {
			continue
		}
		if err != nil {
			return err
		}
		if i == 0 && !force {
			return configError(fmt.Errorf("%s holds a state already: refused (pass --force to replace it)", to))
		}
		versions[i] = e.Version
	}
	for i, f := range dst.mirror.Files {
		if !found[i] {
			continue
		}
		if _, err := dst.mirror.Write(ctx, f, data[i], versions[i]); err != nil {
			return err
		}
	}
	return nil
}
