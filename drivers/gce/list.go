package gce

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/api/iterator"
	"google.golang.org/protobuf/proto"

	"github.com/cloudtransit/transit/districts"
	"github.com/cloudtransit/transit/provider"
)

// listInstances pages through the project's instances labelled with the
// cluster, in the district's region, whose transit-district label is this
// district or missing (a machine another tool made with only the
// cluster's label).
func (drv *driver) listInstances(ctx context.Context, cluster string) ([]*computepb.Instance, error) {
	filter := fmt.Sprintf("labels.%s = %q", encodeKey(districts.TagCluster), encodeLabel(cluster))
	it := drv.instances.AggregatedList(ctx, &computepb.AggregatedListInstancesRequest{
		Project: drv.d.GCEProjectID, Filter: proto.String(filter),
	}, drv.retry())
	var out []*computepb.Instance
	for {
		pair, err := it.Next()
		if errors.Is(err, iterator.Done) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		// A zone the aggregated list could not reach is left out of it:
		// its machines would look gone.
		if page, ok := it.Response.(*computepb.InstanceAggregatedList); ok {
			if err := drv.unreachable(page.GetUnreachables()); err != nil {
				return nil, err
			}
		}
		if w := pair.Value.GetWarning(); w.GetCode() == "UNREACHABLE" {
			if err := drv.unreachable([]string{pair.Key}); err != nil {
				return nil, fmt.Errorf("%w (%s)", err, w.GetMessage())
			}
		}
		for _, in := range pair.Value.GetInstances() {
			if zoneRegion(last(in.GetZone())) != drv.d.GCERegion {
				continue
			}
			if drv.mine(decodeLabels(in.GetLabels()), cluster) {
				out = append(out, in)
			}
		}
	}
}

// unreachable is an error when one of scopes (an aggregated list's
// "zones/europe-west1-b") is a zone of the district's region, or not a
// zone at all: the listing lacks what that scope holds.
func (drv *driver) unreachable(scopes []string) error {
	for _, sc := range scopes {
		zone, isZone := strings.CutPrefix(sc, "zones/")
		if !isZone || zoneRegion(zone) == drv.d.GCERegion {
			return fmt.Errorf("the aggregated list reports %s unreachable: its instances are missing from the listing, try again later", sc)
		}
	}
	return nil
}

// zoneRegion is a zone's region (europe-west1-b → europe-west1).
func zoneRegion(zone string) string {
	if i := strings.LastIndexByte(zone, '-'); i > 0 {
		return zone[:i]
	}
	return zone
}

// mine says whether tags put a resource in this district of cluster.
func (drv *driver) mine(tags map[string]string, cluster string) bool {
	dist, has := tags[districts.TagDistrict]
	return tags[districts.TagCluster] == cluster && (!has || dist == drv.d.ID)
}

// List returns the cluster's instances and firewall rules in the
// district. Deleted instances are gone from Compute Engine's listing.
func (drv *driver) List(ctx context.Context, cluster string) ([]provider.Instance, []provider.Group, error) {
	what := "list cluster " + cluster
	insts, err := drv.listInstances(ctx, cluster)
	if err != nil {
		return nil, nil, drv.wrap(what, err)
	}
	deleting, err := drv.deleting(ctx, insts)
	if err != nil {
		return nil, nil, drv.wrap(what, err)
	}
	var out []provider.Instance
	for _, in := range insts {
		inst := drv.toInstance(in)
		if deleting[in.GetId()] {
			inst.State = provider.InstanceTerminating
		}
		out = append(out, inst)
	}
	rules, err := drv.listFirewalls(ctx)
	if err != nil {
		return nil, nil, drv.wrap(what, err)
	}
	var mine []rule
	for _, r := range rules {
		if drv.mine(r.meta.Tags, cluster) {
			mine = append(mine, r)
		}
	}
	return out, groups(mine), nil
}

// addresses are an instance's external (natIP) and internal address.
func addresses(in *computepb.Instance) (public, private string) {
	for _, ni := range in.GetNetworkInterfaces() {
		if private == "" {
			private = ni.GetNetworkIP()
		}
		for _, ac := range ni.GetAccessConfigs() {
			if public == "" {
				public = ac.GetNatIP()
			}
		}
	}
	return public, private
}

// toInstance maps a Compute Engine instance: RUNNING is running;
// PROVISIONING, STAGING, PENDING (waiting for capacity) and REPAIRING are
// pending; STOPPING, PENDING_STOP, STOPPED, TERMINATED (Compute Engine's
// word for stopped: the instance exists and may start again),
// SUSPENDING, SUSPENDED and DEPROVISIONING are stopped; any other status
// is pending. Compute Engine shows an instance being deleted as STOPPING
// too: List tells those apart by their delete operation (deleting).
func (drv *driver) toInstance(in *computepb.Instance) provider.Instance {
	pub, priv := addresses(in)
	out := provider.Instance{
		ProviderID: last(in.GetZone()) + "/" + in.GetName(),
		Tags:       decodeLabels(in.GetLabels()),
		Zone:       last(in.GetZone()),
		PublicIP:   pub,
		PrivateIP:  priv,
		State:      stateOf(in.GetStatus()),
	}
	if t, err := time.Parse(time.RFC3339, in.GetCreationTimestamp()); err == nil {
		out.CreatedAt = t
	}
	return out
}

// stateOf maps an instance status (toInstance).
func stateOf(status string) provider.InstanceState {
	switch status {
	case "RUNNING":
		return provider.InstanceRunning
	case "STOPPING", "PENDING_STOP", "STOPPED", "TERMINATED", "SUSPENDING", "SUSPENDED", "DEPROVISIONING":
		return provider.InstanceStopped
	}
	return provider.InstancePending
}

// deleting returns the ids of the instances among insts that a delete
// operation is removing: one under way, or one done without error since
// the instances were listed (the instance is gone then; ids are never
// reused). Only instances that would be listed stopped are asked about,
// one zoneOperations.list per zone they are in: none in the usual case.
func (drv *driver) deleting(ctx context.Context, insts []*computepb.Instance) (map[uint64]bool, error) {
	zones := map[string]bool{}
	for _, in := range insts {
		if stateOf(in.GetStatus()) == provider.InstanceStopped {
			zones[last(in.GetZone())] = true
		}
	}
	out := map[uint64]bool{}
	for _, zone := range slices.Sorted(maps.Keys(zones)) {
		it := drv.zoneOps.List(ctx, &computepb.ListZoneOperationsRequest{Project: drv.d.GCEProjectID, Zone: zone,
			Filter: proto.String(`operationType = "delete"`)}, drv.retry())
		for {
			op, err := it.Next()
			if errors.Is(err, iterator.Done) {
				break
			}
			if err != nil {
				return nil, err
			}
			if op.GetOperationType() == "delete" && (op.GetStatus() != computepb.Operation_DONE || len(op.GetError().GetErrors()) == 0) {
				out[op.GetTargetId()] = true
			}
		}
	}
	return out, nil
}

// getInstance reads the instance a zone/name provider id names, for
// what (the caller's action, which its errors name): a missing one is
// Compute Engine's 404 as it came (isNotFound).
func (drv *driver) getInstance(ctx context.Context, what, id string) (in *computepb.Instance, zone, name string, err error) {
	zone, name, ok := strings.Cut(id, "/")
	if !ok || zone == "" || name == "" {
		return nil, "", "", fmt.Errorf("gce district %q: %s: not a zone/name provider id", drv.d.ID, what)
	}
	in, err = drv.instances.Get(ctx, &computepb.GetInstanceRequest{Project: drv.d.GCEProjectID, Zone: zone, Instance: name}, drv.retry())
	if err != nil && !isNotFound(err) {
		err = drv.wrap(what, err)
	}
	return in, zone, name, err
}

// Describe asks Compute Engine for one instance by its zone/name,
// whatever its labels; a missing one is provider.ErrCloudNotFound, and one
// a delete operation is removing is terminating.
func (drv *driver) Describe(ctx context.Context, inst provider.Instance) (provider.Instance, error) {
	what := "describe " + inst.ProviderID
	in, _, _, err := drv.getInstance(ctx, what, inst.ProviderID)
	switch {
	case isNotFound(err):
		return provider.Instance{}, &cloudError{Kind: provider.ErrCloudNotFound, Msg: fmt.Sprintf("gce district %q: %s: no such instance", drv.d.ID, what), Err: err}
	case err != nil:
		return provider.Instance{}, err
	}
	deleting, err := drv.deleting(ctx, []*computepb.Instance{in})
	if err != nil {
		return provider.Instance{}, drv.wrap(what, err)
	}
	out := drv.toInstance(in)
	if deleting[in.GetId()] {
		out.State = provider.InstanceTerminating
	}
	return out, nil
}

// Terminate deletes the instance and returns without waiting for the
// operation (Compute Engine's deletion takes about a minute; the paper
// found waiting for it the slowest step of a migration). It looks before
// it deletes: a missing instance is done, one without transit's cluster
// label is refused.
func (drv *driver) Terminate(ctx context.Context, inst provider.Instance) error {
	what := "terminate " + inst.ProviderID
	in, zone, name, err := drv.getInstance(ctx, what, inst.ProviderID)
	switch {
	case isNotFound(err):
		return nil
	case err != nil:
		return err
	}
	if _, ok := decodeLabels(in.GetLabels())[districts.TagCluster]; !ok {
		return fmt.Errorf("gce district %q: %s: it has no %s label: not transit's, never deleted", drv.d.ID, what, districts.TagCluster)
	}
	_, err = drv.instances.Delete(ctx, &computepb.DeleteInstanceRequest{Project: drv.d.GCEProjectID, Zone: zone, Instance: name,
		RequestId: proto.String(newRequestID())}, drv.retry())
	if isNotFound(err) {
		return nil
	}
	return drv.wrap(what, err)
}
