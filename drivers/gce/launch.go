package gce

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/protobuf/proto"

	"github.com/cloudtransit/transit/districts"
	"github.com/cloudtransit/transit/provider"
	"github.com/cloudtransit/transit/shellquote"
)

var notName = regexp.MustCompile(`[^a-z0-9-]+`)

// instanceName is the node's instance name: readable (the node id) and
// unique per cluster lineage, district and node, so a create whose answer
// was lost, repeated by the next run, finds the instance it made (in any
// zone) instead of making a second one. transit never reuses a node id
// within a lineage.
func instanceName(n districts.Node, lineage string) string {
	sum := sha256.Sum256([]byte(n.Cluster + "\x00" + lineage + "\x00" + n.District + "\x00" + n.ID))
	base := strings.Trim(notName.ReplaceAllString(strings.ToLower(n.ID), "-"), "-")
	if len(base) > 50 {
		base = strings.TrimRight(base[:50], "-")
	}
	if base == "" || base[0] < 'a' || base[0] > 'z' {
		base = "n" + base
	}
	return base + "-" + hex.EncodeToString(sum[:])[:10]
}

// newRequestID is the requestId of one create, change or delete (a
// random UUID): the client's retries of it send the same one, so a retry
// whose first answer was lost gets the first one's operation. A later
// call gets a new one: a failed operation is not answered again.
func newRequestID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	b[6], b[8] = b[6]&0x0f|0x40, b[8]&0x3f|0x80
	h := hex.EncodeToString(b)
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}

// startupScript lets root in with the cluster's key: transit installs the
// platform over SSH as root, and Compute Engine's images refuse root
// unless told otherwise. The platform step retries a refused key while
// this runs.
func startupScript(authorizedKey string) string {
	k := shellquote.Quote(strings.TrimSpace(authorizedKey))
	return "#!/bin/sh\n" +
		"# transit: root logs in with the cluster's SSH key.\n" +
		"install -d -m 700 /root/.ssh\n" +
		"grep -qxF " + k + " /root/.ssh/authorized_keys 2>/dev/null || echo " + k + " >> /root/.ssh/authorized_keys\n" +
		"sed -i 's/^#\\?PermitRootLogin.*/PermitRootLogin prohibit-password/' /etc/ssh/sshd_config && (systemctl reload ssh || systemctl reload sshd) || true\n"
}

// sourceImage is the link of the district's image: gce_image (a name in
// gce_image_project, default the district's project, or a URL), else the
// newest image of gce_image_family (default debian-12) in
// gce_image_project (default debian-cloud), resolved once.
func (drv *driver) sourceImage(ctx context.Context) (string, error) {
	drv.mu.Lock()
	defer drv.mu.Unlock()
	if drv.image != "" {
		return drv.image, nil
	}
	d := drv.d
	if d.GCEImage != "" {
		if strings.Contains(d.GCEImage, "/") {
			drv.image = d.GCEImage
		} else {
			project := d.GCEImageProject
			if project == "" {
				project = d.GCEProjectID
			}
			drv.image = "projects/" + project + "/global/images/" + d.GCEImage
		}
		return drv.image, nil
	}
	family, project := d.GCEImageFamily, d.GCEImageProject
	if family == "" {
		family = DefaultImageFamily
	}
	if project == "" {
		project = DefaultImageProject
	}
	im, err := drv.images.GetFromFamily(ctx, &computepb.GetFromFamilyImageRequest{Project: project, Family: family}, drv.retry())
	if err != nil {
		return "", drv.wrap(fmt.Sprintf("find the newest image of family %s in project %s", family, project), err)
	}
	drv.image = "projects/" + project + "/global/images/" + im.GetName()
	return drv.image, nil
}

// Launch starts the node's instance, spread over the district's zones,
// and returns once Compute Engine reports it running with its addresses,
// with the SSH host keys the guest agent publishes (if it does within
// HostKeyWait).
func (drv *driver) Launch(ctx context.Context, spec provider.LaunchSpec) (provider.Instance, error) {
	n := spec.Node
	what := "launch node " + n.ID
	switch {
	case spec.MachineType == "":
		return provider.Instance{}, invalid(drv.d, "flavors: flavor %q has no machine_type", n.Flavor)
	case spec.GroupID == "":
		return provider.Instance{}, fmt.Errorf("gce district %q: %s: no firewall rule to launch it under", drv.d.ID, what)
	}
	labels, err := encodeLabels(spec.Tags)
	if err != nil {
		return provider.Instance{}, invalid(drv.d, "%s: %v", what, err)
	}
	image, err := drv.sourceImage(ctx)
	if err != nil {
		return provider.Instance{}, err
	}
	name := instanceName(n, spec.Tags[districts.TagLineage])
	found, zone, done, err := drv.place(ctx, n, name)
	if err != nil {
		return provider.Instance{}, err
	}
	defer done()
	if found == nil {
		what := fmt.Sprintf("%s in %s", what, zone)
		in := &computepb.Instance{
			Name:        proto.String(name),
			MachineType: proto.String("zones/" + zone + "/machineTypes/" + spec.MachineType),
			Labels:      labels,
			Tags:        &computepb.Tags{Items: []string{spec.GroupID}},
			Metadata: &computepb.Metadata{Items: []*computepb.Items{
				{Key: proto.String("ssh-keys"), Value: proto.String("root:" + strings.TrimSpace(spec.AuthorizedKey))},
				{Key: proto.String("enable-guest-attributes"), Value: proto.String("TRUE")},
				{Key: proto.String("startup-script"), Value: proto.String(startupScript(spec.AuthorizedKey))},
			}},
			Disks: []*computepb.AttachedDisk{{
				Boot: proto.Bool(true), AutoDelete: proto.Bool(true),
				InitializeParams: &computepb.AttachedDiskInitializeParams{SourceImage: proto.String(image), Labels: labels},
			}},
			NetworkInterfaces: []*computepb.NetworkInterface{{
				Network: proto.String("global/networks/" + drv.network),
				// Nodes in other clouds reach this one by its public
				// address.
				AccessConfigs: []*computepb.AccessConfig{{Type: proto.String("ONE_TO_ONE_NAT"), Name: proto.String("External NAT")}},
			}},
		}
		op, err := drv.instances.Insert(ctx, &computepb.InsertInstanceRequest{
			Project: drv.d.GCEProjectID, Zone: zone, InstanceResource: in,
			RequestId: proto.String(newRequestID()),
		}, drv.retry())
		switch {
		case isConflict(err):
			// Made by an earlier attempt that the listing did not show.
		case err != nil:
			return provider.Instance{}, drv.wrap(what, err)
		default:
			if err := drv.waitZoneOp(ctx, zone, op.Proto(), what); err != nil {
				return drv.leftBehind(ctx, zone, name), err
			}
		}
	} else {
		zone = found.zone
		if stateOf(found.status) == provider.InstanceStopped {
			return provider.Instance{}, fmt.Errorf("gce district %q: %s: it was launched before as %s/%s, which is %s now (node ids are never reused)",
				drv.d.ID, what, zone, name, strings.ToLower(found.status))
		}
	}
	running, err := drv.waitRunning(ctx, zone, name, what)
	if err != nil {
		return drv.leftBehind(ctx, zone, name), err
	}
	out := drv.toInstance(running)
	if out.HostKeys, err = drv.hostKeys(ctx, zone, name); err != nil {
		return provider.Instance{}, fmt.Errorf("gce district %q: %s: read the host keys of %s/%s: %w", drv.d.ID, what, zone, name, err)
	}
	return out, nil
}

// leftBehind is the instance a failed launch leaves, as the loop must
// track it (provider.Infrastructure.Launch): empty when it is gone, or
// cannot be read.
func (drv *driver) leftBehind(ctx context.Context, zone, name string) provider.Instance {
	if ctx.Err() != nil {
		return provider.Instance{}
	}
	in, err := drv.instances.Get(ctx, &computepb.GetInstanceRequest{Project: drv.d.GCEProjectID, Zone: zone, Instance: name}, drv.retry())
	if err != nil {
		return provider.Instance{}
	}
	return drv.toInstance(in)
}

type foundInstance struct{ zone, status string }

// place finds the node's instance if a launch made it already (by its
// name, in any zone), or picks the zone to launch it in: Node.Zone if
// set, else the district's zone with the fewest of the cluster's live
// instances, counting the launches in flight that the listing does not
// show yet. done ends the launch's flight.
func (drv *driver) place(ctx context.Context, n districts.Node, name string) (*foundInstance, string, func(), error) {
	drv.placeMu.Lock()
	defer drv.placeMu.Unlock()
	insts, err := drv.listInstances(ctx, n.Cluster)
	if err != nil {
		return nil, "", nil, drv.wrap("launch node "+n.ID, err)
	}
	counts := map[string]int{}
	listed := map[string]bool{}
	for _, in := range insts {
		zone := last(in.GetZone())
		if in.GetName() == name {
			return &foundInstance{zone: zone, status: in.GetStatus()}, zone, func() {}, nil
		}
		listed[in.GetName()] = true
		if st := in.GetStatus(); st != "STOPPING" && st != "TERMINATED" {
			counts[zone]++
		}
	}
	candidates := drv.d.GCEZones
	if n.Zone != "" {
		if !slices.Contains(drv.d.GCEZones, n.Zone) {
			return nil, "", nil, invalid(drv.d, "node %s is to go to zone %s, which is not in gce_zones %v", n.ID, n.Zone, drv.d.GCEZones)
		}
		candidates = []string{n.Zone}
	}
	for nm, z := range drv.inflight {
		if !listed[nm] {
			counts[z]++
		}
	}
	best := candidates[0]
	for _, z := range candidates {
		if counts[z] < counts[best] {
			best = z
		}
	}
	drv.inflight[name] = best
	done := func() {
		drv.placeMu.Lock()
		defer drv.placeMu.Unlock()
		delete(drv.inflight, name)
	}
	return nil, best, done, nil
}

// last is the last segment of a URL.
func last(s string) string { return s[strings.LastIndexByte(s, '/')+1:] }

// waitZoneOp waits until a zonal operation is done and returns its error.
func (drv *driver) waitZoneOp(ctx context.Context, zone string, op *computepb.Operation, what string) error {
	deadline := drv.opts.Clock.Now().Add(drv.opts.LaunchWait)
	notDone := func() error {
		return fmt.Errorf("gce district %q: %s: operation %s not done after %s", drv.d.ID, what, op.GetName(), drv.opts.LaunchWait)
	}
	for op.GetStatus() != computepb.Operation_DONE {
		if drv.opts.Clock.Now().After(deadline) {
			return notDone()
		}
		// Wait blocks up to two minutes on the server: no longer than
		// what is left of LaunchWait.
		wctx, cancel := context.WithTimeout(ctx, max(deadline.Sub(drv.opts.Clock.Now()), time.Millisecond))
		next, err := drv.zoneOps.Wait(wctx, &computepb.WaitZoneOperationRequest{Project: drv.d.GCEProjectID, Zone: zone, Operation: op.GetName()}, drv.retry())
		cancel()
		switch {
		case err != nil && ctx.Err() == nil && wctx.Err() != nil:
			return notDone()
		case err != nil:
			return drv.wrap(what, err)
		}
		op = next
	}
	return drv.opError(op, what)
}

// waitGlobalOp waits until a global operation is done and returns its
// error.
func (drv *driver) waitGlobalOp(ctx context.Context, op *computepb.Operation, what string) error {
	deadline := drv.opts.Clock.Now().Add(drv.opts.GroupWait)
	for op.GetStatus() != computepb.Operation_DONE {
		if drv.opts.Clock.Now().After(deadline) {
			return fmt.Errorf("gce district %q: %s: operation %s not done after %s", drv.d.ID, what, op.GetName(), drv.opts.GroupWait)
		}
		next, err := drv.globalOps.Wait(ctx, &computepb.WaitGlobalOperationRequest{Project: drv.d.GCEProjectID, Operation: op.GetName()}, drv.retry())
		if err != nil {
			return drv.wrap(what, err)
		}
		op = next
	}
	return drv.opError(op, what)
}

// opError maps a done operation's error.
func (drv *driver) opError(op *computepb.Operation, what string) error {
	errs := op.GetError().GetErrors()
	if len(errs) == 0 {
		return nil
	}
	e := errs[0]
	prefix := fmt.Sprintf("gce district %q: %s", drv.d.ID, what)
	msg := fmt.Sprintf("%s: operation %s failed: %s: %s", prefix, op.GetName(), e.GetCode(), e.GetMessage())
	switch {
	case strings.Contains(e.GetCode(), "QUOTA"):
		return &cloudError{Kind: provider.ErrQuota, Msg: fmt.Sprintf("%s: quota %s exceeded in %s: %s", prefix, quotaOf(e.GetMessage()), drv.d.GCERegion, e.GetMessage())}
	case e.GetCode() == "RESOURCE_NOT_FOUND" && strings.Contains(e.GetMessage(), "/images/"):
		return &cloudError{Kind: districts.ErrInvalid, Msg: msg}
	}
	return &cloudError{Msg: msg}
}

// waitRunning polls the instance until Compute Engine reports it running
// with its internal and external address.
func (drv *driver) waitRunning(ctx context.Context, zone, name, what string) (*computepb.Instance, error) {
	deadline := drv.opts.Clock.Now().Add(drv.opts.LaunchWait)
	var status string
	for i := 0; ; i++ {
		in, err := drv.instances.Get(ctx, &computepb.GetInstanceRequest{Project: drv.d.GCEProjectID, Zone: zone, Instance: name}, drv.retry())
		switch {
		case err != nil && !isNotFound(err):
			return nil, drv.wrap(what, err)
		case err != nil:
			// A create whose operation failed leaves nothing.
			return nil, fmt.Errorf("gce district %q: %s: instance %s/%s is gone", drv.d.ID, what, zone, name)
		}
		status = in.GetStatus()
		switch stateOf(status) {
		case provider.InstanceRunning:
			if pub, priv := addresses(in); pub != "" && priv != "" {
				return in, nil
			}
		case provider.InstanceStopped:
			// Compute Engine stopped it (a host failure) or someone did:
			// the launch failed, and the instance is no node.
			msg := fmt.Sprintf("instance %s/%s is %s, not running", zone, name, strings.ToLower(status))
			if m := in.GetStatusMessage(); m != "" {
				msg += ": " + m
			}
			_, derr := drv.instances.Delete(context.WithoutCancel(ctx), &computepb.DeleteInstanceRequest{Project: drv.d.GCEProjectID,
				Zone: zone, Instance: name, RequestId: proto.String(newRequestID())}, drv.retry())
			if derr != nil && !isNotFound(derr) {
				msg += fmt.Sprintf(" (deleting it failed: %v)", drv.wrap("delete", derr))
			} else {
				msg += " (deleted)"
			}
			return nil, fmt.Errorf("gce district %q: %s: %s", drv.d.ID, what, msg)
		}
		if drv.opts.Clock.Now().After(deadline) {
			return nil, fmt.Errorf("gce district %q: %s: instance %s/%s still %s after %s", drv.d.ID, what, zone, name, strings.ToLower(status), drv.opts.LaunchWait)
		}
		if err := drv.wait(ctx, i); err != nil {
			return nil, err
		}
	}
}

// hostKeys reads the SSH host keys the guest agent publishes as guest
// attributes (hostkeys/), waiting up to HostKeyWait; none then means the
// first key presented is trusted.
func (drv *driver) hostKeys(ctx context.Context, zone, name string) ([]string, error) {
	deadline := drv.opts.Clock.Now().Add(drv.opts.HostKeyWait)
	for i := 0; ; i++ {
		ga, err := drv.instances.GetGuestAttributes(ctx, &computepb.GetGuestAttributesInstanceRequest{
			Project: drv.d.GCEProjectID, Zone: zone, Instance: name, QueryPath: proto.String("hostkeys/")}, drv.retry())
		switch {
		case err == nil:
			var keys []string
			for _, it := range ga.GetQueryValue().GetItems() {
				if it.GetNamespace() == "hostkeys" && it.GetKey() != "" && it.GetValue() != "" {
					keys = append(keys, it.GetKey()+" "+it.GetValue())
				}
			}
			if len(keys) > 0 {
				return keys, nil
			}
		case !isNotFound(err):
			return nil, drv.wrap("read guest attributes", err)
		}
		if drv.opts.Clock.Now().After(deadline) {
			return nil, nil
		}
		if err := drv.wait(ctx, i); err != nil {
			return nil, err
		}
	}
}
