package local

import (
	"bufio"
	"context"
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

	"github.com/cloudtransit/transit/atomicfile"
	"github.com/cloudtransit/transit/filelock"
)

// Node states as recorded.
const (
	statePending     = "pending"
	stateRunning     = "running"
	stateTerminating = "terminating"
	stateStopped     = "stopped" // powered off (power.go)
)

// nodeRecord is <root>/districts/<district>/nodes/<provider id>/record.json:
// the node as the "cloud" knows it, written before any host resource is
// created. The names of its host resources (directory, netns, veth, bridge,
// cgroups) are never stored: they derive from the provider id, which must
// match the record's directory, and the driver's root (derive), so a
// doctored record cannot make a teardown touch anything else.
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

	// Derived, never read from or written to the record.
	Root     string   `json:"-"`
	NodeDir  string   `json:"-"`
	Netns    string   `json:"-"`
	HostVeth string   `json:"-"`
	Bridge   string   `json:"-"`
	Cgroups  []string `json:"-"`
	SSHD     string   `json:"-"`

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
	Tags      map[string]string `json:"tags"`
	Sources   []string          `json:"sources"`
	MeshPort  int               `json:"mesh_port,omitempty"`
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

// writeJSON writes v atomically (writeFile).
func writeJSON(path string, v any) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return writeFile(path, append(data, '\n'), 0o644)
}

// writeFile replaces path with data atomically: a temp file, fsync, rename,
// fsync of the directory.
func writeFile(path string, data []byte, perm fs.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	if err := atomicfile.Write(path, data, perm); err != nil {
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
func readNodes(root, district string, hs []hierarchy) ([]*nodeRecord, error) {
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
		r, err := readNode(root, district, e.Name(), hs)
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

// readNode reads a node's record and derives its resource names. A record
// that names another provider id or district than its directory is refused:
// nothing of it is trusted.
func readNode(root, district, providerID string, hs []hierarchy) (*nodeRecord, error) {
	path := filepath.Join(nodeDir(root, district, providerID), "record.json")
	var r nodeRecord
	if err := readJSON(path, &r); err != nil {
		return nil, err
	}
	if r.ProviderID != providerID || r.District != district {
		return nil, fmt.Errorf("%s names node %q in district %q, not its directory's %q in %q: refused; "+
			"the file was changed by hand: inspect it and restore or remove it", path, r.ProviderID, r.District, providerID, district)
	}
	derive(&r, root, hs)
	return &r, nil
}

// derive sets the names of a node's host resources from its checked provider
// id and district and the root.
func derive(r *nodeRecord, root string, hs []hierarchy) {
	r.Root = root
	r.NodeDir = nodeDir(root, r.District, r.ProviderID)
	r.Netns = netnsName(r.ProviderID)
	r.HostVeth = vethName(r.ProviderID)
	r.Bridge = bridgeName(root, r.District)
	r.Cgroups = nil
	for _, h := range hs {
		r.Cgroups = append(r.Cgroups, h.Mount+"/transit/"+r.ProviderID)
	}
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
// processes and the detached teardowns, waiting until ctx ends at most. The
// returned func releases it.
func lockRoot(ctx context.Context, root string) (func(), error) {
	if err := os.MkdirAll(root, 0o755); err != nil {
		return nil, err
	}
	return filelock.FlockContext(ctx, filepath.Join(root, "lock"), filelock.FlockOptions{Command: "transit (local provider)"})
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
// runs and has marker among its arguments, so a record cannot make transit
// take an unrelated process for a node's.
func alive(pid int, start uint64, marker string) bool {
	if pid <= 0 || start == 0 || procStart(pid) != start {
		return false
	}
	cmdline, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	return err == nil && strings.Contains(string(cmdline), marker)
}

// initAlive says whether the node's init runs: its arguments name the node's
// boot directory at every stage (boot.sh, nsenter/unshare init.sh, sshd).
func initAlive(r *nodeRecord) bool { return alive(r.InitPID, r.InitStart, r.NodeDir+"/boot/") }

// teardownAlive says whether the node's teardown runs.
func teardownAlive(r *nodeRecord) bool {
	return alive(r.TeardownPID, r.TeardownStart, teardownName(r.ProviderID))
}

// teardownName is the teardown's $0, which names it in ps and marks it.
func teardownName(id string) string { return "transit-teardown-" + id }

func (d *driver) readNode(id string) (*nodeRecord, error) {
	return readNode(d.root, d.district, id, d.hierarchies)
}

func (d *driver) readNodes() ([]*nodeRecord, error) {
	return readNodes(d.root, d.district, d.hierarchies)
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
