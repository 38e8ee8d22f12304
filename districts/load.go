package districts

import "errors"

// Paths names the four files; empty Credentials means none.
type Paths struct {
	Cluster     string
	Districts   string
	Credentials string
	State       string
}

// Config is the loaded, validated configuration.
type Config struct {
	Paths       Paths
	Cluster     Cluster
	Districts   []District
	Credentials []Credential
}

// Load reads cluster.json, districts.json and (when it exists)
// credentials.json strictly, validates them together and returns every
// problem at once as Problems.
func Load(p Paths) (Config, error) { return Config{}, errors.New("TODO") }

// LoadResources reads resources.json; a missing file is an empty state.
func LoadResources(path string) (Resources, error) { return Resources{}, errors.New("TODO") }
