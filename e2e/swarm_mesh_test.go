package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	sdk "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/cloudtransit/transit/cloudsim"
	"github.com/cloudtransit/transit/cloudsim/localnodes"
	"github.com/cloudtransit/transit/districts"
	"github.com/cloudtransit/transit/mesh"
	"github.com/cloudtransit/transit/platforms/meshnode"
	"github.com/cloudtransit/transit/provider"
)

// testCloudSwarmOnTheMesh is a Swarm across emulated clouds whose
// networks are apart (AWS's two regions on one private subnet, GCE), on
// the node mesh: Swarm runs on the mesh addresses, and between clouds
// only WireGuard travels, the overlay networks' VXLAN inside it.
func testCloudSwarmOnTheMesh(t *testing.T, env *clouds) {
	tags := func(cloud string) map[string]string { return map[string]string{"cloud": cloud} }
	cfg := districts.Cluster{
		Type: "cluster", ID: "e2e-mesh", Platform: "swarm",
		Flavors: []districts.Flavor{{Flavor: "small", Cores: 1, MemoryGB: 1, DiskGB: 10}},
		Deployments: []districts.Deployment{
			{District: "aws-eu", Flavor: "small", Role: districts.RoleMaster, Quantity: 1, Tags: tags("aws-eu")},
			{District: "aws-us", Flavor: "small", Role: districts.RoleWorker, Quantity: 1, Tags: tags("aws-us")},
			{District: "gce-eu", Flavor: "small", Role: districts.RoleWorker, Quantity: 1, Tags: tags("gce-eu")},
			{District: "os-eu", Flavor: "small", Role: districts.RoleWorker, Quantity: 0, Tags: tags("os-eu")},
		},
		NetworkSettings: &districts.Network{Mesh: districts.MeshWireGuard},
		Strategy:        districts.Strategy{MaxSurge: districts.Int(1), MaxUnavailable: districts.Int(1), DrainTimeout: districts.Duration(30 * time.Second)},
	}
	// aws-us-b is a second district of AWS us-east-1's one identity (the
	// same account, region and VPC), in another zone: it lists aws-us's
	// machines too.
	ds := append(env.districts(), districts.District{Type: "district", ID: "aws-us-b", Provider: districts.ProviderAWS, CredentialID: "aws-e2e",
		AWSRegion: "us-east-1", AWSZones: []string{"us-east-1b"}, AWSEndpoint: env.emu.AWSURL,
		Flavors: []districts.DistrictFlavor{{Flavor: "small", InstanceType: "t3.small"}}})
	c := newCluster(t, cloudsRoot, cfg, ds)
	env.writeCredentials(c)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the emulated clouds' backing, for the failure above:\n%s", backingReport())
		}
	})
	c.runSteps(t, []lifecycleStep{
		{"a manager in AWS eu-central-1, workers in AWS us-east-1 (same subnet) and GCE, joined at their mesh addresses", func(t *testing.T, c *cluster) {
			start := time.Now()
			env.checkSwarm(t, c, 3)
			t.Logf("apply from nothing converged in %s", time.Since(start).Round(time.Second))
			c.checkSwarmOnMesh(t)
		}},
		{"containers on an overlay network in two clouds reach each other, only WireGuard between the clouds", testMeshOverlay},
		{"the AWS us-east-1 worker's mesh key rotates while a GCE container keeps fetching from it", testRotateUnderTraffic},
		{"the AWS us-east-1 worker's district tag removed behind transit's back, a sibling district of its identity listing it: every member kept", func(t *testing.T, c *cluster) {
			testTagRemovedWithSibling(t, c, env)
		}},
		{"the GCE worker's zone unreachable during an apply: the listing is not believed, nothing removed", func(t *testing.T, c *cluster) {
			testZoneUnreachable(t, c, env)
		}},
		{"a worker leaves: drained, removed, the others' peers without it", func(t *testing.T, c *cluster) {
			c.setQuantity("gce-eu", districts.RoleWorker, 0)
			env.checkSwarm(t, c, 2)
			c.checkSwarmOnMesh(t)
		}},
		{"an OpenStack worker stopped while the AWS us-east-1 worker is replaced, started again at its floating IP: it takes the current peers", func(t *testing.T, c *cluster) {
			testRestartedTakesPeers(t, c, env)
		}},
	})
}

// checkSwarmOnMesh: every node has a mesh address and key, and the swarm
// knows each node at its mesh address: a worker's Status.Addr, a
// manager's Raft address.
func (c *cluster) checkSwarmOnMesh(t *testing.T) {
	t.Helper()
	res := c.status()
	meshRange := netip.MustParsePrefix(districts.DefaultMeshCIDR)
	for _, n := range res.Nodes {
		if a, err := netip.ParseAddr(n.MeshIP); err != nil || !meshRange.Contains(a) || n.MeshKey == "" {
			t.Errorf("node %s: mesh address %q key %q, want one of %s and a key", n.ID, n.MeshIP, n.MeshKey, meshRange)
		}
	}
	out := c.mustOn(c.manager(res), `docker node ls -q | xargs docker node inspect --format '{{index .Spec.Labels "transit-node"}} {{.Status.Addr}} {{if .ManagerStatus}}{{.ManagerStatus.Addr}}{{end}}'`)
	got := map[string][]string{} // node id → Status.Addr [, Raft address]
	for line := range strings.Lines(out) {
		if f := strings.Fields(line); len(f) >= 2 {
			got[f[0]] = f[1:]
		}
	}
	for _, n := range res.Nodes {
		want := []string{n.MeshIP}
		if n.Role == districts.RoleMaster {
			want = append(want, n.MeshIP+":2377")
		}
		if !slices.Equal(got[n.ID], want) {
			t.Errorf("docker node inspect: node %s at %v, want %v (all: %v)", n.ID, got[n.ID], want, got)
		}
	}
	for _, n := range res.Nodes {
		if addr := strings.TrimSpace(c.mustOn(n, `docker info --format '{{.Swarm.NodeAddr}}'`)); addr != n.MeshIP {
			t.Errorf("node %s advertises %q, want its mesh address %s", n.ID, addr, n.MeshIP)
		}
		// Without its device the mesh's range is unreachable, never the
		// default route's.
		if routes := c.mustOn(n, "ip -4 route show "+meshRange.String()); !strings.Contains(routes, "unreachable "+meshRange.String()+" metric "+strconv.Itoa(mesh.FailClosedMetric)) {
			t.Errorf("node %s has no unreachable route for the mesh's range %s, so without its device mesh traffic leaves by the default route:\n%s", n.ID, meshRange, routes)
		}
		// Its peers are exactly the other nodes, at their mesh addresses.
		var peers []provider.MeshPeer
		if err := json.Unmarshal([]byte(c.mustOn(n, "cat "+meshnode.Dir+"/"+mesh.PeersFile)), &peers); err != nil {
			t.Fatalf("node %s's peers: %v", n.ID, err)
		}
		var got, want []string
		for _, p := range peers {
			got = append(got, p.Node+" "+p.Address)
		}
		for _, o := range res.Nodes {
			if o.ID != n.ID {
				want = append(want, o.ID+" "+o.MeshIP)
			}
		}
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Errorf("node %s's mesh peers are %v, want %v", n.ID, got, want)
		}
	}
}

// testMeshOverlay: a container on an attachable overlay network on the
// worker in AWS us-east-1 serves HTTP; a container on the GCE worker
// fetches from it at its overlay address (no service VIP: that needs
// IPVS) 20 times and a 1 MiB file, while a capture on the us-east-1
// region's uplink sees only WireGuard and SSH (ICMP aside): no VXLAN, no
// gossip, no HTTP outside the mesh.
func testMeshOverlay(t *testing.T, c *cluster) {
	res := c.status()
	var server, client districts.Node
	for _, n := range res.Nodes {
		switch n.District {
		case "aws-us":
			server = n
		case "gce-eu":
			client = n
		}
	}
	c.mustOn(c.manager(res), `docker network create --driver overlay --attachable e2e-mesh >/dev/null`)
	ip := strings.TrimSpace(c.mustOn(server, `set -e
docker run -d --name e2e-web --network e2e-mesh `+image+` sh -c 'busybox mkdir -p /www && echo "hello from $(hostname)" > /www/index.html && busybox dd if=/dev/zero of=/www/big bs=1024 count=1024 2>/dev/null && exec busybox httpd -f -p 8080 -h /www' >/dev/null
docker inspect --format '{{(index .NetworkSettings.Networks "e2e-mesh").IPAddress}}' e2e-web`))
	if _, err := netip.ParseAddr(ip); err != nil {
		t.Fatalf("the server's overlay address: %q", ip)
	}
	// busybox's wget needs what a bare image lacks: nc speaks HTTP.
	get := func(path string) string {
		return `printf 'GET ` + path + ` HTTP/1.0\r\n\r\n' | busybox nc ` + ip + ` 8080`
	}
	// The client's node learns the server's endpoint by gossip: the
	// first fetch may come a moment early.
	eventually(t, time.Minute, "the first fetch across clouds", func(ctx context.Context) error {
		out, err := c.on(ctx, client, `docker run --rm --network e2e-mesh `+image+` sh -c "`+get("/")+`"`)
		if err != nil || !strings.Contains(out, "hello from") {
			return fmt.Errorf("%q, %w", out, err)
		}
		return nil
	})
	stop := capture(t, localnodes.Uplink(cloudRoot, "aws:us-east-1"))
	out := c.mustOn(client, `docker run --rm --network e2e-mesh `+image+` sh -c "for i in \$(busybox seq 20); do `+get("/")+` || exit 1; done; `+get("/big")+` | busybox wc -c"`)
	waitQuiet()
	seen := stop()
	big := 0
	if f := strings.Fields(out); len(f) > 0 {
		big, _ = strconv.Atoi(f[len(f)-1])
	}
	if n := strings.Count(out, "hello from"); n != 20 || big < 1<<20 || big > 1<<20+1024 {
		t.Fatalf("20 fetches and 1 MiB (with headers) across clouds answered %d greetings and %d bytes:\n%s", n, big, out)
	}
	t.Logf("across the uplink of aws:us-east-1 during the fetches: %v", seen.count)
	if n := seen.count[flow{"udp", districts.DefaultMeshPort}]; n < 100 {
		t.Errorf("%d WireGuard packets for 20 fetches and 1 MiB across clouds: the traffic took another way", n)
	}
	for _, msg := range seen.outsideMesh(districts.DefaultMeshPort, c.status().Nodes) {
		t.Error(msg)
	}
}

// testRotateUnderTraffic: a container on the GCE worker fetches from the
// web container testMeshOverlay left on the AWS us-east-1 worker, again
// and again, while transit mesh rotate gives that worker a new key: no
// fetch fails, the state records the key the node runs, and every other
// node's peers hold the new key and not the old.
func testRotateUnderTraffic(t *testing.T, c *cluster) {
	res := c.status()
	var server, client districts.Node
	for _, n := range res.Nodes {
		switch n.District {
		case "aws-us":
			server = n
		case "gce-eu":
			client = n
		}
	}
	ip := strings.TrimSpace(c.mustOn(server, `docker inspect --format '{{(index .NetworkSettings.Networks "e2e-mesh").IPAddress}}' e2e-web`))
	c.mustOn(client, `docker run -d --name e2e-prober --network e2e-mesh `+image+` sh -c "while [ ! -f /stop ]; do if printf 'GET / HTTP/1.0\r\n\r\n' | busybox nc -w 5 `+ip+` 8080 | busybox grep -q hello; then echo ok; else echo fail; fi; busybox sleep 0.05; done" >/dev/null`)
	probes := func() (ok, failed int) {
		out := c.mustOn(client, `docker logs e2e-prober 2>&1`)
		return strings.Count(out, "ok"), strings.Count(out, "fail")
	}
	eventually(t, time.Minute, "the prober's first answers", func(context.Context) error {
		if ok, _ := probes(); ok < 10 {
			return fmt.Errorf("%d answers", ok)
		}
		return nil
	})
	r := c.transit("mesh", "rotate", "--auto-approve", server.ID)
	if r.code != 0 {
		t.Fatalf("transit mesh rotate %s: exit %d\n%s", server.ID, r.code, r)
	}
	before, _ := probes()
	eventually(t, time.Minute, "answers after the rotation", func(context.Context) error {
		if ok, _ := probes(); ok < before+10 {
			return fmt.Errorf("%d answers since", ok-before)
		}
		return nil
	})
	c.mustOn(client, `docker exec e2e-prober busybox touch /stop && docker wait e2e-prober >/dev/null`)
	ok, failed := probes()
	c.mustOn(client, `docker rm e2e-prober >/dev/null`)
	t.Logf("%d fetches across clouds answered, %d failed, while the server's node rotated its key", ok, failed)
	if failed > 0 {
		t.Errorf("%d of %d fetches failed while the server's node rotated its mesh key", failed, ok+failed)
	}
	after := c.status()
	var rotated districts.Node
	for _, n := range after.Nodes {
		if n.ID == server.ID {
			rotated = n
		}
	}
	if rotated.MeshKey == server.MeshKey || rotated.MeshKey == "" || rotated.MeshKeyNext != "" {
		t.Fatalf("node %s: mesh key %q (was %q), next %q", server.ID, rotated.MeshKey, server.MeshKey, rotated.MeshKeyNext)
	}
	if running := strings.TrimSpace(c.mustOn(rotated, "cat "+meshnode.Dir+"/"+mesh.RunningKeyFile)); running != rotated.MeshKey {
		t.Errorf("node %s runs key %s, the state records %s", server.ID, running, rotated.MeshKey)
	}
	for _, n := range after.Nodes {
		if n.ID == server.ID {
			continue
		}
		peers := c.mustOn(n, "cat "+meshnode.Dir+"/"+mesh.PeersFile)
		if !strings.Contains(peers, rotated.MeshKey) || strings.Contains(peers, server.MeshKey) {
			t.Errorf("node %s's peers after the rotation: %s", n.ID, peers)
		}
	}
	c.checkSwarmOnMesh(t)
}

// machinesOf is every node's machine, by node id.
func machinesOf(res districts.Resources) map[string]string {
	out := map[string]string{}
	for _, n := range res.Nodes {
		out[n.ID] = n.ProviderID
	}
	return out
}

// testTagRemovedWithSibling: an operator removes the district tag from
// the AWS us-east-1 worker's instance; aws-us-b, a district of the same
// identity, lists the machine too. It stays aws-us's node (a warning asks
// to restore the tag), nothing is terminated, launched or drained, and
// the mesh stays whole.
func testTagRemovedWithSibling(t *testing.T, c *cluster, env *clouds) {
	before := c.status()
	var worker districts.Node
	for _, n := range before.Nodes {
		if n.District == "aws-us" {
			worker = n
		}
	}
	ec := env.ec2Client("us-east-1")
	if _, err := ec.DeleteTags(t.Context(), &ec2.DeleteTagsInput{Resources: []string{worker.ProviderID},
		Tags: []types.Tag{{Key: sdk.String(districts.TagDistrict)}}}); err != nil {
		t.Fatalf("remove the district tag of %s: %v", worker.ProviderID, err)
	}
	defer func() {
		if _, err := ec.CreateTags(context.Background(), &ec2.CreateTagsInput{Resources: []string{worker.ProviderID},
			Tags: []types.Tag{{Key: sdk.String(districts.TagDistrict), Value: sdk.String("aws-us")}}}); err != nil {
			t.Errorf("restore the district tag: %v", err)
		}
	}()
	r := c.apply()
	if !strings.Contains(r.stdout+r.stderr, "machine "+worker.ProviderID+" is listed by districts aws-us and aws-us-b") {
		t.Errorf("apply does not warn of the machine two districts list:\n%s", r)
	}
	after := c.status()
	if got, want := machinesOf(after), machinesOf(before); !maps.Equal(got, want) {
		t.Errorf("the nodes' machines changed with a tag removed: %v, were %v", got, want)
	}
	if got := env.swarmMembers(c, after); len(got) != 3 || got[worker.ID] != "Ready Active worker" {
		t.Errorf("docker node ls after the apply: %v", got)
	}
	c.checkSwarmOnMesh(t)
}

// testZoneUnreachable: Compute Engine's aggregated list reports the GCE
// worker's zone UNREACHABLE. transit does not take the listing as the
// truth: the apply fails naming the zone, no node is forgotten, removed
// or replaced; once the zone answers again the next apply converges with
// every member kept.
func testZoneUnreachable(t *testing.T, c *cluster, env *clouds) {
	before := c.status()
	var worker districts.Node
	for _, n := range before.Nodes {
		if n.District == "gce-eu" {
			worker = n
		}
	}
	env.emu.GCEFaults.Add(cloudsim.Fault{Op: cloudsim.OpList, Kind: cloudsim.FaultUnreachable, Reason: worker.Zone, Times: -1})
	r := c.transit("apply", "--auto-approve")
	env.emu.GCEFaults.Clear()
	if r.code == 0 || !strings.Contains(r.stdout+r.stderr, "zones/"+worker.Zone+" unreachable") {
		t.Errorf("apply with zone %s unreachable: exit %d, want a failure naming the zone\n%s", worker.Zone, r.code, r)
	}
	if got, want := machinesOf(c.status()), machinesOf(before); !maps.Equal(got, want) {
		t.Errorf("the nodes' machines changed while a zone was unreachable: %v, were %v", got, want)
	}
	c.apply()
	after := c.status()
	if got, want := machinesOf(after), machinesOf(before); !maps.Equal(got, want) {
		t.Errorf("the nodes' machines changed once the zone answered: %v, were %v", got, want)
	}
	if got := env.swarmMembers(c, after); len(got) != 3 || got[worker.ID] != "Ready Active worker" {
		t.Errorf("docker node ls after the zone answered: %v", got)
	}
	c.checkSwarmOnMesh(t)
}

// testRestartedTakesPeers: an OpenStack worker joins and is stopped
// (SHUTOFF: its floating IP stays); meanwhile the AWS us-east-1 worker's
// machine is deleted behind transit's back and replaced (the operator
// confirms it with --forget-missing: it was the district's only one), and the new
// worker must not get the deleted one's mesh address, which the stopped
// node still sends to the deleted node's key. Started again at the same
// addresses (its units start transit-mesh with its old peers file and
// the engine, as systemd would), the node is owed the current peers
// whatever its addresses: the next apply gives them, and every member
// is Ready on the mesh.
func testRestartedTakesPeers(t *testing.T, c *cluster, env *clouds) {
	c.setQuantity("os-eu", districts.RoleWorker, 1)
	env.checkSwarm(t, c, 3)
	var stopped, gone districts.Node
	for _, n := range c.status().Nodes {
		switch n.District {
		case "os-eu":
			stopped = n
		case "aws-us":
			gone = n
		}
	}
	if err := env.emu.OpenStack.Stop(t.Context(), "RegionOne", osProject, stopped.ProviderID); err != nil {
		t.Fatal(err)
	}
	eventually(t, 2*time.Minute, "the OpenStack worker's machine stopped", func(context.Context) error {
		for _, n := range c.statusNow().Nodes {
			if n.ID == stopped.ID && n.Machine == "stopped" {
				return nil
			}
		}
		return errors.New("not stopped yet")
	})
	if err := env.emu.EC2.Remove(t.Context(), "us-east-1", gone.ProviderID); err != nil {
		t.Fatal(err)
	}
	// The district's only machine vanished: transit believes that only
	// when told (a changed credential looks the same).
	if r := c.transit("apply", "--auto-approve", "--forget-missing"); r.code != 0 {
		t.Fatalf("apply --forget-missing with the worker deleted: exit %d\n%s", r.code, r)
	}
	var fresh districts.Node
	for _, n := range c.status().Nodes {
		if n.District == "aws-us" {
			fresh = n
		}
	}
	if fresh.ID == "" || fresh.ID == gone.ID {
		t.Fatalf("the deleted worker %s was not replaced: %+v", gone.ID, c.status().Nodes)
	}
	if fresh.MeshIP == gone.MeshIP {
		t.Errorf("the new worker %s got mesh address %s while stopped %s may still send it to the deleted %s's key", fresh.ID, fresh.MeshIP, stopped.ID, gone.ID)
	}
	if err := env.emu.OpenStack.Start(t.Context(), "RegionOne", osProject, stopped.ProviderID); err != nil {
		t.Fatal(err)
	}
	eventually(t, 2*time.Minute, "the OpenStack worker running at its floating IP again", func(ctx context.Context) error {
		for _, n := range c.statusNow().Nodes {
			if n.ID == stopped.ID && n.Machine == "" && n.PublicIP == stopped.PublicIP {
				_, err := c.on(ctx, n, "true")
				return err
			}
		}
		return errors.New("not running yet")
	})
	// Its units, as systemd starts them at boot: the mesh with the peers
	// it had, the engine (which rejoins the swarm by itself).
	bits := netip.MustParsePrefix(districts.DefaultMeshCIDR).Bits()
	c.mustOn(stopped, meshnode.UpScript(provider.MeshSpec{Address: stopped.MeshIP + "/" + strconv.Itoa(bits), Port: districts.DefaultMeshPort}))
	c.mustOn(stopped, `mkdir -p /run/transit && setsid dockerd --pidfile /run/transit/dockerd.pid >>/run/transit/dockerd.log 2>&1 </dev/null &
i=0; until docker info >/dev/null 2>&1; do i=$((i+1)); [ $i -lt 600 ] || exit 1; sleep 0.1; done`)
	if old := c.mustOn(stopped, "cat "+meshnode.Dir+"/"+mesh.PeersFile); !strings.Contains(old, gone.MeshKey) {
		t.Fatalf("the restarted node's peers before the apply lack the deleted node's key: the scenario did not happen\n%s", old)
	}
	c.apply()
	if peers := c.mustOn(stopped, "cat "+meshnode.Dir+"/"+mesh.PeersFile); strings.Contains(peers, gone.MeshKey) {
		t.Errorf("the restarted node still has the deleted node's key among its peers: %s", peers)
	}
	eventually(t, 2*time.Minute, "every member Ready, the restarted one too", func(context.Context) error {
		got := env.swarmMembers(c, c.statusNow())
		for _, id := range []string{stopped.ID, fresh.ID} {
			if got[id] != "Ready Active worker" {
				return fmt.Errorf("docker node ls: %v", got)
			}
		}
		return nil
	})
	// Not checkSwarm: the boot gave the machine its cloud hostname back,
	// which the engine now reports (the node keeps its transit-node
	// label, by which transit knows it).
	if got := env.swarmMembers(c, c.status()); len(got) != 3 {
		t.Errorf("docker node ls: %v, want 3 members", got)
	}
	if r := c.transit("plan", "--detailed-exitcode"); r.code != 0 {
		t.Errorf("plan after the restart: exit %d, want 0 (no changes)\n%s", r.code, r.stdout)
	}
	c.checkSwarmOnMesh(t)
}
