package aws

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	sdk "github.com/aws/aws-sdk-go-v2/aws"
	sdkec2 "github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/google/go-cmp/cmp"
	"golang.org/x/sync/errgroup"

	"github.com/cloudtransit/transit/cloudsim"
	"github.com/cloudtransit/transit/cloudsim/ec2"
	"github.com/cloudtransit/transit/districts"
	"github.com/cloudtransit/transit/drivers/cloudutil"
	"github.com/cloudtransit/transit/provider"
)

// ready is a world with a driver, its group and a key.
func ready(t *testing.T, w *world, cluster string, mod ...func(*districts.District)) (*driver, provider.Group, string) {
	t.Helper()
	drv := w.driver(w.district(mod...), credential(), fast())
	g, err := drv.EnsureGroup(t.Context(), groupSpec(cluster, "aws-test"))
	if err != nil {
		t.Fatalf("EnsureGroup: %v", err)
	}
	key, _ := newKey(t)
	return drv, g, key
}

// launchAll launches nodes <cluster>-n0... at once and returns them.
func launchAll(t *testing.T, drv *driver, cluster, zone, group, key string, n int) []provider.Instance {
	t.Helper()
	out := make([]provider.Instance, n)
	var eg errgroup.Group
	for i := range n {
		eg.Go(func() error {
			inst, err := drv.Launch(t.Context(), launchSpec(cluster, "aws-test", fmt.Sprintf("%s-n%d", cluster, i), zone, group, key))
			out[i] = inst
			return err
		})
	}
	if err := eg.Wait(); err != nil {
		t.Fatalf("Launch: %v", err)
	}
	return out
}

func perZone(insts []provider.Instance) map[string]int {
	m := map[string]int{}
	for _, in := range insts {
		m[in.Zone]++
	}
	return m
}

func TestParallelLaunchesSpread(t *testing.T) {
	t.Parallel()
	w := newWorld(t, ec2.Options{})
	// Launches that take a while, so that they overlap.
	w.srv.SetLatency(cloudsim.Latency{Launch: 100 * time.Millisecond})

	t.Run("available zones", func(t *testing.T) {
		drv, g, key := ready(t, w, "spread")
		got := perZone(launchAll(t, drv, "spread", "", g.ProviderID, key, 6))
		if diff := cmp.Diff(map[string]int{zones[0]: 2, zones[1]: 2, zones[2]: 2}, got); diff != "" {
			t.Errorf("6 nodes over 3 zones (-want +got):\n%s", diff)
		}
		// The next one goes where the fewest are: anywhere; after a
		// termination, to the emptier zone.
		insts, _, err := drv.List(t.Context(), "spread")
		if err != nil {
			t.Fatal(err)
		}
		var victim provider.Instance
		for _, in := range insts {
			if in.Zone == zones[1] {
				victim = in
			}
		}
		if err := drv.Terminate(t.Context(), victim); err != nil {
			t.Fatal(err)
		}
		inst, err := drv.Launch(t.Context(), launchSpec("spread", "aws-test", "spread-n9", "", g.ProviderID, key))
		if err != nil {
			t.Fatal(err)
		}
		if inst.Zone != zones[1] {
			t.Errorf("after a termination in %s the next node went to %s", zones[1], inst.Zone)
		}
	})
	t.Run("aws_zones", func(t *testing.T) {
		drv, g, key := ready(t, w, "zoned", func(d *districts.District) { d.AWSZones = []string{zones[2], zones[0]} })
		got := perZone(launchAll(t, drv, "zoned", "", g.ProviderID, key, 4))
		if diff := cmp.Diff(map[string]int{zones[0]: 2, zones[2]: 2}, got); diff != "" {
			t.Errorf("4 nodes over aws_zones (-want +got):\n%s", diff)
		}
	})
	t.Run("aws_subnet_ids", func(t *testing.T) {
		out, err := w.sdk().DescribeSubnets(t.Context(), &sdkec2.DescribeSubnetsInput{
			Filters: []types.Filter{filter("availability-zone", zones[1], zones[2])}})
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, sn := range out.Subnets {
			ids = append(ids, sdk.ToString(sn.SubnetId))
		}
		drv, g, key := ready(t, w, "subnets", func(d *districts.District) { d.AWSSubnetIDs = ids })
		got := perZone(launchAll(t, drv, "subnets", "", g.ProviderID, key, 4))
		if diff := cmp.Diff(map[string]int{zones[1]: 2, zones[2]: 2}, got); diff != "" {
			t.Errorf("4 nodes over aws_subnet_ids (-want +got):\n%s", diff)
		}
		// A zone outside the subnets is a configuration problem.
		_, err = drv.Launch(t.Context(), launchSpec("subnets", "aws-test", "subnets-x", zones[0], g.ProviderID, key))
		wantKind(t, err, districts.ErrInvalid)
	})
	t.Run("node zone", func(t *testing.T) {
		drv, g, key := ready(t, w, "pinned", func(d *districts.District) { d.AWSZones = []string{zones[0]} })
		got := perZone(launchAll(t, drv, "pinned", zones[2], g.ProviderID, key, 3))
		if diff := cmp.Diff(map[string]int{zones[2]: 3}, got); diff != "" {
			t.Errorf("nodes with a zone (-want +got):\n%s", diff)
		}
	})
}

func TestLaunchShape(t *testing.T) {
	t.Parallel()
	w := newWorld(t, ec2.Options{})
	drv, g, key := ready(t, w, "shape")
	w.actions()
	spec := launchSpec("shape", "aws-test", "shape-n1", "", g.ProviderID, key)
	spec.Tags["team"] = "a b"
	inst, err := drv.Launch(t.Context(), spec)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(spec.Tags, inst.Tags); diff != "" {
		t.Errorf("tags (-want +got):\n%s", diff)
	}
	if inst.State != provider.InstanceRunning || inst.PublicIP == "" || inst.PrivateIP == "" || inst.CreatedAt.IsZero() || !strings.HasPrefix(inst.ProviderID, "i-") {
		t.Errorf("launched %+v", inst)
	}
	runs := w.forms("RunInstances")
	if len(runs) != 1 {
		t.Fatalf("%d RunInstances requests", len(runs))
	}
	f := runs[0]
	ud, err := base64.StdEncoding.DecodeString(f.Get("UserData"))
	if err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]string{
		"ImageId":      "ami-0d1e0b1a2c3d4e5f7", // the newest debian-12-amd64 of DefaultImages
		"InstanceType": "t3.micro",
		"KeyName":      "transit-shape",
		"ClientToken":  clientToken(spec.Node, "lin-1"),
		"NetworkInterface.1.AssociatePublicIpAddress": "true",
		"NetworkInterface.1.SecurityGroupId.1":        g.ProviderID,
		"TagSpecification.1.ResourceType":             "instance",
		"TagSpecification.2.ResourceType":             "volume",
		"MetadataOptions.HttpTokens":                  "required",
	} {
		if got := f.Get(k); got != want {
			t.Errorf("RunInstances %s = %q, want %q", k, got, want)
		}
	}
	if string(ud) != cloudutil.CloudConfig(key) || !strings.Contains(string(ud), "disable_root: false") || !strings.Contains(string(ud), key) {
		t.Errorf("user data:\n%s", ud)
	}
	// The host keys are the ones the console shows.
	out, err := w.sdk().GetConsoleOutput(t.Context(), &sdkec2.GetConsoleOutputInput{InstanceId: sdk.String(inst.ProviderID), Latest: sdk.Bool(true)})
	if err != nil {
		t.Fatal(err)
	}
	console, _ := base64.StdEncoding.DecodeString(sdk.ToString(out.Output))
	if want := cloudutil.ParseHostKeys(string(console)); len(want) == 0 || !slices.Equal(want, inst.HostKeys) {
		t.Errorf("host keys %q, console shows %q", inst.HostKeys, want)
	}
	// The key pair and the image are looked up once per driver.
	w.actions()
	if _, err := drv.Launch(t.Context(), launchSpec("shape", "aws-test", "shape-n2", "", g.ProviderID, key)); err != nil {
		t.Fatal(err)
	}
	for _, a := range w.actions() {
		if a == "DescribeImages" || a == "DescribeKeyPairs" || a == "ImportKeyPair" || a == "DescribeSubnets" {
			t.Errorf("second launch asked %s again", a)
		}
	}
}

func TestLostLaunch(t *testing.T) {
	t.Parallel()
	w := newWorld(t, ec2.Options{})
	drv, g, key := ready(t, w, "lost")
	nodes := func(node string) []string {
		t.Helper()
		out, err := w.sdk().DescribeInstances(t.Context(), &sdkec2.DescribeInstancesInput{Filters: []types.Filter{filter("tag:transit-node", node)}})
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, r := range out.Reservations {
			for _, in := range r.Instances {
				ids = append(ids, sdk.ToString(in.InstanceId))
			}
		}
		return ids
	}

	// One lost answer: the SDK retries with the same token.
	w.sim.Faults.Add(cloudsim.Fault{Op: cloudsim.OpLaunch, Kind: cloudsim.FaultLost})
	inst, err := drv.Launch(t.Context(), launchSpec("lost", "aws-test", "lost-n1", "", g.ProviderID, key))
	if err != nil {
		t.Fatalf("Launch after a lost answer: %v", err)
	}
	if ids := nodes("lost-n1"); !slices.Equal(ids, []string{inst.ProviderID}) {
		t.Errorf("instances of lost-n1: %v, want only %s", ids, inst.ProviderID)
	}
	if n := len(w.forms("RunInstances")); n != 2 {
		t.Errorf("%d RunInstances requests, want 2", n)
	}

	// Every answer lost: Launch fails, one machine exists, and the next
	// Launch of the node returns it.
	w.sim.Faults.Add(cloudsim.Fault{Op: cloudsim.OpLaunch, Kind: cloudsim.FaultLost, Times: -1})
	_, err = drv.Launch(t.Context(), launchSpec("lost", "aws-test", "lost-n2", "", g.ProviderID, key))
	noSecret(t, err)
	if err == nil {
		t.Fatal("Launch succeeded while every answer was lost")
	}
	ids := nodes("lost-n2")
	if len(ids) != 1 {
		t.Fatalf("instances of lost-n2 after failed launches: %v, want one", ids)
	}
	w.sim.Faults.Clear()
	again, err := drv.Launch(t.Context(), launchSpec("lost", "aws-test", "lost-n2", "", g.ProviderID, key))
	if err != nil {
		t.Fatal(err)
	}
	if again.ProviderID != ids[0] || len(nodes("lost-n2")) != 1 {
		t.Errorf("relaunch made %s, the lost launch made %s", again.ProviderID, ids[0])
	}

	// A node id whose instance is gone is not launched again by token.
	if err := drv.Terminate(t.Context(), again); err != nil {
		t.Fatal(err)
	}
	_, err = drv.Launch(t.Context(), launchSpec("lost", "aws-test", "lost-n2", "", g.ProviderID, key))
	if err == nil || !strings.Contains(err.Error(), "never reused") {
		t.Errorf("relaunch of a terminated node: %v", err)
	}
}

func TestLaunchFailures(t *testing.T) {
	t.Parallel()
	t.Run("quota fault", func(t *testing.T) {
		t.Parallel()
		w := newWorld(t, ec2.Options{})
		drv, g, key := ready(t, w, "quota")
		for _, q := range []string{"", "VcpuLimitExceeded", "on-demand-standard-vcpus"} {
			w.sim.Faults.Add(cloudsim.Fault{Op: cloudsim.OpLaunch, Kind: cloudsim.FaultQuota, Quota: q})
			_, err := drv.Launch(t.Context(), launchSpec("quota", "aws-test", "quota-n1", "", g.ProviderID, key))
			wantKind(t, err, provider.ErrQuota)
			if name := cmpOr(q, "InstanceLimitExceeded"); !strings.Contains(err.Error(), name) {
				t.Errorf("quota error does not name %s: %v", name, err)
			}
		}
	})
	t.Run("vCPU quota", func(t *testing.T) {
		t.Parallel()
		w := newWorld(t, ec2.Options{VCPULimit: 3})
		drv, g, key := ready(t, w, "vcpu")
		if _, err := drv.Launch(t.Context(), launchSpec("vcpu", "aws-test", "vcpu-n1", "", g.ProviderID, key)); err != nil {
			t.Fatal(err)
		}
		_, err := drv.Launch(t.Context(), launchSpec("vcpu", "aws-test", "vcpu-n2", "", g.ProviderID, key))
		wantKind(t, err, provider.ErrQuota)
		if !strings.Contains(err.Error(), "VcpuLimitExceeded") || !strings.Contains(err.Error(), "vcpu-n2") {
			t.Errorf("quota error: %v", err)
		}
	})
	t.Run("configuration", func(t *testing.T) {
		t.Parallel()
		w := newWorld(t, ec2.Options{})
		key, _ := newKey(t)
		for _, tc := range []struct {
			name   string
			mod    func(*districts.District)
			spec   func(*provider.LaunchSpec)
			naming string
		}{
			{"unknown image id", func(d *districts.District) { d.AWSImageID = "ami-00000000000000000" }, nil, "aws_image_id"},
			{"no such image name", func(d *districts.District) { d.AWSImageName = "debian-12-amd64-*" }, nil, "aws_image_name"},
			{"unknown subnet", func(d *districts.District) { d.AWSSubnetIDs = []string{"subnet-00000000000000000"} }, nil, "aws_subnet_ids"},
			{"zone without subnet", func(d *districts.District) { d.AWSZones = []string{"eu-central-1z"} }, nil, "aws_zones"},
			{"unknown instance type", nil, func(s *provider.LaunchSpec) { s.MachineType = "huge" }, "instance_type"},
			{"no instance type", nil, func(s *provider.LaunchSpec) { s.MachineType = "" }, "instance_type"},
		} {
			mod := tc.mod
			if mod == nil {
				mod = func(*districts.District) {}
			}
			// The district's VPC comes from its subnets: a bad subnet
			// fails the group already.
			drv := w.driver(w.district(mod), credential(), fast())
			g, err := drv.EnsureGroup(t.Context(), groupSpec("cfg", "aws-test"))
			if err == nil {
				spec := launchSpec("cfg", "aws-test", "cfg-n1", "", g.ProviderID, key)
				if tc.spec != nil {
					tc.spec(&spec)
				}
				_, err = drv.Launch(t.Context(), spec)
			}
			noSecret(t, err)
			if !errors.Is(err, districts.ErrInvalid) || !strings.Contains(err.Error(), tc.naming) {
				t.Errorf("%s: error %v, want ErrInvalid naming %s", tc.name, err, tc.naming)
			}
		}
	})
	t.Run("instance dies", func(t *testing.T) {
		t.Parallel()
		w := newWorld(t, ec2.Options{})
		w.sim.Backer = &fakeBacker{fail: true}
		drv, g, key := ready(t, w, "dies")
		inst, err := drv.Launch(t.Context(), launchSpec("dies", "aws-test", "dies-n1", "", g.ProviderID, key))
		if err == nil || !strings.Contains(err.Error(), "terminated") || !strings.Contains(err.Error(), "Server.InternalError") {
			t.Errorf("launch of an instance that dies: %v", err)
		}
		if inst.ProviderID != "" {
			t.Errorf("the terminated instance was returned to track: %+v", inst)
		}
	})
	t.Run("launch wait", func(t *testing.T) {
		t.Parallel()
		w := newWorld(t, ec2.Options{})
		w.srv.SetLatency(cloudsim.Latency{Launch: time.Hour})
		opts := fast()
		opts.LaunchWait = 100 * time.Millisecond
		drv := w.driver(w.district(), credential(), opts)
		g, err := drv.EnsureGroup(t.Context(), groupSpec("slow", "aws-test"))
		if err != nil {
			t.Fatal(err)
		}
		key, _ := newKey(t)
		_, err = drv.Launch(t.Context(), launchSpec("slow", "aws-test", "slow-n1", "", g.ProviderID, key))
		if err == nil || !strings.Contains(err.Error(), "still pending") {
			t.Errorf("launch past LaunchWait: %v", err)
		}
		insts, _, err := drv.List(t.Context(), "slow")
		if err != nil || len(insts) != 1 || insts[0].State != provider.InstancePending {
			t.Errorf("the slow instance is listed as %+v (%v)", insts, err)
		}
	})
	t.Run("canceled", func(t *testing.T) {
		t.Parallel()
		w := newWorld(t, ec2.Options{})
		w.srv.SetLatency(cloudsim.Latency{Launch: time.Hour})
		drv, g, key := ready(t, w, "cancel")
		ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
		defer cancel()
		_, err := drv.Launch(ctx, launchSpec("cancel", "aws-test", "cancel-n1", "", g.ProviderID, key))
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("launch past its context: %v", err)
		}
	})
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

func TestHostKeysMissing(t *testing.T) {
	t.Parallel()
	w := newWorld(t, ec2.Options{})
	w.sim.Backer = &fakeBacker{} // machines without host keys on the console
	opts := fast()
	opts.HostKeyWait = 100 * time.Millisecond
	drv := w.driver(w.district(), credential(), opts)
	g, err := drv.EnsureGroup(t.Context(), groupSpec("tofu", "aws-test"))
	if err != nil {
		t.Fatal(err)
	}
	key, _ := newKey(t)
	start := time.Now()
	inst, err := drv.Launch(t.Context(), launchSpec("tofu", "aws-test", "tofu-n1", "", g.ProviderID, key))
	if err != nil {
		t.Fatal(err)
	}
	if len(inst.HostKeys) != 0 || inst.PublicIP != "192.0.2.77" {
		t.Errorf("instance %+v", inst)
	}
	if time.Since(start) < opts.HostKeyWait {
		t.Errorf("Launch gave up on the host keys before HostKeyWait")
	}
}

// EC2 posts a new instance's console minutes after it runs, and until
// then GetConsoleOutput without Latest shows no host keys: Launch asks for
// the latest output and pins the keys as soon as the instance runs,
// instead of waiting out HostKeyWait and trusting the first key. The
// emulator's clock is held, so EC2 never posts the console meanwhile, and
// HostKeyWait is an hour: a Launch that waited for the posted console
// would run into the test's deadline, however fast the machine.
func TestHostKeysFromLatestConsole(t *testing.T) {
	t.Parallel()
	w := newWorld(t, ec2.Options{}) // EC2's post delay: minutes
	opts := fast()
	opts.HostKeyWait = time.Hour
	drv := w.driver(w.district(), credential(), opts)
	g, err := drv.EnsureGroup(t.Context(), groupSpec("pin", "aws-test"))
	if err != nil {
		t.Fatal(err)
	}
	key, _ := newKey(t)
	w.actions()
	w.clock.Hold()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	inst, err := drv.Launch(ctx, launchSpec("pin", "aws-test", "pin-n1", "", g.ProviderID, key))
	if err != nil {
		t.Fatalf("Launch while EC2 has not posted the console: %v (did it wait for keys the posted console would show?)", err)
	}
	reads := w.forms("GetConsoleOutput")
	console := func(latest bool) []string {
		t.Helper()
		out, err := w.sdk().GetConsoleOutput(t.Context(), &sdkec2.GetConsoleOutputInput{InstanceId: sdk.String(inst.ProviderID), Latest: sdk.Bool(latest)})
		if err != nil {
			t.Fatalf("GetConsoleOutput(Latest=%v): %v", latest, err)
		}
		text, err := base64.StdEncoding.DecodeString(sdk.ToString(out.Output))
		if err != nil {
			t.Fatal(err)
		}
		return cloudutil.ParseHostKeys(string(text))
	}
	if keys := console(false); len(keys) != 0 {
		t.Errorf("the posted console of a new instance shows host keys %q: the emulator is not EC2", keys)
	}
	want := console(true)
	if len(want) == 0 {
		t.Fatal("the latest console shows no host keys")
	}
	if !slices.Equal(inst.HostKeys, want) {
		t.Errorf("pinned host keys %q, the latest console shows %q", inst.HostKeys, want)
	}
	if len(reads) == 0 {
		t.Error("Launch never read the console")
	}
	for _, f := range reads {
		if f.Get("Latest") != "true" {
			t.Errorf("Launch read the console without Latest=true: %v", f)
			break
		}
	}
}

func TestKeyPair(t *testing.T) {
	t.Parallel()
	w := newWorld(t, ec2.Options{})
	drv, g, key := ready(t, w, "kp")
	if _, err := drv.Launch(t.Context(), launchSpec("kp", "aws-test", "kp-n1", "", g.ProviderID, key)); err != nil {
		t.Fatal(err)
	}
	// Another driver (another run) reuses it.
	w.actions()
	other := w.driver(w.district(), credential(), fast())
	if _, err := other.Launch(t.Context(), launchSpec("kp", "aws-test", "kp-n2", "", g.ProviderID, key)); err != nil {
		t.Fatal(err)
	}
	if slices.Contains(w.actions(), "ImportKeyPair") {
		t.Error("the key pair was imported again")
	}
	out, err := w.sdk().DescribeKeyPairs(t.Context(), &sdkec2.DescribeKeyPairsInput{KeyNames: []string{"transit-kp"}})
	if err != nil || len(out.KeyPairs) != 1 || userTags(out.KeyPairs[0].Tags)[districts.TagCluster] != "kp" {
		t.Fatalf("key pair: %v %+v", err, out)
	}
	// A different key under the cluster's key pair name is refused.
	otherKey, _ := newKey(t)
	third := w.driver(w.district(), credential(), fast())
	_, err = third.Launch(t.Context(), launchSpec("kp", "aws-test", "kp-n3", "", g.ProviderID, otherKey))
	if err == nil || !strings.Contains(err.Error(), "transit-kp") || !strings.Contains(err.Error(), "another public key") {
		t.Errorf("launch with another key: %v", err)
	}
}

// fakeBacker gives instances pretend machines: no host keys, or none at
// all when fail is set.
type fakeBacker struct{ fail bool }

func (b *fakeBacker) Start(_ context.Context, _, name, _ string) (cloudsim.Machine, error) {
	if b.fail {
		return cloudsim.Machine{}, errors.New("no capacity")
	}
	return cloudsim.Machine{ID: "m-" + name, Address: "192.0.2.77"}, nil
}
func (b *fakeBacker) Stop(context.Context, string, string) error           { return nil }
func (b *fakeBacker) Allow(context.Context, string, []cloudsim.Rule) error { return nil }
func (b *fakeBacker) PowerOff(context.Context, string, string, bool) error {
	return nil
}
func (b *fakeBacker) PowerOn(_ context.Context, _, id string) (cloudsim.Machine, error) {
	return cloudsim.Machine{ID: id, Address: "10.9.9.9"}, nil
}

// TestEventualConsistency launches while EC2 shows new instances only a
// while after creating them: Launch waits them out, and parallel launches
// still spread.
func TestEventualConsistency(t *testing.T) {
	t.Parallel()
	w := newWorld(t, ec2.Options{VisibilityLag: 300 * time.Millisecond})
	drv, g, key := ready(t, w, "lag")
	got := perZone(launchAll(t, drv, "lag", "", g.ProviderID, key, 3))
	if diff := cmp.Diff(map[string]int{zones[0]: 1, zones[1]: 1, zones[2]: 1}, got); diff != "" {
		t.Errorf("3 nodes over 3 zones (-want +got):\n%s", diff)
	}
	// One more, after the first three are visible: still even.
	inst, err := drv.Launch(t.Context(), launchSpec("lag", "aws-test", "lag-n3", "", g.ProviderID, key))
	if err != nil {
		t.Fatal(err)
	}
	insts, _, err := drv.List(t.Context(), "lag")
	if err != nil || len(insts) != 4 || inst.State != provider.InstanceRunning {
		t.Errorf("after 4 launches: %v %+v", err, insts)
	}
}
