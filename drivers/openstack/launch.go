package openstack

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/flavors"
	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/keypairs"
	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/servers"
	"github.com/gophercloud/gophercloud/v2/openstack/image/v2/images"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/layer3/floatingips"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/networks"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/ports"
	"github.com/gophercloud/gophercloud/v2/pagination"
	"golang.org/x/crypto/ssh"

	"github.com/cloudtransit/transit/districts"
	"github.com/cloudtransit/transit/drivers/cloudutil"
	"github.com/cloudtransit/transit/provider"
)

// serverName is a node's server name: its id and a hash of cluster,
// lineage, district and node, so a create whose answer was lost is found
// by the next attempt, and another cluster's node of the same id is not.
func serverName(n districts.Node, lineage string) string {
	sum := sha256.Sum256([]byte(n.Cluster + "\x00" + lineage + "\x00" + n.District + "\x00" + n.ID))
	return n.ID + "-" + hex.EncodeToString(sum[:])[:10]
}

// fipDescription marks the floating IP of a server, so one whose create
// answer was lost is found again.
func fipDescription(server string) string { return "transit: floating IP of " + server }

// Launch starts the node's server, spread over os_zones, and returns once
// Nova reports it ACTIVE with its address (and, with os_floating_network,
// a floating IP), with the host keys its console shows.
func (drv *driver) Launch(ctx context.Context, spec provider.LaunchSpec) (provider.Instance, error) {
	n := spec.Node
	what := "launch node " + n.ID
	switch {
	case spec.MachineType == "":
		return provider.Instance{}, invalid(drv.d, "flavors: flavor %q has no os_flavor", n.Flavor)
	case spec.GroupID == "":
		return provider.Instance{}, fmt.Errorf("openstack district %q: %s: no security group to launch it in", drv.d.ID, what)
	}
	if err := drv.clients(ctx); err != nil {
		return provider.Instance{}, err
	}
	imageID, err := drv.resolveImage(ctx)
	if err != nil {
		return provider.Instance{}, err
	}
	flavorID, err := drv.resolveFlavor(ctx, spec.MachineType)
	if err != nil {
		return provider.Instance{}, err
	}
	netID, err := drv.resolveNetwork(ctx)
	if err != nil {
		return provider.Instance{}, err
	}
	if drv.d.OSFloatingNetwork != "" {
		// Before the server: a wrong key must not leave one behind.
		if _, err := drv.resolveFloatingNetwork(ctx); err != nil {
			return provider.Instance{}, err
		}
	}
	key, err := drv.keyPair(ctx, n.Cluster, spec.AuthorizedKey)
	if err != nil {
		return provider.Instance{}, err
	}
	name := serverName(n, spec.Tags[districts.TagLineage])

	sv, release, err := drv.place(ctx, n, name)
	if err != nil {
		return provider.Instance{}, drv.wrap(what, err)
	}
	if sv == nil {
		opts := servers.CreateOpts{Name: name, ImageRef: imageID, FlavorRef: flavorID,
			SecurityGroups: []string{spec.GroupID}, Metadata: spec.Tags,
			UserData: []byte(cloudutil.CloudConfig(spec.AuthorizedKey)), AvailabilityZone: n.Zone,
			Networks: []servers.Network{{UUID: netID}}}
		if z := drv.inflightZone(name); z != "" {
			opts.AvailabilityZone = z
		}
		sv, err = createOnce(ctx, drv, func() (*servers.Server, error) { return drv.serverByName(ctx, name) },
			func() (*servers.Server, error) {
				return servers.Create(ctx, drv.compute, keypairs.CreateOptsExt{CreateOptsBuilder: opts, KeyName: key}, nil).Extract()
			})
	}
	release()
	if err != nil {
		return provider.Instance{}, drv.wrap(what, err)
	}
	ready, err := drv.waitActive(ctx, sv.ID, what)
	if err != nil {
		return drv.leftBehind(ctx, sv.ID), err
	}
	inst := toInstance(*ready)
	if drv.d.OSFloatingNetwork != "" {
		if inst.PublicIP, err = drv.floatingIP(ctx, ready); err != nil {
			return provider.Instance{}, drv.wrap(what+": floating IP", err)
		}
	}
	if inst.HostKeys, err = drv.hostKeys(ctx, sv.ID); err != nil {
		return provider.Instance{}, drv.wrap(what, err)
	}
	return inst, nil
}

// createOnce makes something with create, retried as retry retries. Before
// each retry find looks for what the last attempt made although its
// answer was lost (the thing, or nil), and a thing found ends the retries:
// Nova and Neutron take no idempotency token.
func createOnce[T any](ctx context.Context, drv *driver, find, create func() (*T, error)) (*T, error) {
	var out *T
	first := true
	err := drv.retry(ctx, func() error {
		var err error
		if !first {
			if out, err = find(); err != nil || out != nil {
				return err
			}
		}
		first = false
		out, err = create()
		return err
	})
	return out, err
}

// place finds the node's server if a lost create made it, else picks the
// zone: the node's own, or the one of os_zones with the fewest of the
// cluster's servers, launches in flight included. release ends the
// launch's claim on its zone.
func (drv *driver) place(ctx context.Context, n districts.Node, name string) (*servers.Server, func(), error) {
	found, err := drv.serverByName(ctx, name)
	if err != nil || found != nil {
		return found, func() {}, err
	}
	zones := drv.d.OSZones
	if n.Zone != "" || len(zones) == 0 {
		return nil, func() {}, nil
	}
	drv.placeMu.Lock()
	defer drv.placeMu.Unlock()
	all, err := drv.listServers(ctx, "")
	if err != nil {
		return nil, func() {}, err
	}
	count, listed := map[string]int{}, map[string]bool{}
	for _, sv := range all {
		listed[sv.Name] = true
		if sv.Metadata[districts.TagCluster] == n.Cluster && !deleting(sv) {
			count[sv.AvailabilityZone]++
		}
	}
	drv.mu.Lock()
	defer drv.mu.Unlock()
	for nm, z := range drv.inflight {
		if !listed[nm] {
			count[z]++
		}
	}
	best := zones[0]
	for _, z := range zones {
		if count[z] < count[best] {
			best = z
		}
	}
	drv.inflight[name] = best
	// Released under placeMu: a placement listing meanwhile counts the
	// claim or the server, never neither.
	return nil, func() {
		drv.placeMu.Lock()
		defer drv.placeMu.Unlock()
		drv.mu.Lock()
		defer drv.mu.Unlock()
		delete(drv.inflight, name)
	}, nil
}

func (drv *driver) inflightZone(name string) string {
	drv.mu.Lock()
	defer drv.mu.Unlock()
	return drv.inflight[name]
}

// serverByName is the server of exactly that name, or nil.
func (drv *driver) serverByName(ctx context.Context, name string) (*servers.Server, error) {
	all, err := drv.listServers(ctx, "^"+regexp.QuoteMeta(name)+"$")
	if err != nil {
		return nil, err
	}
	for i := range all {
		if all[i].Name == name {
			return &all[i], nil
		}
	}
	return nil, nil
}

// listServers pages through the project's servers (name: a regular
// expression Nova matches names against).
func (drv *driver) listServers(ctx context.Context, name string) ([]servers.Server, error) {
	var out []servers.Server
	err := drv.retry(ctx, func() error {
		out = nil
		// A page that ends where an earlier one ended is a loop of next
		// links, never the listing's end: a listing cut short would say
		// servers are gone.
		ends := map[string]bool{}
		return servers.List(drv.compute, servers.ListOpts{Name: name}).EachPage(ctx, func(_ context.Context, p pagination.Page) (bool, error) {
			page, err := servers.ExtractServers(p)
			if err != nil {
				return false, err
			}
			if len(page) > 0 {
				end := page[len(page)-1].ID
				if ends[end] {
					return false, fmt.Errorf("the server list's pages repeat (server %s ends two): the listing is incomplete", end)
				}
				ends[end] = true
			}
			out = append(out, page...)
			return true, nil
		})
	})
	return out, err
}

// leftBehind is the server a failed launch leaves, as the loop must
// track it (provider.Infrastructure.Launch): empty when it is gone or
// being deleted (waitActive deletes one that went to ERROR), or cannot be
// read.
func (drv *driver) leftBehind(ctx context.Context, id string) provider.Instance {
	if ctx.Err() != nil {
		return provider.Instance{}
	}
	sv, err := servers.Get(ctx, drv.compute, id).Extract()
	if err != nil {
		return provider.Instance{}
	}
	if inst := toInstance(*sv); inst.State != provider.InstanceTerminating {
		return inst
	}
	return provider.Instance{}
}

// getServer reads a server by id, retrying what the cloud answers for its
// rate or its own failure; the error is gophercloud's, for the caller to
// wrap (isNotFound tells a missing server).
func (drv *driver) getServer(ctx context.Context, id string) (*servers.Server, error) {
	var sv *servers.Server
	err := drv.retry(ctx, func() error {
		var err error
		sv, err = servers.Get(ctx, drv.compute, id).Extract()
		return err
	})
	return sv, err
}

// waitActive polls the server until it is ACTIVE with an address. A
// server that went to ERROR (or was stopped) is deleted, and its fault
// reported.
func (drv *driver) waitActive(ctx context.Context, id, what string) (*servers.Server, error) {
	deadline := drv.opts.Clock.Now().Add(drv.opts.LaunchWait)
	for i := 0; ; i++ {
		sv, err := drv.getServer(ctx, id)
		if err != nil {
			return nil, drv.wrap(what, err)
		}
		switch st := stateOf(*sv); {
		case st == provider.InstanceFailed, st == provider.InstanceStopped:
			msg := fmt.Sprintf("server %s is %s, not ACTIVE", id, sv.Status)
			if st == provider.InstanceFailed {
				msg = fmt.Sprintf("server %s failed to build", id)
			}
			if sv.Fault.Message != "" {
				msg += ": " + sv.Fault.Message
			}
			if err := drv.deleteServer(context.WithoutCancel(ctx), sv); err != nil {
				msg += fmt.Sprintf(" (deleting it failed: %v)", drv.wrap("delete", err))
			} else {
				msg += " (deleted)"
			}
			return nil, fmt.Errorf("openstack district %q: %s: %s", drv.d.ID, what, msg)
		case st == provider.InstanceTerminating:
			return nil, fmt.Errorf("openstack district %q: %s: server %s is being deleted", drv.d.ID, what, id)
		case st == provider.InstanceRunning && fixedIP(*sv) != "":
			return sv, nil
		}
		if drv.opts.Clock.Now().After(deadline) {
			return nil, fmt.Errorf("openstack district %q: %s: server %s is still %s after %s", drv.d.ID, what, id, sv.Status, drv.opts.LaunchWait)
		}
		if err := drv.wait(ctx, i); err != nil {
			return nil, err
		}
	}
}

// floatingIP gives the server a floating IP from os_floating_network, or
// finds the one an earlier attempt gave it.
func (drv *driver) floatingIP(ctx context.Context, sv *servers.Server) (string, error) {
	if ip := addressOf(*sv, "floating"); ip != "" {
		return ip, nil
	}
	desc := fipDescription(sv.Name)
	have, err := drv.floatingIPs(ctx, floatingips.ListOpts{Description: desc})
	if err != nil {
		return "", err
	}
	portIDs, err := drv.portsOf(ctx, sv.ID)
	if err != nil {
		return "", err
	}
	if len(portIDs) == 0 {
		return "", fmt.Errorf("server %s has no port", sv.ID)
	}
	for _, f := range have {
		if slices.Contains(portIDs, f.PortID) {
			return f.FloatingIP, nil
		}
	}
	netID, err := drv.resolveFloatingNetwork(ctx)
	if err != nil {
		return "", err
	}
	made, err := createOnce(ctx, drv, func() (*floatingips.FloatingIP, error) {
		fs, err := drv.floatingIPs(ctx, floatingips.ListOpts{PortID: portIDs[0]})
		if err != nil || len(fs) == 0 {
			return nil, err
		}
		return &fs[0], nil
	}, func() (*floatingips.FloatingIP, error) {
		return floatingips.Create(ctx, drv.netw, floatingips.CreateOpts{FloatingNetworkID: netID,
			PortID: portIDs[0], Description: desc}).Extract()
	})
	if err != nil {
		return "", err
	}
	return made.FloatingIP, nil
}

// floatingIPs lists the project's floating IPs that match opts.
func (drv *driver) floatingIPs(ctx context.Context, opts floatingips.ListOpts) ([]floatingips.FloatingIP, error) {
	var out []floatingips.FloatingIP
	err := drv.retry(ctx, func() error {
		pages, err := floatingips.List(drv.netw, opts).AllPages(ctx)
		if err != nil {
			return err
		}
		out, err = floatingips.ExtractFloatingIPs(pages)
		return err
	})
	return out, err
}

// portsOf lists the ids of a server's ports.
func (drv *driver) portsOf(ctx context.Context, server string) ([]string, error) {
	var ids []string
	err := drv.retry(ctx, func() error {
		pages, err := ports.List(drv.netw, ports.ListOpts{DeviceID: server}).AllPages(ctx)
		if err != nil {
			return err
		}
		ps, err := ports.ExtractPorts(pages)
		ids = nil
		for _, p := range ps {
			ids = append(ids, p.ID)
		}
		return err
	})
	return ids, err
}

// hostKeys reads the SSH host keys cloud-init prints on the console,
// polling until they show or HostKeyWait has passed; none (nil) means the
// first key presented will be trusted. Only ctx's end is an error.
func (drv *driver) hostKeys(ctx context.Context, id string) ([]string, error) {
	return cloudutil.ConsoleHostKeys(ctx, drv.opts.Clock, drv.opts.HostKeyWait, drv.wait, func() (string, error) {
		return servers.ShowConsoleOutput(ctx, drv.compute, id, servers.ShowConsoleOutputOpts{Length: 100}).Extract()
	})
}

// resolveImage is os_image's id: an image of that name (the newest if
// several), or that id.
func (drv *driver) resolveImage(ctx context.Context) (string, error) {
	return drv.resolve("image", func() (string, error) { return drv.findImage(ctx) })
}

func (drv *driver) findImage(ctx context.Context) (string, error) {
	want := cmp.Or(drv.d.OSImage, DefaultImage)
	var found []images.Image
	err := drv.retry(ctx, func() error {
		for _, opts := range []images.ListOpts{{Name: want}, {ID: want}} {
			pages, err := images.List(drv.image, opts).AllPages(ctx)
			if err != nil {
				return err
			}
			if found, err = images.ExtractImages(pages); err != nil || len(found) > 0 {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return "", drv.wrap("find image "+want, err)
	}
	if len(found) == 0 {
		return "", invalid(drv.d, "os_image: no image named %q in region %s", want, drv.d.OSRegion)
	}
	best := found[0]
	for _, im := range found[1:] {
		if im.CreatedAt.After(best.CreatedAt) {
			best = im
		}
	}
	return best.ID, nil
}

// resolveFlavor is the id of the flavor named (or of id) machineType.
func (drv *driver) resolveFlavor(ctx context.Context, machineType string) (string, error) {
	return drv.resolve("flavor "+machineType, func() (string, error) { return drv.findFlavor(ctx, machineType) })
}

func (drv *driver) findFlavor(ctx context.Context, machineType string) (string, error) {
	var all []flavors.Flavor
	err := drv.retry(ctx, func() error {
		pages, err := flavors.ListDetail(drv.compute, nil).AllPages(ctx)
		if err != nil {
			return err
		}
		all, err = flavors.ExtractFlavors(pages)
		return err
	})
	if err != nil {
		return "", drv.wrap("find flavor "+machineType, err)
	}
	var id string
	var names []string
	for _, f := range all {
		names = append(names, f.Name)
		if f.Name == machineType || f.ID == machineType {
			id = f.ID
		}
	}
	if id == "" {
		return "", invalid(drv.d, "flavors[].os_flavor: no flavor %q in region %s (it has %s)", machineType, drv.d.OSRegion, strings.Join(names, ", "))
	}
	return id, nil
}

// resolveNetwork is os_network's id (by name or id); without os_network,
// the project's only network that is not external.
func (drv *driver) resolveNetwork(ctx context.Context) (string, error) {
	return drv.resolve("network", func() (string, error) { return drv.findNetwork(ctx, drv.d.OSNetwork, "os_network", false) })
}

// resolveFloatingNetwork is os_floating_network's id (by name or id).
func (drv *driver) resolveFloatingNetwork(ctx context.Context) (string, error) {
	return drv.resolve("floating network", func() (string, error) {
		return drv.findNetwork(ctx, drv.d.OSFloatingNetwork, "os_floating_network", true)
	})
}

// resolve returns the id found before under key, or finds it (and keeps
// it: images, flavors and networks do not move while transit runs).
func (drv *driver) resolve(key string, find func() (string, error)) (string, error) {
	drv.mu.Lock()
	id := drv.resolved[key]
	drv.mu.Unlock()
	if id != "" {
		return id, nil
	}
	id, err := find()
	if err != nil {
		return "", err
	}
	drv.mu.Lock()
	drv.resolved[key] = id
	drv.mu.Unlock()
	return id, nil
}

func (drv *driver) findNetwork(ctx context.Context, want, key string, external bool) (string, error) {
	type extNetwork struct {
		networks.Network
		External bool `json:"router:external"`
	}
	var ext []extNetwork
	err := drv.retry(ctx, func() error {
		pages, err := networks.List(drv.netw, networks.ListOpts{}).AllPages(ctx)
		if err != nil {
			return err
		}
		ext = nil
		return networks.ExtractNetworksInto(pages, &ext)
	})
	if err != nil {
		return "", drv.wrap("find the network of "+key, err)
	}
	var match, names []string
	for _, n := range ext {
		names = append(names, n.Name)
		if want != "" && (n.Name == want || n.ID == want) || want == "" && n.External == external {
			match = append(match, n.ID)
		}
	}
	switch {
	case len(match) == 1:
		return match[0], nil
	case want == "":
		return "", invalid(drv.d, "%s: missing, and region %s has %d candidate networks (%s): name one", key, drv.d.OSRegion, len(match), strings.Join(names, ", "))
	case len(match) == 0:
		return "", invalid(drv.d, "%s: no network %q in region %s (it has %s)", key, want, drv.d.OSRegion, strings.Join(names, ", "))
	}
	return "", invalid(drv.d, "%s: %d networks are named %q in region %s: use its id", key, len(match), want, drv.d.OSRegion)
}

// keyName is the Nova key pair holding the cluster's key: one name per
// public key, so a new key never meets an old pair of the same name.
func keyName(cluster string, pk ssh.PublicKey) string {
	sum := sha256.Sum256(pk.Marshal())
	return "transit-" + cluster + "-" + hex.EncodeToString(sum[:])[:8]
}

// keyPair makes sure the cluster's key pair exists and returns its name.
func (drv *driver) keyPair(ctx context.Context, cluster, key string) (string, error) {
	pk, _, _, _, err := ssh.ParseAuthorizedKey([]byte(key))
	if err != nil {
		return "", fmt.Errorf("openstack district %q: the cluster's SSH key is not an authorized_keys line: %w", drv.d.ID, err)
	}
	name := keyName(cluster, pk)
	drv.mu.Lock()
	ok := drv.keys[name]
	drv.mu.Unlock()
	if ok {
		return name, nil
	}
	drv.keyMu.Lock()
	defer drv.keyMu.Unlock()
	err = drv.retry(ctx, func() error {
		_, err := keypairs.Get(ctx, drv.compute, name, nil).Extract()
		if !isNotFound(err) {
			return err
		}
		_, err = keypairs.Create(ctx, drv.compute, keypairs.CreateOpts{Name: name,
			PublicKey: strings.TrimSpace(string(ssh.MarshalAuthorizedKey(pk)))}).Extract()
		if status(err) == 409 {
			return nil // another transit imported it meanwhile, or a lost answer did
		}
		return err
	})
	if err != nil {
		return "", drv.wrap("import key pair "+name, err)
	}
	drv.mu.Lock()
	drv.keys[name] = true
	drv.mu.Unlock()
	return name, nil
}
