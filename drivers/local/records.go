package local

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cloudtransit/transit/state"
)

// Node states as recorded.
const (
	statePending     = "pending"
	stateRunning     = "running"
	stateTerminating = "terminating"
)

// nodeRecord is <root>/districts/<district>/nodes/<provider id>/record.json:
// the node as the "cloud" knows it, with the name of every host resource it
// has, written before any of them is created.
type nodeRecord struct {
	ProviderID  string            `json:"provider_id"`
	NodeID      string            `json:"node_id"`
	District    string            `json:"district"`
	Zone        string            `json:"zone,omitempty"`
	MachineType string            `json:"machine_type,omitempty"`
	Group       string            `json:"group"`
	Tags        map[string]string `json:"tags"`
	State       string            `json:"state"`
	CreatedAt   time.Time         `json:"created_at"`

	IP      string `json:"ip"`
	Prefix  int    `json:"prefix"`
	Gateway string `json:"gateway"`

	Root     string   `json:"root"`
	NodeDir  string   `json:"node_dir"`
	Netns    string   `json:"netns"`
	HostVeth string   `json:"host_veth"`
	Bridge   string   `json:"bridge"`
	Cgroups  []string `json:"cgroups"`
	SSHD     string   `json:"sshd"`

	InitPID       int    `json:"init_pid,omitempty"`
	InitStart     uint64 `json:"init_start,omitempty"`
	TeardownPID   int    `json:"teardown_pid,omitempty"`
	TeardownStart uint64 `json:"teardown_start,omitempty"`
}

// groupRecord is <root>/districts/<district>/groups/<chain>.json.
type groupRecord struct {
	Chain     string            `json:"chain"`
	Name      string            `json:"name"`
	Cluster   string            `json:"cluster"`
	District  string            `json:"district"`
	Bridge    string            `json:"bridge"`
	Tags      map[string]string `json:"tags"`
	Sources   []string          `json:"sources"`
	CreatedAt time.Time         `json:"created_at"`
}

func districtDir(root, district string) string {
	return filepath.Join(root, "districts", district)
}

func nodeDir(root, district, providerID string) string {
	return filepath.Join(districtDir(root, district), "nodes", providerID)
}

func groupPath(root, district, chain string) string {
	return filepath.Join(districtDir(root, district), "groups", chain+".json")
}

// writeJSON writes v atomically: a temp file, fsync, rename.
func writeJSON(path string, v any) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, err = f.Write(append(data, '\n'))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

func readJSON(path string, v any) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(data, v); err != nil {
		return fmt.Errorf("read %s: %w", path, err)
	}
	return nil
}

// readNodes reads every node record of a district. A node directory without
// a record (a teardown that finished but for rmdir) is skipped.
func readNodes(root, district string) ([]*nodeRecord, error) {
	dir := filepath.Join(districtDir(root, district), "nodes")
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []*nodeRecord
	for _, e := range entries {
		if !e.IsDir() || !validProviderID(e.Name()) {
			continue
		}
		r, err := readNode(root, district, e.Name())
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}

func readNode(root, district, providerID string) (*nodeRecord, error) {
	var r nodeRecord
	if err := readJSON(filepath.Join(nodeDir(root, district, providerID), "record.json"), &r); err != nil {
		return nil, err
	}
	return &r, nil
}

func writeNode(r *nodeRecord) error {
	return writeJSON(filepath.Join(r.NodeDir, "record.json"), r)
}

func readGroups(root, district string) ([]*groupRecord, error) {
	dir := filepath.Join(districtDir(root, district), "groups")
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []*groupRecord
	for _, e := range entries {
		chain, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok || !validChain(chain) {
			continue
		}
		var g groupRecord
		if err := readJSON(filepath.Join(dir, e.Name()), &g); err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			return nil, err
		}
		out = append(out, &g)
	}
	return out, nil
}

// lockRoot takes the root's lock (<root>/lock), shared with other transit
// processes and the detached teardowns. The returned func releases it.
func lockRoot(root string) (func(), error) {
	if err := os.MkdirAll(root, 0o755); err != nil {
		return nil, err
	}
	return state.Flock(filepath.Join(root, "lock"))
}

// procStart returns a process's start time (clock ticks since boot), which
// tells a live process from a later one that reused its pid; 0 if it is gone
// or a zombie.
func procStart(pid int) uint64 {
	if pid <= 0 {
		return 0
	}
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	i := strings.LastIndexByte(string(data), ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(data[i+1:]))
	if len(f) < 20 || f[0] == "Z" || f[0] == "X" {
		return 0
	}
	n, err := strconv.ParseUint(f[19], 10, 64)
	if err != nil {
		return 0
	}
	return n
}

// alive says whether the process recorded as pid with start time start still
// runs.
func alive(pid int, start uint64) bool {
	return pid > 0 && start != 0 && procStart(pid) == start
}

// cgroupHierarchies lists the host's mounted cgroup hierarchies from
// /proc/self/mountinfo, one per hierarchy.
func cgroupHierarchies() ([]hierarchy, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return parseMountinfo(f)
}

func parseMountinfo(f io.Reader) ([]hierarchy, error) {
	var hs []hierarchy
	seen := map[string]bool{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		if h, dev, ok := parseMountinfoLine(sc.Text()); ok && !seen[dev] {
			seen[dev] = true
			hs = append(hs, h)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(hs) == 0 {
		return nil, errors.New("no cgroup hierarchy is mounted")
	}
	return hs, nil
}

// parseMountinfoLine returns the cgroup hierarchy a mountinfo line mounts,
// with the device that identifies the hierarchy.
func parseMountinfoLine(line string) (hierarchy, string, bool) {
	f := strings.Fields(line)
	sep := -1
	for i := 6; i < len(f); i++ {
		if f[i] == "-" {
			sep = i
			break
		}
	}
	if sep < 0 || len(f) < sep+4 {
		return hierarchy{}, "", false
	}
	typ := f[sep+1]
	if typ != "cgroup" && typ != "cgroup2" {
		return hierarchy{}, "", false
	}
	if f[3] != "/" { // a bind of a sub-cgroup, not the hierarchy
		return hierarchy{}, "", false
	}
	var opts []string
	named := false
	controllers := false
	for _, o := range strings.Split(f[sep+3], ",") {
		switch {
		case o == "rw" || o == "ro" || o == "":
			continue
		case strings.HasPrefix(o, "name="):
			named = true
		case typ == "cgroup" && o != "none" && o != "xattr" && o != "noprefix" && o != "clone_children" && o != "cpuset_v2_mode" && !strings.HasPrefix(o, "release_agent="):
			controllers = true
		}
		if strings.HasPrefix(o, "release_agent=") {
			continue
		}
		opts = append(opts, o)
	}
	if typ == "cgroup" && named && !controllers && !slices.Contains(opts, "none") {
		opts = append([]string{"none"}, opts...)
	}
	mount := unescapeMount(f[4])
	return hierarchy{Mount: mount, Type: typ, Options: strings.Join(opts, ",")}, f[2], true
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
