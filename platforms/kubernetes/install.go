package kubernetes

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"github.com/cloudtransit/transit/bundle"
	"github.com/cloudtransit/transit/districts"
)

// manifest reads and verifies the bundle at dir, once per driver.
func (d *driver) manifest(dir string) (*bundle.Manifest, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if m, ok := d.manifests[dir]; ok {
		return m, nil
	}
	m, err := bundle.Read(dir)
	if err != nil {
		return nil, err
	}
	if m.Kubernetes != Version {
		return nil, fmt.Errorf("%s: the bundle is of Kubernetes %s, transit installs %s: rebuild it with `make bundle`", dir, m.Kubernetes, Version)
	}
	if err := m.Verify(dir); err != nil {
		return nil, fmt.Errorf("%s: %w", dir, err)
	}
	d.manifests[dir] = m
	return m, nil
}

// bundleOf is node n's district's bundle directory and its verified
// manifest; dir is empty (and m nil) when the district has none.
func (d *driver) bundleOf(n districts.Node) (dir string, m *bundle.Manifest, err error) {
	dir = d.opts.Bundles[n.District]
	if dir == "" {
		return "", nil, nil
	}
	if m, err = d.manifest(dir); err != nil {
		return "", nil, fmt.Errorf("node %s: %w", n.ID, err)
	}
	return dir, m, nil
}

// nodePath is where a bundle file goes on a node.
func nodePath(p string) string {
	dir, name := path.Split(p)
	switch dir {
	case "bin/":
		return binDir + "/" + name
	case "cni/":
		return cniBinDir + "/" + name
	default:
		return imageDir + "/" + name
	}
}

// installBundle uploads the bundle's files n lacks (a file whose digest
// matches is not sent again), then configures and starts containerd and
// the kubelet and imports the images.
func (d *driver) installBundle(ctx context.Context, n districts.Node) error {
	dir, m, err := d.bundleOf(n)
	switch {
	case err != nil:
		return err
	case dir == "":
		return fmt.Errorf("node %s: district %s installs Kubernetes from a bundle, but no bundle directory is set", n.ID, n.District)
	}
	files, images := m.For(n.Role == districts.RoleMaster)
	if err := d.sendBundle(ctx, n, dir, m, withImages(files, images)); err != nil {
		return err
	}
	_, err = d.r.Run(ctx, n, "set up containerd and the kubelet", setupScript(imported(images)), nil)
	return err
}

func withImages(files []bundle.File, images []bundle.Image) []bundle.File {
	all := append([]bundle.File(nil), files...)
	for _, im := range images {
		all = append(all, im.File)
	}
	return all
}

// sendBundle puts on n the files of want it lacks: fetched from its
// district's seed where it can (share.go), else sent from this machine.
// A node that becomes the seed gets the whole bundle, so that it serves
// masters and workers alike.
func (d *driver) sendBundle(ctx context.Context, n districts.Node, dir string, m *bundle.Manifest, want []bundle.File) error {
	whole := withImages(m.For(true))
	if peersOff() {
		whole = want
	}
	lacks, err := d.lacking(ctx, n, whole)
	if err != nil {
		return err
	}
	missing := lacks(want)
	if len(missing) == 0 || peersOff() {
		return d.uploadAll(ctx, n, dir, missing)
	}
	seed, mine, err := d.seedFor(ctx, n)
	if err != nil {
		return err
	}
	if mine {
		err := d.uploadAll(ctx, n, dir, lacks(whole))
		d.seeded(n, err == nil)
		return err
	}
	if seed != nil {
		if addr := d.serving(ctx, seed, m); addr != "" {
			before := len(missing)
			missing = d.fetchFromSeed(ctx, n, *seed.node, addr, missing)
			d.opts.Logger.Info("bundle: fetched from the district's seed", "node", n.ID, "seed", seed.node.ID, "files", before-len(missing), "from_operator", len(missing))
		}
	}
	return d.uploadAll(ctx, n, dir, missing)
}

func (d *driver) uploadAll(ctx context.Context, n districts.Node, dir string, files []bundle.File) error {
	for _, f := range files {
		if err := d.upload(ctx, n, dir, f, nodePath(f.Path)); err != nil {
			return err
		}
	}
	return nil
}

// sendChanged uploads the files of the bundle in dir that n lacks: a file
// whose digest matches is not sent again.
func (d *driver) sendChanged(ctx context.Context, n districts.Node, dir string, files []bundle.File) error {
	lacks, err := d.lacking(ctx, n, files)
	if err != nil {
		return err
	}
	return d.uploadAll(ctx, n, dir, lacks(files))
}

// lacking probes n for the files probed and returns what n lacks of any
// of them: those whose digest on n is not the manifest's.
func (d *driver) lacking(ctx context.Context, n districts.Node, probed []bundle.File) (func([]bundle.File) []bundle.File, error) {
	dests := make([]string, len(probed))
	for i, f := range probed {
		dests[i] = nodePath(f.Path)
	}
	out, err := d.probe(ctx, n, dests...)
	if err != nil {
		return nil, err
	}
	have := parseSums(out)
	return func(files []bundle.File) []bundle.File {
		return slices.DeleteFunc(slices.Clone(files), func(f bundle.File) bool { return have[nodePath(f.Path)] == f.SHA256 })
	}, nil
}

// imported is what the import scripts need of a bundle's images.
func imported(images []bundle.Image) []bundleImage {
	var out []bundleImage
	for _, im := range images {
		out = append(out, bundleImage{file: path.Base(im.Path), ref: im.Ref, sha: im.SHA256})
	}
	return out
}

// sideload imports, on a node installed from packages, transit's own
// images (transit.local/…: its controllers', which no registry has) from
// the district's bundle, if it has one.
func (d *driver) sideload(ctx context.Context, n districts.Node) error {
	dir, m, err := d.bundleOf(n)
	if err != nil || dir == "" {
		return err
	}
	_, images := m.For(n.Role == districts.RoleMaster)
	var own []bundle.Image
	var files []bundle.File
	for _, im := range images {
		if strings.HasPrefix(im.Ref, bundle.OwnRegistry+"/") {
			own, files = append(own, im), append(files, im.File)
		}
	}
	if len(own) == 0 {
		return nil
	}
	if err := d.sendChanged(ctx, n, dir, files); err != nil {
		return err
	}
	_, err = d.r.Run(ctx, n, "import transit's images", importScript(imported(own)), nil)
	return err
}

func (d *driver) upload(ctx context.Context, n districts.Node, dir string, f bundle.File, dest string) error {
	src, err := os.Open(filepath.Join(dir, filepath.FromSlash(f.Path)))
	if err != nil {
		return err
	}
	defer func() { _ = src.Close() }()
	if err := d.r.Upload(ctx, n, dest, f.Mode, src, f.Size); err != nil {
		return fmt.Errorf("node %s: upload %s: %w", n.ID, f.Path, err)
	}
	return nil
}

// parseSums reads sha256sum's output: digest by path.
func parseSums(out string) map[string]string {
	sums := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		sum, p, ok := strings.Cut(sc.Text(), "  ")
		if ok && len(sum) == 64 {
			sums[p] = sum
		}
	}
	return sums
}

// packagesScript installs containerd from the distribution and kubeadm,
// the kubelet and kubectl from the Kubernetes package repository (pinned
// to Version), on a Debian or Ubuntu machine with systemd and internet
// access; kubeadm then pulls the images from their registries.
func packagesScript() string {
	minor := strings.Join(strings.Split(strings.TrimPrefix(Version, "v"), ".")[:2], ".")
	pkg := strings.TrimPrefix(Version, "v") + "-1.1"
	return `set -eu
export DEBIAN_FRONTEND=noninteractive
if ! command -v apt-get >/dev/null; then echo "install mode packages needs a Debian or Ubuntu machine (apt-get); use kubernetes_install bundle" >&2; exit 1; fi
if [ ! -d /run/systemd/system ]; then echo "install mode packages needs systemd; use kubernetes_install bundle" >&2; exit 1; fi
if ! dpkg -s kubeadm >/dev/null 2>&1 || [ "$(dpkg-query -W -f='${Version}' kubeadm)" != "` + pkg + `" ]; then
	apt-get update -q
	apt-get install -y -q containerd apt-transport-https ca-certificates curl gpg
	mkdir -p -m 755 /etc/apt/keyrings
	curl -fsSL https://pkgs.k8s.io/core:/stable:/v` + minor + `/deb/Release.key | gpg --batch --yes --dearmor -o /etc/apt/keyrings/kubernetes-apt-keyring.gpg
	echo 'deb [signed-by=/etc/apt/keyrings/kubernetes-apt-keyring.gpg] https://pkgs.k8s.io/core:/stable:/v` + minor + `/deb/ /' > /etc/apt/sources.list.d/kubernetes.list
	apt-get update -q
	apt-get install -y -q --allow-change-held-packages kubelet=` + pkg + ` kubeadm=` + pkg + ` kubectl=` + pkg + `
	apt-mark hold kubelet kubeadm kubectl >/dev/null
fi
modprobe overlay 2>/dev/null || true
modprobe br_netfilter 2>/dev/null || true
printf 'net.bridge.bridge-nf-call-iptables = 1\nnet.ipv4.ip_forward = 1\n' > /etc/sysctl.d/90-transit-kubernetes.conf
sysctl -q --system >/dev/null || true
mkdir -p /etc/containerd
capeff=$(awk '/^CapEff/ {print $2}' /proc/self/status)
if [ $(( 0x$capeff >> 24 & 1 )) = 1 ]; then restrict=false; else restrict=true; fi
printf '%s' '` + containerdConfig(true, false) + `' | sed "s/RESTRICT_OOM/$restrict/" > /etc/containerd/config.toml.transit
if ! cmp -s /etc/containerd/config.toml.transit /etc/containerd/config.toml; then
	mv /etc/containerd/config.toml.transit /etc/containerd/config.toml
	systemctl restart containerd
else
	rm -f /etc/containerd/config.toml.transit
fi
systemctl enable --now containerd kubelet >/dev/null 2>&1
`
}
