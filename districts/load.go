package districts

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"runtime"

	"github.com/cloudtransit/transit/shellquote"
)

// Paths names the files; empty Credentials or Prices means none.
type Paths struct {
	Cluster     string
	Districts   string
	Credentials string
	State       string
	// Prices is prices.json (prices.go): optional, like credentials.
	Prices string
}

// labels are the names problems carry: the base names of the paths given.
type labels struct{ cluster, districts, credentials, prices string }

func (p Paths) labels() labels {
	name := func(path, def string) string {
		if path == "" {
			return def
		}
		return filepath.Base(path)
	}
	return labels{
		cluster:     name(p.Cluster, "cluster.json"),
		districts:   name(p.Districts, "districts.json"),
		credentials: name(p.Credentials, "credentials.json"),
		prices:      name(p.Prices, "prices.json"),
	}
}

// Config is the loaded, validated configuration.
type Config struct {
	Paths       Paths
	Cluster     Cluster
	Districts   []District
	Credentials []Credential
	// CredentialsLoaded says credentials.json existed and was read, so
	// districts' credential_id references were checked against it.
	CredentialsLoaded bool
	// Prices is prices.json when it exists (PricesLoaded).
	Prices       PriceList
	PricesLoaded bool
}

// What each file holds, for a file whose top level has the wrong shape.
const (
	clusterShape     = `a cluster file holds one object: {"type": "cluster", "id": ..., "platform": ..., "flavors": [...], "deployments": [...]}`
	districtsShape   = `a districts file holds a list: [{"type": "district", "id": ..., "provider": ..., ...}]`
	credentialsShape = `a credentials file holds a list: [{"type": "credential", "id": ..., "provider": ..., ...}]`
	resourcesShape   = `a resources file holds one object: {"type": "resources", "version": 1, ...}`
)

// Load reads cluster.json, districts.json and (when it exists)
// credentials.json strictly, validates them together and returns every
// problem at once as Problems.
//
// A file with unknown keys is still validated, so one run shows all its
// problems; a file with malformed JSON or a value of the wrong type is not,
// and references into it are not checked.
func Load(p Paths) (Config, error) {
	l := p.labels()
	cfg := Config{Paths: p}

	cc := newProblems(l.cluster, reflect.TypeFor[Cluster]())
	clusterOK := readConfig(cc, p.Cluster, &cfg.Cluster, clusterShape, "cluster.example.json")
	dc := newProblems(l.districts, reflect.TypeFor[[]District]())
	districtsOK := readConfig(dc, p.Districts, &cfg.Districts, districtsShape, "districts.example.json")
	kc := newProblems(l.credentials, reflect.TypeFor[[]Credential]())
	if p.Credentials != "" {
		cfg.CredentialsLoaded = readCredentials(kc, p.Credentials, &cfg.Credentials)
	}
	pc := newProblems(l.prices, reflect.TypeFor[PriceList]())
	var pricesOK bool
	cfg.PricesLoaded, pricesOK = readPrices(pc, p.Prices, &cfg.Prices)

	if clusterOK {
		validateCluster(cc, cfg.Cluster, cfg.Districts, districtsOK, l.districts)
	}
	if districtsOK {
		validateDistricts(dc, cfg.Districts, cfg.Credentials, cfg.CredentialsLoaded, l.credentials)
	}
	if cfg.CredentialsLoaded {
		validateCredentials(kc, cfg.Credentials)
	}
	if cfg.PricesLoaded {
		validatePriceList(pc, cfg.Prices, cfg.Districts, districtsOK, l.districts)
	}
	if clusterOK && districtsOK && pricesOK {
		validatePricing(cc, dc, cfg, l)
	}
	if all := collect(cc, dc, kc, pc); len(all) > 0 {
		return Config{Paths: p}, all
	}
	return cfg, nil
}

// LoadCredentials reads and validates a credentials file alone, as Load
// does (strict, refused when group or others may read it); a missing file
// is an error here.
func LoadCredentials(path string) ([]Credential, error) {
	kc := newProblems(path, reflect.TypeFor[[]Credential]())
	var creds []Credential
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		kc.add("", "file not found", "")
	} else if readCredentials(kc, path, &creds) {
		validateCredentials(kc, creds)
	}
	if all := collect(kc); len(all) > 0 {
		return nil, all
	}
	return creds, nil
}

// readConfig reads and decodes a required file.
func readConfig(c *problems, path string, v any, shape, example string) bool {
	if path == "" {
		c.add("", "no file given", "")
		return false
	}
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		c.add("", "file not found", fmt.Sprintf("start from %s", example))
		return false
	}
	if err != nil {
		c.add("", "cannot read: "+ioReason(err), "")
		return false
	}
	return decodeFile(c, data, v, false, shape)
}

// readCredentials reads credentials.json unless it is missing or other
// users could read it. It reports whether creds was filled in.
func readCredentials(c *problems, path string, creds *[]Credential) bool {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return false // ambient credentials only
	}
	if err != nil {
		c.add("", "cannot read: "+ioReason(err), "")
		return false
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		c.add("", "cannot read: "+ioReason(err), "")
		return false
	}
	if fi.IsDir() {
		c.add("", "cannot read: is a directory", "")
		return false
	}
	// Like ssh with a private key: refuse before reading a byte. Windows
	// has no such mode bits.
	if perm := fi.Mode().Perm(); runtime.GOOS != "windows" && perm&0o077 != 0 {
		c.add("", fmt.Sprintf("mode %#o lets group or others read or write it", perm), "run chmod 600 "+shellquote.Quote(path))
		return false
	}
	data, err := io.ReadAll(f)
	if err != nil {
		c.add("", "cannot read: "+ioReason(err), "")
		return false
	}
	if !decodeFile(c, data, creds, true, credentialsShape) {
		return false
	}
	// A key file is where credentials.json says, wherever transit runs.
	for i := range *creds {
		if k := (*creds)[i].GCEKeyFile; k != "" && !filepath.IsAbs(k) {
			(*creds)[i].GCEKeyFile = filepath.Join(filepath.Dir(path), k)
		}
	}
	return true
}

// ioReason is the cause of a file error without the path, which the
// problem already names.
func ioReason(err error) string {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err.Error()
	}
	return err.Error()
}

// LoadResources reads resources.json, and the journal beside it a run
// left (JournalPath); a missing file is an empty state. An empty or
// corrupt file is an error, never an empty state: transit would otherwise
// forget what it created.
func LoadResources(path string) (Resources, error) {
	// A run may rewrite the state file between the two reads; then the
	// journal skips ahead of the file read, and both are read again.
	const attempts = 20
	for range attempts - 1 {
		r, err := loadResources(path)
		if !errors.Is(err, errJournalGap) {
			return r, err
		}
	}
	r, err := loadResources(path)
	if errors.Is(err, errJournalGap) {
		return Resources{}, fmt.Errorf("%s: %w, in %d reads (a run rewrote the state each time, or the state file was replaced under its journal); %s", filepath.Base(JournalPath(path)), err, attempts, resourcesRecovery)
	}
	return r, err
}

func loadResources(path string) (Resources, error) {
	r := Resources{Type: "resources", Version: ResourcesVersion}
	data, read, err := readIdentified(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return Resources{}, fmt.Errorf("read state: %w", err)
	default:
		var ps Problems
		if r, ps = decodeResources(filepath.Base(path), data); len(ps) > 0 {
			return Resources{}, ps
		}
	}
	journal, err := os.ReadFile(JournalPath(path))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return Resources{}, fmt.Errorf("read state journal: %w", err)
	}
	// A run that rewrote the file meanwhile started a journal of its own,
	// maybe still empty: the journal read may not belong to the file read.
	if now, serr := os.Stat(path); (serr == nil) != (read != nil) || read != nil && !os.SameFile(read, now) {
		return Resources{}, fmt.Errorf("%w: %s was rewritten while it was read", errJournalGap, filepath.Base(path))
	}
	if errors.Is(err, fs.ErrNotExist) {
		return r, nil
	}
	file := filepath.Base(JournalPath(path))
	if r, err = applyJournal(r, file, journal); err != nil {
		return Resources{}, err
	}
	c := newProblems(file, reflect.TypeFor[Resources]())
	if validateResources(c, r); len(c.list) > 0 {
		return Resources{}, c.sorted()
	}
	return r, nil
}

// readIdentified reads the file at path and says which file it read (its
// FileInfo, for os.SameFile): path may be replaced meanwhile.
func readIdentified(path string) ([]byte, fs.FileInfo, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, nil, err
	}
	data, err := io.ReadAll(f)
	return data, fi, err
}

const resourcesRecovery = "resources.json is a cache of what transit found in the clouds: restore it, or delete it and the next run adopts the nodes it finds by their tags"

// decodeResources decodes and validates a state file.
func decodeResources(file string, data []byte) (Resources, Problems) {
	c := newProblems(file, reflect.TypeFor[Resources]())
	// State files are written by transit and can hold thousands of nodes:
	// the standard strict decoder takes a tenth of the walker's time, so
	// the walker runs only to explain a file that decoder refuses.
	if r, ok := decodeStrictFast(data); ok {
		validateResources(c, r)
		if len(c.list) > 0 {
			return Resources{}, c.sorted()
		}
		return r, nil
	}
	// A newer transit may have changed the format: say so, rather than
	// listing its new keys as unknown.
	if v, ok := peekVersion(data); ok && v > ResourcesVersion {
		checkVersion(c, v)
		return Resources{}, c.sorted()
	}
	if len(bytes.TrimSpace(data)) == 0 {
		c.add("", "file is empty", resourcesRecovery)
		return Resources{}, c.sorted()
	}
	var r Resources
	if !decodeFile(c, data, &r, false, resourcesShape) {
		for i := range c.list {
			if c.list[i].Path == "" && c.list[i].Hint == "" {
				c.list[i].Hint = resourcesRecovery
			}
		}
		return Resources{}, c.sorted()
	}
	validateResources(c, r)
	if len(c.list) > 0 {
		return Resources{}, c.sorted()
	}
	return r, nil
}

// decodeStrictFast decodes one JSON object with no unknown keys and nothing
// after it.
func decodeStrictFast(data []byte) (Resources, bool) {
	var r Resources
	trimmed := bytes.TrimSpace(data)
	if len(trimmed) == 0 || trimmed[0] != '{' {
		return r, false
	}
	dec := json.NewDecoder(bytes.NewReader(trimmed))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil || dec.InputOffset() != int64(len(trimmed)) {
		return Resources{}, false
	}
	return r, true
}

func peekVersion(data []byte) (int, bool) {
	var top map[string]json.RawMessage
	if json.Unmarshal(data, &top) != nil {
		return 0, false
	}
	var v int
	if json.Unmarshal(top["version"], &v) != nil {
		return 0, false
	}
	return v, true
}
