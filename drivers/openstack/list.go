package openstack

import (
	"context"
	"fmt"
	"maps"
	"slices"

	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/servers"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/layer3/floatingips"

	"github.com/cloudtransit/transit/districts"
	"github.com/cloudtransit/transit/provider"
)

// mine says whether tags put a resource in this district of cluster: the
// cluster's tag, and this district's tag or none (a server another tool
// made with only the cluster's tag).
func (drv *driver) mine(tags map[string]string, cluster string) bool {
	dist, has := tags[districts.TagDistrict]
	return tags[districts.TagCluster] == cluster && (!has || dist == drv.d.ID)
}

// List returns the cluster's servers (by their metadata) and security
// groups (by the identity in their description) in the district.
func (drv *driver) List(ctx context.Context, cluster string) ([]provider.Instance, []provider.Group, error) {
	what := "list cluster " + cluster
	if err := drv.clients(ctx); err != nil {
		return nil, nil, err
	}
	all, err := drv.listServers(ctx, "")
	if err != nil {
		return nil, nil, drv.wrap(what, err)
	}
	var out []provider.Instance
	for _, sv := range all {
		if drv.mine(sv.Metadata, cluster) {
			out = append(out, toInstance(sv))
		}
	}
	tgs, err := drv.listGroups(ctx, "")
	if err != nil {
		return nil, nil, drv.wrap(what, err)
	}
	var groups []provider.Group
	for _, tg := range tgs {
		if drv.mine(tg.meta.Tags, cluster) {
			groups = append(groups, tg.group())
		}
	}
	return out, groups, nil
}

// deleting says whether Nova is deleting the server for good (a
// SOFT_DELETED server is not: it stays until it is reclaimed or
// force-deleted).
func deleting(sv servers.Server) bool {
	return sv.TaskState == "deleting" || sv.Status == "DELETED"
}

func toInstance(sv servers.Server) provider.Instance {
	inst := provider.Instance{ProviderID: sv.ID, Tags: maps.Clone(sv.Metadata), Zone: sv.AvailabilityZone,
		PrivateIP: fixedIP(sv), CreatedAt: sv.Created, State: stateOf(sv)}
	inst.PublicIP = addressOf(sv, "floating")
	if inst.PublicIP == "" {
		inst.PublicIP = inst.PrivateIP
	}
	return inst
}

// stateOf maps a server's status and task state: being deleted
// (task_state deleting or soft-deleting, DELETED) is terminating;
// powering off is stopped; ERROR (Nova gave up on it) failed; powering on
// pending; ACTIVE running; SHUTOFF, SUSPENDED, PAUSED, SHELVED,
// SHELVED_OFFLOADED and SOFT_DELETED (the server exists and does not run)
// stopped; BUILD and every passing status (REBOOT, REBUILD, RESIZE,
// MIGRATING, ...) or one Nova may add pending.
func stateOf(sv servers.Server) provider.InstanceState {
	switch {
	case deleting(sv), sv.TaskState == "soft-deleting":
		return provider.InstanceTerminating
	case sv.TaskState == "powering-off":
		return provider.InstanceStopped
	case sv.Status == "ERROR":
		return provider.InstanceFailed
	case sv.TaskState == "powering-on":
		return provider.InstancePending
	}
	switch sv.Status {
	case "ACTIVE":
		return provider.InstanceRunning
	case "SHUTOFF", "SUSPENDED", "PAUSED", "SHELVED", "SHELVED_OFFLOADED", "SOFT_DELETED":
		return provider.InstanceStopped
	}
	return provider.InstancePending
}

func fixedIP(sv servers.Server) string { return addressOf(sv, "fixed") }

// addressOf is the server's first IPv4 address of kind ("fixed",
// "floating"), in network name order.
func addressOf(sv servers.Server, kind string) string {
	for _, netName := range slices.Sorted(maps.Keys(sv.Addresses)) {
		list, _ := sv.Addresses[netName].([]any)
		for _, a := range list {
			m, _ := a.(map[string]any)
			addr, _ := m["addr"].(string)
			typ, _ := m["OS-EXT-IPS:type"].(string)
			version, _ := m["version"].(float64)
			if addr != "" && typ == kind && version != 6 {
				return addr
			}
		}
	}
	return ""
}

// Describe asks Nova for one server by id, whatever its metadata; a
// missing or deleted one is provider.ErrCloudNotFound.
func (drv *driver) Describe(ctx context.Context, inst provider.Instance) (provider.Instance, error) {
	what := "describe server " + inst.ProviderID
	if err := drv.clients(ctx); err != nil {
		return provider.Instance{}, err
	}
	sv, err := drv.getServer(ctx, inst.ProviderID)
	switch {
	case isNotFound(err), err == nil && sv.Status == "DELETED":
		return provider.Instance{}, &cloudError{Kind: provider.ErrCloudNotFound, Msg: fmt.Sprintf("openstack district %q: %s: no such server", drv.d.ID, what), Err: err}
	case err != nil:
		return provider.Instance{}, drv.wrap(what, err)
	}
	return toInstance(*sv), nil
}

// Terminate looks first (a missing server is fine; one without transit's
// cluster tag is refused), releases its floating IPs, deletes it, and
// does not wait for it to go. A SOFT_DELETED server is force-deleted: a
// plain DELETE of one soft-deletes it again, as Nova does, and leaves it
// until it is reclaimed. On a cloud that soft-deletes (Nova's
// reclaim_instance_interval) the DELETE powers the server off first:
// Terminate waits (bounded by LaunchWait) until it is SOFT_DELETED and
// then force-deletes it, since Nova ignores a forceDelete while it is
// soft-deleting.
func (drv *driver) Terminate(ctx context.Context, inst provider.Instance) error {
	what := "terminate server " + inst.ProviderID
	if err := drv.clients(ctx); err != nil {
		return err
	}
	sv, err := drv.getServer(ctx, inst.ProviderID)
	if isNotFound(err) {
		return nil
	}
	if err != nil {
		return drv.wrap(what, err)
	}
	if sv.Metadata[districts.TagCluster] == "" {
		return fmt.Errorf("openstack district %q: %s: it carries no %s tag: not transit's to delete", drv.d.ID, what, districts.TagCluster)
	}
	if err := drv.releaseFloatingIPs(ctx, sv); err != nil {
		return drv.wrap(what+": release its floating IPs", err)
	}
	if sv.Status == "SOFT_DELETED" || sv.TaskState == "soft-deleting" {
		return drv.forceDelete(ctx, sv.ID, what)
	}
	if err := drv.deleteServer(ctx, sv); err != nil {
		return drv.wrap(what, err)
	}
	// Did the cloud soft-delete it?
	sv, err = drv.getServer(ctx, sv.ID)
	switch {
	case isNotFound(err):
		return nil
	case err != nil:
		return drv.wrap(what, err)
	case sv.Status == "SOFT_DELETED" || sv.TaskState == "soft-deleting":
		return drv.forceDelete(ctx, sv.ID, what)
	}
	return nil
}

// forceDelete waits until a server being soft-deleted is SOFT_DELETED,
// then force-deletes it.
func (drv *driver) forceDelete(ctx context.Context, id, what string) error {
	deadline := drv.opts.Clock.Now().Add(drv.opts.LaunchWait)
	for i := 0; ; i++ {
		sv, err := drv.getServer(ctx, id)
		switch {
		case isNotFound(err):
			return nil
		case err != nil:
			return drv.wrap(what, err)
		case sv.Status == "SOFT_DELETED" && sv.TaskState == "":
			return drv.wrap(what, drv.deleteServer(ctx, sv))
		case sv.TaskState != "soft-deleting":
			return nil // deleted meanwhile, or restored by someone: not ours to judge
		}
		if drv.opts.Clock.Now().After(deadline) {
			return fmt.Errorf("openstack district %q: %s: server %s is still being soft-deleted after %s", drv.d.ID, what, id, drv.opts.LaunchWait)
		}
		if err := drv.wait(ctx, i); err != nil {
			return err
		}
	}
}

// deleteServer deletes a server, force-deleting a SOFT_DELETED one; a
// server that is gone already is no error.
func (drv *driver) deleteServer(ctx context.Context, sv *servers.Server) error {
	err := drv.retry(ctx, func() error {
		if sv.Status == "SOFT_DELETED" {
			return servers.ForceDelete(ctx, drv.compute, sv.ID).ExtractErr()
		}
		return servers.Delete(ctx, drv.compute, sv.ID).ExtractErr()
	})
	if isNotFound(err) {
		return nil
	}
	return err
}

// releaseFloatingIPs deletes the floating IPs on the server's ports and
// those marked as its own (a lost create's): Neutron keeps them, and
// their addresses, after the server is gone.
func (drv *driver) releaseFloatingIPs(ctx context.Context, sv *servers.Server) error {
	portIDs, err := drv.portsOf(ctx, sv.ID)
	if err != nil {
		return err
	}
	opts := []floatingips.ListOpts{{Description: fipDescription(sv.Name)}}
	for _, p := range portIDs {
		opts = append(opts, floatingips.ListOpts{PortID: p})
	}
	seen := map[string]bool{}
	for _, o := range opts {
		fs, err := drv.floatingIPs(ctx, o)
		if err != nil {
			return err
		}
		for _, f := range fs {
			if seen[f.ID] {
				continue
			}
			seen[f.ID] = true
			err := drv.retry(ctx, func() error { return floatingips.Delete(ctx, drv.netw, f.ID).ExtractErr() })
			if err != nil && !isNotFound(err) {
				return err
			}
		}
	}
	return nil
}
