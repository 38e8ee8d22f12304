package swarm

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/cloudtransit/transit/districts"
	"github.com/cloudtransit/transit/provider"
)

var _ provider.Demander = (*driver)(nil)

// Demand reads, in one script on one manager (demandScript), the swarm's
// nodes, services and the tasks it wants running, and says which tasks
// wait for a node (Pending) and what runs on each swarm node that is one
// of nodes (matched as Members matches them).
//
// The manager is the one an earlier call found (Members, Init, Join,
// Demand): one SSH round trip. A driver that knows none, or whose known
// managers cannot answer now (unreachable, demoted, engine down), asks
// Members first, which finds a manager among nodes' masters at once, and
// tries once more. An unreachable swarm is then Members' verdict, an
// error matching provider.ErrPlatformUnreachable; no swarm at all is
// provider.ErrNoPlatform.
func (d *driver) Demand(ctx context.Context, nodes []districts.Node) (provider.Demand, error) {
	out, m, err := d.readDemand(ctx, nodes)
	if err != nil {
		return provider.Demand{}, fmt.Errorf("read the swarm's demand: %w", err)
	}
	dem, err := parseDemand(out, nodes)
	if err != nil {
		return provider.Demand{}, fmt.Errorf("read the swarm's demand from %s: %w", m.ID, err)
	}
	return dem, nil
}

// readDemand runs demandScript on a known manager, else on the one
// Members finds.
func (d *driver) readDemand(ctx context.Context, nodes []districts.Node) (string, districts.Node, error) {
	const name = "read the swarm's nodes, services and tasks"
	if d.knowsManager() {
		out, m, err := d.runOnManager(ctx, "", name, demandScript())
		if err == nil || ctx.Err() != nil {
			return out, m, err
		}
		d.opts.Logger.DebugContext(ctx, "the known swarm managers did not answer; asking the masters", "error", err)
	}
	if _, err := d.Members(ctx, nodes); err != nil {
		return "", districts.Node{}, err
	}
	return d.runOnManager(ctx, "", name, demandScript())
}

// demandScript prints, from a manager's engine, one JSON object
// {"Nodes": [...], "Services": [...], "Tasks": [...]}: the Engine API's
// own GET /nodes, GET /services and GET /tasks of the tasks whose desired
// state is running (pending ones included), one request each over the
// engine's socket. The CLI would make one request per object inspected
// (docker node inspect, docker inspect of each task): thousands for
// thousands of tasks. curl is there: the driver's install puts it on
// every node. A node that is not a manager fails, with the engine's
// answer (HTTP 503, "This node is not a swarm manager").
func demandScript() string {
	return `set -eu
command -v curl >/dev/null 2>&1 || { echo "curl is missing: install the node again" >&2; exit 3; }
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
# get FILE PATH [CURL ARGS...]: the engine's answer to GET PATH, in $dir/FILE.
get() {
	file=$1 path=$2
	shift 2
	code=$(curl -sS -G -o "$dir/$file" -w '%{http_code}' --unix-socket /var/run/docker.sock "$@" "http://localhost$path")
	case "$code" in
	2??) ;;
	*) echo "GET $path: the docker engine answered HTTP $code: $(cat "$dir/$file")" >&2; exit 1 ;;
	esac
}
get nodes /nodes
get services /services
get tasks /tasks --data-urlencode 'filters={"desired-state":["running"]}'
printf '{"Nodes":'
cat "$dir/nodes"
printf ',"Services":'
cat "$dir/services"
printf ',"Tasks":'
cat "$dir/tasks"
printf '}\n'
`
}

// swarmState is demandScript's output: the parts of the engine's
// objects Demand reads.
type swarmState struct {
	Nodes    []swarmNode
	Services []swarmService
	Tasks    []swarmTask
}

// swarmService is the part of a service Demand reads.
type swarmService struct {
	ID   string
	Spec struct {
		Name string
		Mode struct {
			Global    *struct{}
			GlobalJob *struct{}
		}
	}
}

// global says the service runs one task on every node it may: its tasks
// go with their node.
func (s swarmService) global() bool { return s.Spec.Mode.Global != nil || s.Spec.Mode.GlobalJob != nil }

// swarmTask is the part of a task Demand reads. Its Spec is its service's
// task template as it was when the task was made: what the scheduler
// places it by, and what it reserves on its node (tasks of a service
// being updated keep the old reservations until they are replaced).
type swarmTask struct {
	ID           string
	ServiceID    string
	NodeID       string
	Slot         int
	DesiredState string
	Status       struct {
		State   string
		Message string
		Err     string
	}
	Spec struct {
		ContainerSpec *struct {
			Mounts []struct {
				Type   string
				Source string
				Target string
			}
		}
		Resources *struct {
			Reservations *struct {
				NanoCPUs    int64
				MemoryBytes int64
			}
		}
		Placement *struct {
			Constraints []string
		}
	}
}

// parseDemand reads demandScript's output and says what the swarm asks of
// nodes (swarmState.demand).
func parseDemand(out string, nodes []districts.Node) (provider.Demand, error) {
	var s swarmState
	if err := json.Unmarshal([]byte(out), &s); err != nil {
		return provider.Demand{}, fmt.Errorf("read the engine's nodes, services and tasks: %w", err)
	}
	return s.demand(nodes), nil
}

// demand is what the swarm asks of nodes:
//
//   - Pending: the tasks of non-global services that wait for a node the
//     scheduler cannot find (taskWaitsForANode), sorted by name. A global
//     service's pending task is bound to its node: a new node gets a task
//     of its own, so it asks for none.
//   - Nodes: for each of nodes that is a swarm node, in nodes' order, its
//     resources (the engine's Description.Resources: Swarm keeps nothing
//     back), its labels, whether the scheduler places tasks on it (active
//     and ready), the reservations of the global services' tasks on it
//     (Overhead: they go with the node, and a new node runs them too),
//     and the other tasks placed on it (Workloads, sorted by name).
//
// Tasks of services removed since the services were listed are left out.
func (s swarmState) demand(nodes []districts.Node) provider.Demand {
	services := make(map[string]swarmService, len(s.Services))
	for _, svc := range s.Services {
		services[svc.ID] = svc
	}
	byIdentity := map[string][]swarmNode{}
	for _, sn := range s.Nodes {
		if id := identity(sn); id != "" {
			byIdentity[id] = append(byIdentity[id], sn)
		}
	}
	var dem provider.Demand
	var swarmIDs []string // of dem.Nodes
	seen := map[string]bool{}
	for _, n := range nodes {
		sn, ok := pick(byIdentity[n.ID], n.ID, advertiseAddr(n))
		if !ok || seen[sn.ID] {
			continue
		}
		seen[sn.ID] = true
		swarmIDs = append(swarmIDs, sn.ID)
		dem.Nodes = append(dem.Nodes, provider.NodeLoad{
			Node:        n.ID,
			MilliCPU:    sn.Description.Resources.NanoCPUs / nanoPerMilli,
			MemoryBytes: sn.Description.Resources.MemoryBytes,
			Labels:      maps.Clone(sn.Spec.Labels),
			Schedulable: sn.Spec.Availability == "active" && sn.Status.State == "ready",
		})
	}
	loads := make(map[string]*provider.NodeLoad, len(swarmIDs))
	for i, id := range swarmIDs {
		loads[id] = &dem.Nodes[i]
	}
	for _, t := range s.Tasks {
		svc, ok := services[t.ServiceID]
		if !ok || t.DesiredState != "running" {
			continue
		}
		w := t.workload(svc)
		switch load := loads[t.NodeID]; {
		case t.Status.State == "pending" && !svc.global():
			if taskWaitsForANode(t) {
				dem.Pending = append(dem.Pending, w)
			}
		case load == nil:
			// On a node transit did not make, or not yet placed.
		case svc.global():
			if !taskEnded(t.Status.State) {
				load.OverheadMilliCPU += w.MilliCPU
				load.OverheadMemoryBytes += w.MemoryBytes
			}
		case taskPlaced(t.Status.State):
			w.Unmovable = t.unmovable()
			load.Workloads = append(load.Workloads, w)
		}
	}
	byName := func(a, b provider.Workload) int { return cmp.Compare(a.Name, b.Name) }
	slices.SortFunc(dem.Pending, byName)
	for i := range dem.Nodes {
		slices.SortFunc(dem.Nodes[i].Workloads, byName)
	}
	return dem
}

// nanoPerMilli is how many of the engine's NanoCPUs make a millicore.
const nanoPerMilli = 1_000_000

// workload is task t of service svc as a workload: named service.slot
// (docker's own task names begin so), or service.<task id> for a task
// with no slot (a global service's); with its reservations, a request
// rounded up to whole millicores, and its selector.
func (t swarmTask) workload(svc swarmService) provider.Workload {
	w := provider.Workload{Name: svc.Spec.Name + "." + strconv.Itoa(t.Slot), Selector: t.selector()}
	if t.Slot == 0 {
		w.Name = svc.Spec.Name + "." + t.ID
	}
	if r := t.Spec.Resources; r != nil && r.Reservations != nil {
		w.MilliCPU = (r.Reservations.NanoCPUs + nanoPerMilli - 1) / nanoPerMilli
		w.MemoryBytes = r.Reservations.MemoryBytes
	}
	return w
}

// constraints are the task's placement constraints, parsed as swarmkit
// parses them: "key==value" or "key!=value", spaces around either side
// trimmed, the first "==" taken before any "!=".
func (t swarmTask) constraints() []constraint {
	if t.Spec.Placement == nil {
		return nil
	}
	var out []constraint
	for _, c := range t.Spec.Placement.Constraints {
		if k, v, ok := strings.Cut(c, "=="); ok {
			out = append(out, constraint{key: strings.TrimSpace(k), equal: true, value: strings.TrimSpace(v)})
		} else if k, v, ok := strings.Cut(c, "!="); ok {
			out = append(out, constraint{key: strings.TrimSpace(k), value: strings.TrimSpace(v)})
		}
	}
	return out
}

// constraint is one placement constraint.
type constraint struct {
	key   string
	equal bool // == (else !=)
	value string
}

// nodeLabelPrefix begins a constraint on a node label; swarmkit matches
// it in any case (the label's key is case-sensitive).
const nodeLabelPrefix = "node.labels."

// label is the node label key a constraint names, "" when it names none.
func (c constraint) label() string {
	if len(c.key) > len(nodeLabelPrefix) && strings.EqualFold(c.key[:len(nodeLabelPrefix)], nodeLabelPrefix) {
		return c.key[len(nodeLabelPrefix):]
	}
	return ""
}

// selector are the node labels the task requires: its constraints
// node.labels.KEY==VALUE (nil when none). The others are left out, for a
// selector says only "this label has this value": != (a label that must
// not have a value), node.role, node.platform.*, node.id, node.hostname,
// node.ip (facts of one node, not labels a new node could be given) and
// engine.labels.* (the engine's, not the node's labels transit sets).
// Swarm compares a label's value in any case; the selector keeps it as
// written.
func (t swarmTask) selector() map[string]string {
	var sel map[string]string
	for _, c := range t.constraints() {
		if k := c.label(); k != "" && c.equal {
			if sel == nil {
				sel = map[string]string{}
			}
			sel[k] = c.value
		}
	}
	return sel
}

// unmovable says why running task t would not run on another node if its
// node went, "" when it would (the orchestrator makes its service's task
// again elsewhere): it mounts a volume or a bind mount, whose data stay
// on the node; or it is pinned to its node (pin).
func (t swarmTask) unmovable() string {
	if c := t.Spec.ContainerSpec; c != nil {
		for _, m := range c.Mounts {
			if m.Type == "volume" || m.Type == "bind" {
				return fmt.Sprintf("keeps data on the node (%s mount at %s)", m.Type, m.Target)
			}
		}
	}
	if pin := t.pin(); pin != "" {
		return "pinned to the node (constraint " + pin + ")"
	}
	return ""
}

// pin is the first of t's constraints that only one node satisfies
// (node.id, node.hostname or node.ip equal to one address, or transit's
// identity label equal to a node id), "" when there is none: no other
// node, and no new one, could run the task.
func (t swarmTask) pin() string {
	for _, c := range t.constraints() {
		if !c.equal {
			continue
		}
		pinned := c.label() == labelNode
		switch strings.ToLower(c.key) {
		case "node.id", "node.hostname":
			pinned = true
		case "node.ip":
			_, err := netip.ParseAddr(c.value)
			pinned = err == nil // not a subnet
		}
		if pinned {
			return c.key + "==" + c.value
		}
	}
	return ""
}

// taskWaitsForANode says the scheduler found no node for pending task t
// and a new node could be one: t is not pinned to one node (pin), and
// its error says why no node would do. Its error is "no suitable node (REASON on
// N nodes; ...)", one reason for the nodes each filter turned down:
// unavailable (drained, paused or down), insufficient resources,
// scheduling constraints not satisfied, host-mode port already in use,
// max replicas per node. A new node, active, empty and with the labels a
// deployment gives, could cure any of these, and the decider judges
// which deployment fits (its resources, its labels against the task's
// selector). A task whose every node was turned down for a reason a new
// node would share is left out: a missing plugin, an unsupported
// platform (the image's), a CSI volume it cannot mount.
func taskWaitsForANode(t swarmTask) bool {
	if t.pin() != "" {
		return false
	}
	msg := t.Status.Err
	if msg == "" {
		msg = t.Status.Message
	}
	rest, ok := strings.CutPrefix(msg, "no suitable node")
	if !ok {
		return false
	}
	rest = strings.TrimSpace(rest)
	rest = strings.TrimSuffix(strings.TrimPrefix(rest, "("), ")")
	if strings.TrimSpace(rest) == "" {
		return true // no node at all
	}
	for reason := range strings.SplitSeq(rest, ";") {
		if !slices.ContainsFunc(incurable, func(s string) bool { return strings.Contains(reason, s) }) {
			return true
		}
	}
	return false
}

// incurable are the scheduler's reasons for turning a node down that a
// new node of the cluster would share.
var incurable = []string{"missing plugin", "unsupported platform", "CSI volume"}

// taskPlaced says a task in state is placed on its node and holds its
// reservation there: assigned to it and not ended.
func taskPlaced(state string) bool {
	switch state {
	case "assigned", "accepted", "preparing", "ready", "starting", "running":
		return true
	}
	return false
}

// taskEnded says a task in state runs no more (or never will).
func taskEnded(state string) bool {
	switch state {
	case "complete", "shutdown", "failed", "rejected", "remove", "orphaned":
		return true
	}
	return false
}
