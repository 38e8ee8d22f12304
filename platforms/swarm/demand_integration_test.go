package swarm

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/cloudtransit/transit/districts"
	"github.com/cloudtransit/transit/drivers/local"
	"github.com/cloudtransit/transit/platforms/platformtest"
	"github.com/cloudtransit/transit/platforms/ssh"
	"github.com/cloudtransit/transit/provider"
	"github.com/cloudtransit/transit/shellquote"
)

var update = flag.Bool("update", false, "rewrite "+demandCapture+" from the swarm TestDemandOnASwarm runs")

// demandCapture is demandScript's output from TestDemandOnASwarm's swarm:
// what TestSwarmStateDemand reads.
const demandCapture = "testdata/demand.json"

// The one-node swarm of TestDemandOnASwarm: fixed names, so that a run
// killed half-way is cleaned up by the next (under the host's test lock,
// no two runs at once); its own subnet, apart from the conformance
// suites' (10.247.1/24, 10.247.2/24).
const (
	demandRoot    = "/var/lib/transit/swarm-demand-test"
	demandSubnet  = "10.247.3.0/24"
	demandCluster = "dt"
	demandImage   = "transit-platformtest/busybox:latest"
)

// demandServices is what TestDemandOnASwarm runs on its node (id) and
// what Demand must make of it, per service:
//
//	web      replicated, 2 × (0.1 CPU, 16 MiB)     two movable workloads
//	agent    global, 0.05 CPU, 8 MiB               the node's overhead
//	data     a volume mount, 4 MiB                 unmovable (keeps data)
//	logs     a bind mount                          unmovable (keeps data)
//	pinned   node.hostname==id                     unmovable (pinned)
//	big      512 CPUs, 3 GiB, site==demandtest     pending, with its selector
//	nowhere  disk==nvme, which no node has         pending (constraints)
func demandServices(id string) string {
	return `set -eu
c() { docker service create --detach --no-resolve-image --quiet --stop-grace-period 1s "$@" ` + shellquote.Quote(demandImage) + ` sleep 3600 >/dev/null; }
c --name web --replicas 2 --reserve-cpu 0.1 --reserve-memory 16M
c --name agent --mode global --reserve-cpu 0.05 --reserve-memory 8M
c --name data --reserve-memory 4M --mount type=volume,source=dt-data,target=/data
c --name logs --mount type=bind,source=/etc,target=/host-etc,readonly
c --name pinned --constraint node.hostname==` + shellquote.Quote(id) + `
c --name big --reserve-cpu 512 --reserve-memory 3G --constraint node.labels.site==demandtest --constraint node.platform.os==linux
c --name nowhere --constraint 'node.labels.disk == nvme'
`
}

// TestDemandOnASwarm runs the services of demandServices on a real
// one-node swarm (a local machine: root; skipped with -short) and checks
// what Demand makes of them, from the driver that formed the swarm (one
// SSH round trip) and from a new one (which finds the manager first).
// With -update it writes demandScript's output to demandCapture.
func TestDemandOnASwarm(t *testing.T) {
	platformtest.RequireRoot(t)
	platformtest.HoldHost(t)
	ctx := t.Context()
	began := time.Now()
	n, cfg, run := launchDemandNode(t)
	t.Logf("launched %s in %s", n.ID, time.Since(began).Round(100*time.Millisecond))

	began = time.Now()
	p := New(districts.Cluster{ID: demandCluster}, Options{SSH: cfg})
	t.Cleanup(func() { closeDriver(p) })
	fresh := New(districts.Cluster{ID: demandCluster}, Options{SSH: cfg})
	t.Cleanup(func() { closeDriver(fresh) })
	if err := p.Install(ctx, n); err != nil {
		t.Fatalf("Install: %v", err)
	}
	if err := p.Init(ctx, n); err != nil {
		t.Fatalf("Init: %v", err)
	}
	if err := p.Label(ctx, n, n.Tags); err != nil {
		t.Fatalf("Label: %v", err)
	}
	t.Logf("the swarm formed in %s", time.Since(began).Round(100*time.Millisecond))

	began = time.Now()
	if _, err := run(ctx, n, "create the services", demandServices(n.ID), nil); err != nil {
		t.Fatal(err)
	}
	// Until every task that can run runs and the scheduler has said why
	// the others cannot.
	var out string
	deadline := time.Now().Add(2 * time.Minute)
	for {
		var err error
		out, err = run(ctx, n, "read the swarm", demandScript(), nil)
		if err != nil {
			t.Fatal(err)
		}
		running, waiting, err := countTasks(out)
		if err != nil {
			t.Fatal(err)
		}
		if running == 6 && waiting == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 2 minutes %d tasks run (want 6) and %d wait for a node (want 2):\n%s", running, waiting, out)
		}
		time.Sleep(250 * time.Millisecond)
	}
	t.Logf("the services ran in %s", time.Since(began).Round(100*time.Millisecond))
	if *update {
		var b bytes.Buffer
		if err := json.Indent(&b, []byte(out), "", "  "); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(demandCapture, b.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}

	mi := int64(1) << 20
	want := provider.Demand{
		Pending: []provider.Workload{
			{Name: "big.1", MilliCPU: 512_000, MemoryBytes: 3 << 30, Selector: map[string]string{"site": "demandtest"}},
			{Name: "nowhere.1", Selector: map[string]string{"disk": "nvme"}},
		},
		Nodes: []provider.NodeLoad{{
			Node: n.ID, Schedulable: true, OverheadMilliCPU: 50, OverheadMemoryBytes: 8 * mi,
			Workloads: []provider.Workload{
				{Name: "data.1", MemoryBytes: 4 * mi, Unmovable: "keeps data on the node (volume mount at /data)"},
				{Name: "logs.1", Unmovable: "keeps data on the node (bind mount at /host-etc)"},
				{Name: "pinned.1", Unmovable: "pinned to the node (constraint node.hostname==" + n.ID + ")"},
				{Name: "web.1", MilliCPU: 100, MemoryBytes: 16 * mi},
				{Name: "web.2", MilliCPU: 100, MemoryBytes: 16 * mi},
			},
		}},
	}
	for _, d := range []struct {
		name string
		p    provider.Platform
	}{
		{"the driver that formed the swarm", p},
		{"a new driver", fresh},
	} {
		began := time.Now()
		got, err := d.p.(provider.Demander).Demand(ctx, []districts.Node{n})
		if err != nil {
			t.Fatalf("%s: Demand: %v", d.name, err)
		}
		t.Logf("%s: Demand took %s", d.name, time.Since(began).Round(time.Millisecond))
		if diff := cmp.Diff(want, got, cmpopts.IgnoreFields(provider.NodeLoad{}, "MilliCPU", "MemoryBytes", "Labels")); diff != "" {
			t.Errorf("%s: Demand (-want +got):\n%s", d.name, diff)
		}
		for _, l := range got.Nodes {
			if l.MilliCPU < 1000 || l.MemoryBytes < 64*mi || l.Labels["site"] != "demandtest" || l.Labels[labelNode] != n.ID {
				t.Errorf("%s: node %s has %d millicores, %d bytes, labels %v; want the machine's CPUs and memory and its tags",
					d.name, l.Node, l.MilliCPU, l.MemoryBytes, l.Labels)
			}
		}
	}
}

func closeDriver(p provider.Platform) {
	if c, ok := p.(io.Closer); ok {
		_ = c.Close()
	}
}

// countTasks counts, in demandScript's output, the tasks running and
// those pending with the scheduler's "no suitable node".
func countTasks(out string) (running, waiting int, err error) {
	var s swarmState
	if err := json.Unmarshal([]byte(out), &s); err != nil {
		return 0, 0, err
	}
	for _, t := range s.Tasks {
		switch {
		case t.Status.State == "running":
			running++
		case t.Status.State == "pending" && strings.HasPrefix(t.Status.Err, "no suitable node"):
			waiting++
		}
	}
	return running, waiting, nil
}

// launchDemandNode launches a master machine in a local district of its
// own, its images directory holding the test image, and registers the
// cleanup that removes the machine, the bridge and the chains.
func launchDemandNode(t *testing.T) (districts.Node, ssh.Config, func(context.Context, districts.Node, string, string, []byte) (string, error)) {
	t.Helper()
	ctx := t.Context()
	if err := local.Check(); err != nil {
		t.Fatalf("the local provider cannot run here (make deps): %v", err)
	}
	if err := local.Purge(ctx, demandRoot); err != nil {
		t.Fatalf("purge what an earlier run left: %v", err)
	}
	t.Cleanup(func() { purgeDemandRoot(t) })
	if err := os.MkdirAll(filepath.Join(demandRoot, "images"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := platformtest.WriteBusyboxImage(filepath.Join(demandRoot, "images", "busybox.tar"), demandImage); err != nil {
		t.Fatal(err)
	}

	stateDir := t.TempDir()
	key, err := ssh.EnsureKey(stateDir, demandCluster)
	if err != nil {
		t.Fatal(err)
	}
	hosts, err := ssh.OpenHostKeys(ssh.HostKeysPath(stateDir, demandCluster))
	if err != nil {
		t.Fatal(err)
	}
	d := districts.District{Type: "district", ID: "dt-a", Provider: districts.ProviderLocal, LocalSubnet: demandSubnet,
		Flavors: []districts.DistrictFlavor{{Flavor: "small"}}}
	drv, err := local.New(ctx, d, local.Options{Root: demandRoot, SSHWait: 2 * time.Minute})
	if err != nil {
		t.Fatalf("local driver: %v", err)
	}
	infra := ssh.PinHostKeys(drv, hosts)
	group, err := infra.EnsureGroup(ctx, provider.GroupSpec{Name: provider.GroupName(demandCluster, d.ID), Cluster: demandCluster,
		District: d.ID, Tags: map[string]string{districts.TagCluster: demandCluster}})
	if err != nil {
		t.Fatalf("make the district's group: %v", err)
	}
	n := districts.Node{Type: "node", ID: demandCluster + "-master-1", Cluster: demandCluster, District: d.ID,
		Role: districts.RoleMaster, Flavor: "small", Tags: map[string]string{"site": "demandtest"}}
	inst, err := infra.Launch(ctx, provider.LaunchSpec{Node: n, GroupID: group.ProviderID,
		Tags: provider.IdentityTags(n, "swarm-demand-test"), AuthorizedKey: key.AuthorizedKey})
	if err != nil {
		t.Fatalf("launch %s: %v", n.ID, err)
	}
	n.ProviderID, n.PublicIP, n.PrivateIP, n.Zone = inst.ProviderID, inst.PublicIP, inst.PrivateIP, inst.Zone
	cfg := ssh.Config{Signer: key.Signer, HostKeys: hosts, KeyPath: key.Path, WaitTimeout: 10 * time.Second, DialTimeout: 5 * time.Second}
	pool := ssh.NewPool(cfg, "the swarm demand test")
	t.Cleanup(func() { _ = pool.Close() })
	return n, cfg, pool.Run
}

// purgeDemandRoot removes every machine, bridge and chain under
// demandRoot and reports a network namespace or process left behind.
func purgeDemandRoot(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	began := time.Now()
	if err := local.Purge(ctx, demandRoot); err != nil {
		t.Errorf("purge the local machine: %v", err)
		return
	}
	var left []string
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		if data, err := os.ReadFile(p); err == nil && strings.Contains(string(data), demandRoot+"/") {
			left = append(left, fmt.Sprintf("process %s: %s", filepath.Base(filepath.Dir(p)), strings.ReplaceAll(string(data), "\x00", " ")))
		}
	}
	if links, err := exec.CommandContext(ctx, "ip", "-o", "addr", "show").Output(); err == nil &&
		strings.Contains(string(links), strings.TrimSuffix(demandSubnet, "0/24")) {
		left = append(left, "an interface on "+demandSubnet)
	}
	for _, l := range left {
		t.Errorf("left behind: %s", l)
	}
	if len(left) == 0 {
		if err := os.RemoveAll(demandRoot); err != nil {
			t.Error(err)
		}
	}
	t.Logf("cleanup took %s", time.Since(began).Round(100*time.Millisecond))
}
