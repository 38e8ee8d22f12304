package kubernetes

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cloudtransit/transit/bundle"
	"github.com/cloudtransit/transit/bundle/share"
	"github.com/cloudtransit/transit/districts"
)

// sharedBundle writes a bundle of two files for all, an image for all and
// one for masters only, and returns its directory and manifest.
func sharedBundle(t *testing.T) (string, *bundle.Manifest) {
	t.Helper()
	dir := t.TempDir()
	m := bundle.Manifest{Kubernetes: Version}
	add := func(p string, size int, forWhom string) bundle.File {
		content := []byte(strings.Repeat(p, size))
		if err := os.MkdirAll(filepath.Join(dir, filepath.Dir(p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, p), content, 0o644); err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(content)
		return bundle.File{Path: p, SHA256: hex.EncodeToString(sum[:]), Size: int64(len(content)), Mode: 0o755, For: forWhom}
	}
	m.Files = []bundle.File{add("bin/kubelet", 1000, bundle.ForAll), add("bin/transit-mesh", 300, bundle.ForAll)}
	m.Images = []bundle.Image{
		{Ref: "registry.k8s.io/pause:3.10", File: add("images/pause.tar", 200, bundle.ForAll)},
		{Ref: "registry.k8s.io/kube-apiserver:" + Version, File: add("images/kube-apiserver.tar", 2000, bundle.ForMasters)},
	}
	data, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, bundle.ManifestFile), data, 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := bundle.Read(dir)
	if err != nil {
		t.Fatal(err)
	}
	return dir, got
}

// districtRunner plays a district's nodes: each has its own files (digest
// by path); a seed's server serves what it has, a fetch copies from it
// what matches. Uploads count their bytes by node.
type districtRunner struct {
	mu       sync.Mutex
	files    map[string]map[string]string // node: path: digest
	sent     map[string]int64             // node: bytes uploaded
	serves   map[string]int               // seed node: servers started
	fetches  []string                     // "node from seed"
	failServ bool                         // the seed's server does not start
	failUp   string                       // a node whose uploads fail
	failSeed bool                         // so does the first node uploading
	slowUp   time.Duration                // each upload takes that long
}

func newDistrictRunner() *districtRunner {
	return &districtRunner{files: map[string]map[string]string{}, sent: map[string]int64{}, serves: map[string]int{}}
}

func (r *districtRunner) Run(_ context.Context, n districts.Node, name, _ string, stdin []byte) (string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case name == "probe the node":
		out := "systemd=yes\n"
		for p, sum := range r.files[n.ID] {
			out += sum + "  " + p + "\n"
		}
		return out, nil
	case name == "serve the bundle to the district":
		if r.failServ {
			return "", errors.New("transit-mesh share did not start")
		}
		r.serves[n.ID]++
		return "listening " + shareAddress(n) + ":4711\n", nil
	case strings.HasPrefix(name, "fetch the bundle from "):
		lines := strings.Split(strings.TrimSpace(string(stdin)), "\n")
		host, _, _ := strings.Cut(lines[0], " ")
		var seed string
		for id := range r.files {
			if strings.HasPrefix(id, "n") && "10.0.0."+strings.TrimPrefix(id, "n") == host {
				seed = id
			}
		}
		r.fetches = append(r.fetches, n.ID+" from "+seed)
		var out strings.Builder
		for _, l := range lines[1:] {
			f := strings.Fields(l)
			if r.files[seed][f[0]] == f[1] {
				r.put(n.ID, f[0], f[1])
				fmt.Fprintf(&out, "fetched %s\n", f[0])
			}
		}
		return out.String(), nil
	}
	return "", nil
}

func (r *districtRunner) put(node, path, sum string) {
	if r.files[node] == nil {
		r.files[node] = map[string]string{}
	}
	r.files[node][path] = sum
}

func (r *districtRunner) Upload(_ context.Context, n districts.Node, path string, _ fs.FileMode, content io.Reader, _ int64) error {
	data, err := io.ReadAll(content)
	if err != nil {
		return err
	}
	time.Sleep(r.slowUp)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.failSeed && r.failUp == "" {
		r.failUp = n.ID
	}
	if n.ID == r.failUp {
		return errors.New("connection lost")
	}
	r.put(n.ID, path, sha256hex(data))
	r.sent[n.ID] += int64(len(data))
	return nil
}

// total is the bytes the operator sent, to every node.
func (r *districtRunner) total() (n int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, b := range r.sent {
		n += b
	}
	return n
}

func (r *districtRunner) DialContext(context.Context, districts.Node, string, string) (net.Conn, error) {
	return nil, errors.New("no network here")
}

func shareNode(i int, district, role string) districts.Node {
	return districts.Node{ID: fmt.Sprintf("n%d", i), District: district, Role: role, ProviderID: fmt.Sprintf("i-%d", i),
		PublicIP: fmt.Sprintf("192.0.2.%d", i), PrivateIP: fmt.Sprintf("10.0.0.%d", i)}
}

// installAll sends each node its role's files at once, as a run's
// installs do.
func installAll(t *testing.T, d *driver, dir string, m *bundle.Manifest, nodes []districts.Node) []error {
	t.Helper()
	errs := make([]error, len(nodes))
	var wg sync.WaitGroup
	for i, n := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = d.sendBundle(t.Context(), n, dir, m, withImages(m.For(n.Role == districts.RoleMaster)))
		}()
	}
	wg.Wait()
	return errs
}

func bundleSize(files []bundle.File) (n int64) {
	for _, f := range files {
		n += f.Size
	}
	return n
}

// TestDistrictGetsTheBundleOnce: of a district's nodes installing at
// once, one (the seed) gets the whole bundle from the operator and the
// others fetch their files from it: the operator sends one bundle per
// district, and every node ends with exactly its role's files.
func TestDistrictGetsTheBundleOnce(t *testing.T) {
	dir, m := sharedBundle(t)
	whole := bundleSize(withImages(m.For(true)))
	r := newDistrictRunner()
	r.slowUp = 5 * time.Millisecond // the others wait for the seed
	d := newDriver(districts.Cluster{ID: "k"}, Options{}, r)
	nodes := []districts.Node{shareNode(1, "aws", "master"), shareNode(2, "aws", "worker"), shareNode(3, "aws", "worker"),
		shareNode(4, "aws", "master"), shareNode(5, "gce", "worker")}
	for i, err := range installAll(t, d, dir, m, nodes) {
		if err != nil {
			t.Fatalf("%s: %v", nodes[i].ID, err)
		}
	}
	var seeds []string
	for id, n := range r.sent {
		if n > 0 {
			seeds = append(seeds, id)
		}
		if n != 0 && n != whole {
			t.Errorf("the operator sent %s %d bytes, want none or the whole bundle's %d", id, n, whole)
		}
	}
	slices.Sort(seeds)
	if len(seeds) != 2 || seeds[1] != "n5" {
		t.Errorf("nodes sent files by the operator: %v, want one of aws and gce's n5", seeds)
	}
	if got := r.total(); got != 2*whole {
		t.Errorf("the operator sent %d bytes in all, want two districts' bundles (%d)", got, 2*whole)
	}
	for _, n := range nodes {
		for _, f := range withImages(m.For(n.Role == districts.RoleMaster)) {
			if r.files[n.ID][nodePath(f.Path)] != f.SHA256 {
				t.Errorf("%s lacks %s", n.ID, f.Path)
			}
		}
	}
	if len(r.fetches) != 3 || len(r.serves) != 1 {
		t.Errorf("fetches %v from %d server(s), want 3 from one (aws's seed)", r.fetches, len(r.serves))
	}
}

// TestSeedFailuresFallBackToTheOperator: a seed whose upload fails hands
// the turn to another node; a seed that cannot serve, a node joined
// before that lacks a master's files, and TRANSIT_BUNDLE_PEERS=off all end
// with the operator sending what the node still lacks — never with a node
// missing a file.
func TestSeedFailuresFallBackToTheOperator(t *testing.T) {
	dir, m := sharedBundle(t)
	whole := bundleSize(withImages(m.For(true)))
	check := func(t *testing.T, r *districtRunner, nodes []districts.Node) {
		t.Helper()
		for _, n := range nodes {
			if n.ID == r.failUp {
				continue
			}
			for _, f := range withImages(m.For(n.Role == districts.RoleMaster)) {
				if r.files[n.ID][nodePath(f.Path)] != f.SHA256 {
					t.Errorf("%s lacks %s", n.ID, f.Path)
				}
			}
		}
	}
	nodes := []districts.Node{shareNode(1, "aws", "worker"), shareNode(2, "aws", "worker"), shareNode(3, "aws", "master")}

	t.Run("seed upload fails", func(t *testing.T) {
		r := newDistrictRunner()
		r.failSeed, r.slowUp = true, 5*time.Millisecond
		d := newDriver(districts.Cluster{ID: "k"}, Options{}, r)
		errs := installAll(t, d, dir, m, nodes)
		for i, err := range errs {
			if (err != nil) != (nodes[i].ID == r.failUp) {
				t.Errorf("%s: %v (the failed seed: %s)", nodes[i].ID, err, r.failUp)
			}
		}
		check(t, r, nodes)
		if got := r.total(); got != whole {
			t.Errorf("the operator sent %d bytes, want one bundle (%d) to the node that took the failed seed's turn", got, whole)
		}
	})
	t.Run("seed does not serve", func(t *testing.T) {
		r := newDistrictRunner()
		r.failServ = true
		d := newDriver(districts.Cluster{ID: "k"}, Options{}, r)
		for i, err := range installAll(t, d, dir, m, nodes) {
			if err != nil {
				t.Errorf("%s: %v", nodes[i].ID, err)
			}
		}
		check(t, r, nodes)
		if len(r.fetches) != 0 {
			t.Errorf("fetched %v from a seed that does not serve", r.fetches)
		}
	})
	t.Run("a worker joined before seeds a master", func(t *testing.T) {
		r := newDistrictRunner()
		old := shareNode(9, "aws", "worker")
		old.Phase = districts.PhaseJoined
		for _, f := range withImages(m.For(false)) {
			r.put("n9", nodePath(f.Path), f.SHA256)
		}
		d := newDriver(districts.Cluster{ID: "k"}, Options{}, r)
		d.nodes = []districts.Node{old}
		master := shareNode(3, "aws", "master")
		if err := installAll(t, d, dir, m, []districts.Node{master})[0]; err != nil {
			t.Fatal(err)
		}
		check(t, r, []districts.Node{master})
		masterOnly := whole - bundleSize(withImages(m.For(false)))
		if got := r.total(); got != masterOnly {
			t.Errorf("the operator sent %d bytes, want only the master's own files (%d)", got, masterOnly)
		}
	})
	t.Run("off", func(t *testing.T) {
		t.Setenv("TRANSIT_BUNDLE_PEERS", "off")
		r := newDistrictRunner()
		d := newDriver(districts.Cluster{ID: "k"}, Options{}, r)
		installAll(t, d, dir, m, nodes)
		check(t, r, nodes)
		var want int64
		for _, n := range nodes {
			want += bundleSize(withImages(m.For(n.Role == districts.RoleMaster)))
		}
		if got := r.total(); got != want || len(r.fetches) != 0 {
			t.Errorf("off: the operator sent %d bytes (want every node's files, %d), fetches %v", got, want, r.fetches)
		}
	})
}

// TestFetchScript runs the fetch on this machine's bash against a real
// server: files the seed has arrive with their modes; bytes that are not
// the manifest's are never installed; a file the seed lacks is skipped;
// two bad files end the fetch; a seed that does not answer ends it at once.
func TestFetchScript(t *testing.T) {
	if _, err := exec.LookPath("bash"); err != nil {
		t.Fatal("bash is needed: the nodes fetch with it")
	}
	seedDir, nodeDir := t.TempDir(), t.TempDir()
	content := map[string]string{"kubelet": "the kubelet", "pause.tar": "the pause image", "tampered": "not what the manifest says", "late": "after the bad ones"}
	var offered []string
	for name, c := range content {
		p := filepath.Join(seedDir, name)
		if err := os.WriteFile(p, []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
		offered = append(offered, p)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	token := newShareToken()
	go func() {
		_ = share.Serve(ctx, l, share.Options{Token: token, Files: append(offered, filepath.Join(seedDir, "absent")), Idle: time.Minute, Max: time.Minute})
	}()
	host, port, _ := net.SplitHostPort(l.Addr().String())

	path := os.Getenv("PATH")
	// The node asks for the seed's path; it lands at the same path under
	// nodeDir here (the nodes' paths are equal, this machine is one).
	fetch := func(host, port string, lines ...string) (string, time.Duration) {
		for _, part := range []string{`mkdir -p "$(dirname "$dest")"`, `"$token" "$dest"`} {
			if !strings.Contains(fetchBash, part) {
				t.Fatalf("the fetch script no longer has %s, which the test rewrites", part)
			}
		}
		script := strings.ReplaceAll(fetchBash, `mkdir -p "$(dirname "$dest")"`, `src=$dest; dest=`+nodeDir+`/$(basename "$dest"); mkdir -p "$(dirname "$dest")"`)
		script = strings.ReplaceAll(script, `"$token" "$dest"`, `"$token" "$src"`)
		cmd := exec.Command("bash", "-c", script)
		cmd.Env = append(os.Environ(), "PATH="+path)
		cmd.Stdin = strings.NewReader(host + " " + port + " " + token + "\n" + strings.Join(lines, "\n") + "\n")
		began := time.Now()
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("fetch: %v: %s", err, out)
		}
		return string(out), time.Since(began)
	}
	sum := func(s string) string { h := sha256.Sum256([]byte(s)); return hex.EncodeToString(h[:]) }
	line := func(name, digest string) string {
		return filepath.Join(seedDir, name) + " " + digest + " 755"
	}
	out, _ := fetch(host, port,
		line("kubelet", sum("the kubelet")),
		line("absent", sum("anything")),
		line("pause.tar", sum("the pause image")))
	for _, name := range []string{"kubelet", "pause.tar"} {
		st, err := os.Stat(filepath.Join(nodeDir, name))
		if err != nil || st.Mode().Perm() != 0o755 || !strings.Contains(out, "fetched ") {
			t.Errorf("%s: %v (mode %v), output %q", name, err, st, out)
		}
	}
	if _, err := os.Stat(filepath.Join(nodeDir, "absent")); err == nil {
		t.Error("a file the seed lacks was installed")
	}

	out, _ = fetch(host, port,
		line("tampered", sum("what the manifest says")),
		line("kubelet", sum("other bytes")),
		line("late", sum("after the bad ones")))
	if _, err := os.Stat(filepath.Join(nodeDir, "tampered")); err == nil {
		t.Error("bytes that are not the manifest's were installed")
	}
	if strings.Contains(out, "fetched") {
		t.Errorf("after two bad files the fetch went on: %q", out)
	}
	entries, _ := os.ReadDir(nodeDir)
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".transit-part") {
			t.Errorf("left behind %s", e.Name())
		}
	}

	// A transit-mesh on the node checks the files; one that cannot (an
	// older one: "unknown command") leaves it to sha256sum; a digest
	// that is not the manifest's keeps the file out either way.
	bin := t.TempDir()
	calls := filepath.Join(bin, "calls")
	mesh := func(body string) {
		t.Helper()
		script := "#!/bin/sh\necho \"$*\" >> " + calls + "\n" + body + "\n"
		if err := os.WriteFile(filepath.Join(bin, "transit-mesh"), []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
		_ = os.Remove(calls)
	}
	path = bin + ":" + os.Getenv("PATH")
	for _, c := range []struct {
		name, body string
		installed  bool
	}{
		{"hashes", `[ "$1" = sha256 ] && exec sha256sum "$2"`, true},
		{"older", `echo "transit-mesh: unknown command \"$1\"" >&2; exit 1`, true},
		{"lies", `echo "0000000000000000000000000000000000000000000000000000000000000000  $2"`, false},
	} {
		_ = os.Remove(filepath.Join(nodeDir, "late"))
		mesh(c.body)
		out, _ := fetch(host, port, line("late", sum("after the bad ones")))
		_, err := os.Stat(filepath.Join(nodeDir, "late"))
		if installed := err == nil; installed != c.installed {
			t.Errorf("transit-mesh that %s: installed %t, want %t (output %q)", c.name, installed, c.installed, out)
		}
		if got, _ := os.ReadFile(calls); !strings.HasPrefix(string(got), "sha256 ") {
			t.Errorf("transit-mesh that %s: the fetch did not ask it (calls %q)", c.name, got)
		}
	}
	path = os.Getenv("PATH")

	dead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	_, deadPort, _ := net.SplitHostPort(dead.Addr().String())
	_ = dead.Close()
	if out, took := fetch("127.0.0.1", deadPort, line("late", sum("after the bad ones"))); strings.Contains(out, "fetched") || !strings.Contains(out, "does not answer") || took > 30*time.Second {
		t.Errorf("a seed that does not answer: %q after %s", out, took)
	}
}

// TestMeshFirst: the fetch gets transit-mesh before the files it checks
// with it, the others in their order.
func TestMeshFirst(t *testing.T) {
	files := []bundle.File{{Path: "bin/kubelet"}, {Path: "images/pause.tar"}, {Path: meshBinary}, {Path: "bin/kubeadm"}}
	var got []string
	for _, f := range meshFirst(files) {
		got = append(got, f.Path)
	}
	if want := []string{meshBinary, "bin/kubelet", "images/pause.tar", "bin/kubeadm"}; !slices.Equal(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
	if files[0].Path != "bin/kubelet" {
		t.Error("meshFirst changed its argument")
	}
}
