package kubernetes

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/cloudtransit/transit/bundle"
	"github.com/cloudtransit/transit/districts"
	"github.com/cloudtransit/transit/provider"
	"github.com/cloudtransit/transit/shellquote"
)

// The node side of the mesh is transit-mesh from the bundle (userspace
// WireGuard on a TUN device), run as a systemd unit or, on a node without
// systemd, under transit-supervise. Its key pair is made on the node and
// stays in meshDir; only the public key is printed.
const (
	meshDir       = "/var/lib/transit/mesh"
	meshInterface = "transit0"
	meshBinary    = "bin/transit-mesh"
)

var _ provider.Mesher = (*driver)(nil)

// MeshUp starts n's end of the mesh (the binary sent first when the
// node lacks it) and returns the key and address the node runs with.
func (d *driver) MeshUp(ctx context.Context, n districts.Node, spec provider.MeshSpec) (provider.MeshEnd, error) {
	if spec.Address != "" {
		if err := d.sendMeshBinary(ctx, n); err != nil {
			return provider.MeshEnd{}, err
		}
	}
	out, err := d.r.Run(ctx, n, "start the mesh", meshUpScript(spec), nil)
	if err != nil {
		return provider.MeshEnd{}, err
	}
	return parseMeshEnd(n, out)
}

// parseMeshEnd reads meshUpScript's answer: "key=… address=…" lines, or
// "none" from a node asked only.
func parseMeshEnd(n districts.Node, out string) (provider.MeshEnd, error) {
	var end provider.MeshEnd
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		k, v, _ := strings.Cut(strings.TrimSpace(line), "=")
		switch k {
		case "key":
			end.PublicKey = v
		case "address":
			end.Address, _, _ = strings.Cut(v, "/")
		case "none":
			return provider.MeshEnd{}, nil
		}
	}
	if end.PublicKey == "" || end.Address == "" {
		return end, fmt.Errorf("node %s: the mesh did not say its key and address (it printed %q)", n.ID, strings.TrimSpace(out))
	}
	return end, nil
}

// sendMeshBinary puts transit-mesh on n from its district's bundle (a
// node installed from the bundle has it already; one installed from
// packages gets only this file).
func (d *driver) sendMeshBinary(ctx context.Context, n districts.Node) error {
	dir, m, err := d.bundleOf(n)
	switch {
	case err != nil:
		return err
	case dir == "":
		return fmt.Errorf("node %s: the mesh runs transit-mesh from transit's bundle, and district %s has no bundle directory: set one (see the README's bundle section)", n.ID, n.District)
	}
	for _, f := range m.Files {
		if f.Path == meshBinary {
			return d.sendChanged(ctx, n, dir, []bundle.File{f})
		}
	}
	return fmt.Errorf("node %s: the bundle in %s has no %s: rebuild it with `make bundle`", n.ID, dir, meshBinary)
}

// onMesh says the cluster runs on the mesh: its nodes, as last given to
// Members, have mesh addresses.
func (d *driver) onMesh() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, n := range append(slices.Clone(d.nodes), d.masters...) {
		if n.MeshIP != "" {
			return true
		}
	}
	return false
}

// MeshPeers replaces n's peers; the device reads them at once.
func (d *driver) MeshPeers(ctx context.Context, n districts.Node, peers []provider.MeshPeer) error {
	if peers == nil {
		peers = []provider.MeshPeer{}
	}
	data, err := json.Marshal(peers)
	if err != nil {
		return err
	}
	_, err = d.r.Run(ctx, n, "give the mesh its peers", meshPeersScript, data)
	return err
}

// meshPeersScript writes the peers on stdin (transit-mesh checks them
// first) and wakes the device.
const meshPeersScript = `set -eu
` + shPath + `
transit-mesh peers -dir ` + meshDir + `
pkill -HUP -x transit-mesh 2>/dev/null || true
`

// meshUpScript starts the node's end of the mesh at spec's address,
// unless the node has one already (kept in meshDir/address): that one
// stays. With no address in spec it only reports ("none" when the node
// has no mesh). It waits until the interface holds the address.
func meshUpScript(spec provider.MeshSpec) string {
	port := strconv.Itoa(spec.Port)
	run := func(addr string) string {
		return binDir + "/transit-mesh up -dir " + meshDir + " -interface " + meshInterface + " -address " + addr + " -port " + port
	}
	return `set -eu
` + shPath + `
want=` + shellquote.Quote(spec.Address) + `
if [ -f ` + meshDir + `/address ]; then
	addr=$(cat ` + meshDir + `/address)
elif [ -z "$want" ]; then
	echo none
	exit 0
else
	mkdir -p -m 700 ` + meshDir + ` ` + logDir + ` /run/transit
	printf '%s\n' "$want" > ` + meshDir + `/address.new
	mv ` + meshDir + `/address.new ` + meshDir + `/address
	addr=$want
fi
key=$(transit-mesh key -dir ` + meshDir + `)
if [ -d /run/systemd/system ]; then
	unit=$(printf '%s' ` + shellquote.Quote(unit("WireGuard mesh", run("ADDR"))) + ` | sed "s|ADDR|$addr|")
	if [ "$(cat /etc/systemd/system/transit-mesh.service 2>/dev/null)" != "$unit" ]; then
		printf '%s' "$unit" > /etc/systemd/system/transit-mesh.service
		systemctl daemon-reload
	fi
	systemctl enable transit-mesh >/dev/null 2>&1
	systemctl start transit-mesh
else
	pid=$(cat /run/transit/transit-mesh.pid 2>/dev/null || true)
	if [ -z "$pid" ] || ! kill -0 "$pid" 2>/dev/null; then
		setsid ` + binDir + `/transit-supervise transit-mesh ` + run(`"$addr"`) + ` </dev/null >/dev/null 2>&1 &
		echo $! > /run/transit/transit-mesh.pid
	fi
fi
i=0
until ip -o addr show dev ` + meshInterface + ` 2>/dev/null | grep -q " ${addr%/*}/"; do
	i=$((i+1))
	if [ $i -gt 100 ]; then
		echo "the mesh did not come up at $addr (see ` + logDir + `/transit-mesh.log or journalctl -u transit-mesh):" >&2
		tail -n 5 ` + logDir + `/transit-mesh.log >&2 2>/dev/null || true
		exit 1
	fi
	sleep 0.1
done
echo "key=$key"
echo "address=$addr"
`
}
