package aws

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"

	sdk "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/cloudtransit/transit/districts"
	"github.com/cloudtransit/transit/drivers/cloudutil"
	"github.com/cloudtransit/transit/provider"
)

// clientToken is RunInstances' idempotency token for a node: the same
// node of the same cluster lineage in the same district always gets the
// same token, so a create whose answer was lost, retried by the SDK or by
// the next run, returns the instance it made instead of a second one.
// transit never reuses a node id within a lineage.
func clientToken(n districts.Node, lineage string) string {
	sum := sha256.Sum256([]byte(n.Cluster + "\x00" + lineage + "\x00" + n.District + "\x00" + n.ID))
	return "transit-" + hex.EncodeToString(sum[:])[:40]
}

// Launch starts the node's instance, spread over the district's zones,
// and returns once EC2 reports it running with its addresses, with the
// SSH host keys its console shows (if it shows them within HostKeyWait).
func (drv *driver) Launch(ctx context.Context, spec provider.LaunchSpec) (provider.Instance, error) {
	n := spec.Node
	what := "launch node " + n.ID
	switch {
	case spec.MachineType == "":
		return provider.Instance{}, invalid(drv.d, "flavors: flavor %q has no instance_type", n.Flavor)
	case spec.GroupID == "":
		return provider.Instance{}, fmt.Errorf("aws district %q: %s: no security group to launch it in", drv.d.ID, what)
	}
	image, err := drv.imageID(ctx)
	if err != nil {
		return provider.Instance{}, err
	}
	key, err := drv.keyPair(ctx, n.Cluster, spec.Tags, spec.AuthorizedKey)
	if err != nil {
		return provider.Instance{}, err
	}
	pl, err := drv.placements(ctx)
	if err != nil {
		return provider.Instance{}, err
	}
	token := clientToken(n, spec.Tags[districts.TagLineage])
	inst, place, done, err := drv.place(ctx, pl, n, token)
	if err != nil {
		return provider.Instance{}, err
	}
	// In flight until it runs: EC2 may list a new instance only a while
	// after creating it.
	defer done()
	found := inst != nil
	if !found {
		out, err := drv.ec2.RunInstances(ctx, &ec2.RunInstancesInput{
			ImageId:      sdk.String(image),
			InstanceType: types.InstanceType(spec.MachineType),
			KeyName:      sdk.String(key),
			MinCount:     sdk.Int32(1),
			MaxCount:     sdk.Int32(1),
			ClientToken:  sdk.String(token),
			UserData:     sdk.String(base64.StdEncoding.EncodeToString([]byte(cloudutil.CloudConfig(spec.AuthorizedKey)))),
			NetworkInterfaces: []types.InstanceNetworkInterfaceSpecification{{
				DeviceIndex: sdk.Int32(0), SubnetId: sdk.String(place.subnet), Groups: []string{spec.GroupID},
				// Nodes in other clouds reach this one by its public
				// address, whatever the subnet's default.
				AssociatePublicIpAddress: sdk.Bool(true), DeleteOnTermination: sdk.Bool(true),
			}},
			MetadataOptions: &types.InstanceMetadataOptionsRequest{HttpTokens: types.HttpTokensStateRequired},
			TagSpecifications: []types.TagSpecification{
				tagSpec(types.ResourceTypeInstance, spec.Tags), tagSpec(types.ResourceTypeVolume, spec.Tags),
			},
		})
		if err != nil {
			return provider.Instance{}, drv.wrap(fmt.Sprintf("%s in %s", what, place.zone), err)
		}
		inst = &out.Instances[0]
	}
	id := sdk.ToString(inst.InstanceId)
	if st := stateOf(*inst); st != types.InstanceStateNamePending && st != types.InstanceStateNameRunning {
		if !found {
			// This launch made it, and it failed at once.
			err := drv.launchFailed(ctx, what, *inst)
			return drv.leftBehind(ctx, id), err
		}
		return provider.Instance{}, fmt.Errorf("aws district %q: %s: it was launched before as %s, which is %s now (node ids are never reused)", drv.d.ID, what, id, st)
	}
	running, err := drv.waitRunning(ctx, id, what)
	if err != nil {
		return drv.leftBehind(ctx, id), err
	}
	out := toInstance(running)
	if out.HostKeys, err = drv.hostKeys(ctx, id); err != nil {
		return provider.Instance{}, fmt.Errorf("aws district %q: %s: read the host keys of %s: %w", drv.d.ID, what, id, err)
	}
	return out, nil
}

// place finds the node's instance if a launch made it already (by its
// client token), or picks where to launch it: Node.Zone if set, else the
// district's place with the fewest of the cluster's live instances,
// counting the launches in flight that the listing does not show yet.
// done ends the launch's flight (Launch returns).
func (drv *driver) place(ctx context.Context, pl *placements, n districts.Node, token string) (*types.Instance, placement, func(), error) {
	drv.placeMu.Lock()
	defer drv.placeMu.Unlock()
	insts, err := drv.describeAll(ctx, []types.Filter{filter("tag:"+districts.TagCluster, n.Cluster)})
	if err != nil {
		return nil, placement{}, nil, drv.wrap("launch node "+n.ID, err)
	}
	counts := map[string]int{}
	listed := map[string]bool{}
	for i := range insts {
		in := &insts[i]
		if sdk.ToString(in.ClientToken) == token {
			return in, placement{}, func() {}, nil
		}
		listed[sdk.ToString(in.ClientToken)] = true
		tags := userTags(in.Tags)
		st := stateOf(*in)
		if (st == types.InstanceStateNamePending || st == types.InstanceStateNameRunning) && tags[districts.TagDistrict] == n.District {
			zone := ""
			if in.Placement != nil {
				zone = sdk.ToString(in.Placement.AvailabilityZone)
			}
			counts[pl.key(zone, sdk.ToString(in.SubnetId))]++
		}
	}
	candidates := pl.list
	if n.Zone != "" {
		candidates = nil
		for _, p := range pl.list {
			if p.zone == n.Zone {
				candidates = append(candidates, p)
			}
		}
		if len(candidates) == 0 {
			sn := pl.byZone[n.Zone]
			if pl.subnets || sn == "" {
				return nil, placement{}, nil, invalid(drv.d, "node %s is to go to zone %s, where the district has no subnet (aws_subnet_ids, aws_zones, aws_vpc_id)", n.ID, n.Zone)
			}
			candidates = []placement{{zone: n.Zone, subnet: sn}}
		}
	}
	for tok, k := range drv.inflight {
		if !listed[tok] { // else counted above already
			counts[k]++
		}
	}
	best, bestLoad := candidates[0], -1
	for _, p := range candidates {
		if load := counts[pl.key(p.zone, p.subnet)]; bestLoad < 0 || load < bestLoad {
			best, bestLoad = p, load
		}
	}
	drv.inflight[token] = pl.key(best.zone, best.subnet)
	done := func() {
		drv.placeMu.Lock()
		defer drv.placeMu.Unlock()
		delete(drv.inflight, token)
	}
	return nil, best, done, nil
}

// waitRunning polls the instance until EC2 reports it running with its
// private and public address.
func (drv *driver) waitRunning(ctx context.Context, id, what string) (types.Instance, error) {
	deadline := drv.opts.Clock.Now().Add(drv.opts.LaunchWait)
	state := types.InstanceStateNamePending
	for i := 0; ; i++ {
		out, err := drv.ec2.DescribeInstances(ctx, &ec2.DescribeInstancesInput{InstanceIds: []string{id}})
		switch {
		case err == nil:
			for _, r := range out.Reservations {
				for _, in := range r.Instances {
					state = stateOf(in)
					switch state {
					case types.InstanceStateNameRunning:
						if sdk.ToString(in.PrivateIpAddress) != "" && sdk.ToString(in.PublicIpAddress) != "" {
							return in, nil
						}
					case types.InstanceStateNamePending:
					default:
						return types.Instance{}, drv.launchFailed(ctx, what, in)
					}
				}
			}
		case ctx.Err() != nil:
			return types.Instance{}, drv.wrap(what, err)
		case code(err) == "InvalidInstanceID.NotFound", throttles.IsErrorThrottle(err).Bool(), isServerError(err):
			// EC2 is eventually consistent: a new instance may not
			// show yet. Throttling and server errors pass too.
		default:
			return types.Instance{}, drv.wrap(fmt.Sprintf("%s: read instance %s", what, id), err)
		}
		if drv.opts.Clock.Now().After(deadline) {
			return types.Instance{}, fmt.Errorf("aws district %q: %s: instance %s is still %s after %s", drv.d.ID, what, id, state, drv.opts.LaunchWait)
		}
		if err := drv.wait(ctx, i); err != nil {
			return types.Instance{}, fmt.Errorf("aws district %q: %s: wait for instance %s: %w", drv.d.ID, what, id, err)
		}
	}
}

// leftBehind is the instance a failed launch leaves, as the loop must
// track it (provider.Infrastructure.Launch): empty when it is gone or
// going (launchFailed terminated it), or cannot be read.
func (drv *driver) leftBehind(ctx context.Context, id string) provider.Instance {
	if ctx.Err() != nil {
		return provider.Instance{}
	}
	out, err := drv.ec2.DescribeInstances(ctx, &ec2.DescribeInstancesInput{InstanceIds: []string{id}})
	if err != nil {
		return provider.Instance{}
	}
	for _, r := range out.Reservations {
		for _, in := range r.Instances {
			if inst := toInstance(in); inst.State != provider.InstanceTerminating {
				return inst
			}
		}
	}
	return provider.Instance{}
}

// launchFailed is the error of a launch whose instance stopped or
// terminated instead of running (EC2 found no capacity, an internal
// error, someone stopped it), with EC2's reason. A stopped or stopping
// instance is terminated, not waited for: it is no node.
func (drv *driver) launchFailed(ctx context.Context, what string, in types.Instance) error {
	id, st := sdk.ToString(in.InstanceId), stateOf(in)
	msg := fmt.Sprintf("instance %s is %s, not running", id, st)
	if in.StateReason != nil {
		msg += ": " + cmp.Or(sdk.ToString(in.StateReason.Message), sdk.ToString(in.StateReason.Code))
	}
	if state(st) != provider.InstanceTerminating {
		_, err := drv.ec2.TerminateInstances(context.WithoutCancel(ctx), &ec2.TerminateInstancesInput{InstanceIds: []string{id}})
		if err != nil && code(err) != "InvalidInstanceID.NotFound" {
			msg += fmt.Sprintf(" (terminating it failed: %v)", drv.wrap("terminate "+id, err))
		} else {
			msg += " (terminated)"
		}
	}
	return fmt.Errorf("aws district %q: %s: %s", drv.d.ID, what, msg)
}

// hostKeys reads the SSH host keys cloud-init prints on the console,
// polling until they show or HostKeyWait has passed; none (nil) means the
// first key presented will be trusted. Only ctx's end is an error.
//
// It asks for the latest output: by default EC2 answers what it posted
// shortly after the last state change, which for a new instance comes
// minutes after it runs, so without Latest every launch would wait out
// HostKeyWait and then trust the first key.
func (drv *driver) hostKeys(ctx context.Context, id string) ([]string, error) {
	return cloudutil.ConsoleHostKeys(ctx, drv.opts.Clock, drv.opts.HostKeyWait, drv.wait, func() (string, error) {
		out, err := drv.ec2.GetConsoleOutput(ctx, &ec2.GetConsoleOutputInput{InstanceId: sdk.String(id), Latest: sdk.Bool(true)})
		if err != nil {
			return "", err
		}
		text, err := base64.StdEncoding.DecodeString(sdk.ToString(out.Output))
		return string(text), err
	})
}
