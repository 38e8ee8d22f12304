package kubernetes

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"io/fs"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/cloudtransit/transit/bundle"
	"github.com/cloudtransit/transit/districts"
)

// scriptRunner records the scripts run and the files uploaded; the probe
// reports the files uploaded so far (with their digests), as a node does.
type scriptRunner struct {
	mu       sync.Mutex
	scripts  []string // name: script
	uploaded map[string]string
	fail     string // the name of a script that fails
}

func (r *scriptRunner) Run(_ context.Context, _ districts.Node, name, script string, _ []byte) (string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.scripts = append(r.scripts, name+": "+script)
	if name == r.fail {
		return "", errors.New(name + " failed")
	}
	if name != "probe the node" {
		return "", nil
	}
	out := "systemd=yes\n"
	for p, sum := range r.uploaded {
		out += sum + "  " + p + "\n"
	}
	return out, nil
}

func (r *scriptRunner) Upload(_ context.Context, _ districts.Node, path string, _ fs.FileMode, content io.Reader, _ int64) error {
	data, err := io.ReadAll(content)
	if err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.uploaded == nil {
		r.uploaded = map[string]string{}
	}
	r.uploaded[path] = sha256hex(data)
	return nil
}

func (r *scriptRunner) DialContext(context.Context, districts.Node, string, string) (net.Conn, error) {
	return nil, errors.New("no network here")
}

func (r *scriptRunner) names() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, s := range r.scripts {
		name, _, _ := strings.Cut(s, ": ")
		out = append(out, name)
	}
	return out
}

// TestPackagesSideload: a node installed from packages imports transit's
// own images (transit.local/…, which no registry has) from its district's
// bundle, and only those; an unchanged image is not sent again; without a
// bundle nothing is sent; a failed package install stops before.
func TestPackagesSideload(t *testing.T) {
	dir := testBundle(t, append([]string{bundle.RelationsRepository + ":0123456789abcdef", "registry.k8s.io/pause:3.10", bundle.BusyboxImage}, streamsRefs[:4]...)...)
	n := districts.Node{ID: "k-worker-1", District: "cloud", Role: districts.RoleWorker}
	opts := Options{Install: map[string]string{"cloud": districts.InstallPackages}, Bundles: map[string]string{"cloud": dir}}
	r := &scriptRunner{}
	d := newDriver(districts.Cluster{ID: "k"}, opts, r)
	if err := d.Install(t.Context(), n); err != nil {
		t.Fatal(err)
	}
	want := []string{imageDir + "/0.tar", imageDir + "/2.tar", imageDir + "/3.tar", imageDir + "/4.tar", imageDir + "/5.tar", imageDir + "/6.tar"}
	var got []string
	for p := range r.uploaded {
		got = append(got, p)
	}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("uploaded %v, want transit's images only %v", got, want)
	}
	if names := r.names(); !slices.Equal(names, []string{"install kubernetes packages", "probe the node", "import transit's images"}) {
		t.Errorf("ran %v", names)
	}
	imp := r.scripts[len(r.scripts)-1]
	if !strings.Contains(imp, "ctr -n k8s.io images import --no-unpack "+imageDir+"/0.tar") || strings.Contains(imp, "1.tar") {
		t.Errorf("the import script:\n%s", imp)
	}

	// Again (a run killed after the install): nothing is sent twice.
	before := len(r.uploaded)
	r.uploaded[imageDir+"/0.tar"] = "changed-on-the-node"
	if err := d.Install(t.Context(), n); err != nil {
		t.Fatal(err)
	}
	if len(r.uploaded) != before || r.uploaded[imageDir+"/0.tar"] == "changed-on-the-node" {
		t.Errorf("after a second install: %v (only the changed file is sent again)", r.uploaded)
	}

	// No bundle: the packages only.
	plain := &scriptRunner{}
	opts.Bundles = nil
	if err := newDriver(districts.Cluster{ID: "k"}, opts, plain).Install(t.Context(), n); err != nil {
		t.Fatal(err)
	}
	if names := plain.names(); !slices.Equal(names, []string{"install kubernetes packages"}) || len(plain.uploaded) != 0 {
		t.Errorf("without a bundle: ran %v, uploaded %v", names, plain.uploaded)
	}

	// The packages fail: nothing is imported into a half-installed node.
	failing := &scriptRunner{fail: "install kubernetes packages"}
	opts.Bundles = map[string]string{"cloud": dir}
	if err := newDriver(districts.Cluster{ID: "k"}, opts, failing).Install(t.Context(), n); err == nil || len(failing.uploaded) != 0 {
		t.Errorf("a failed package install: %v, uploaded %v", err, failing.uploaded)
	}
}

func sha256hex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}
