package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/cloudtransit/transit/cloudsim"
)

// step is one action a run performed, from its apply --json lines.
type step struct {
	kind, district, node, role string
	start, end                 time.Time
}

func (s step) took() time.Duration { return s.end.Sub(s.start) }

// readSteps collects the finished actions of an apply or destroy --json
// stream.
func readSteps(r io.Reader) ([]step, error) {
	type action struct {
		Kind, District, Node, Role string
	}
	var line struct {
		Type    string
		Phase   string
		Time    time.Time
		Seconds float64
		Action  action
	}
	var out []step
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		text := strings.TrimSpace(sc.Text())
		if !strings.HasPrefix(text, "{") {
			continue
		}
		line = struct {
			Type    string
			Phase   string
			Time    time.Time
			Seconds float64
			Action  action
		}{}
		if err := json.Unmarshal([]byte(text), &line); err != nil {
			return nil, fmt.Errorf("apply --json line %q: %w", text, err)
		}
		if line.Type == "addons" && line.Seconds > 0 { // the finish: --json gives it no phase
			line.Action.Kind = "addons"
		} else if line.Type != "action" || line.Phase != "finish" {
			continue
		}
		took := time.Duration(line.Seconds * float64(time.Second))
		out = append(out, step{kind: line.Action.Kind, district: line.Action.District, node: line.Action.Node,
			role: line.Action.Role, start: line.Time.Add(-took), end: line.Time})
	}
	return out, sc.Err()
}

// boundModel is what the critical path needs to know besides the steps.
type boundModel struct {
	profile cloudsim.Profile
	// provider of each district ("aws", "gce", "openstack").
	provider map[string]string
	// maxUnavailable is how many removals may overlap (the strategy's
	// max_unavailable).
	maxUnavailable int
	// destroy says the run was a destroy: it ends once every machine is
	// gone, whether or not its group had to wait for it.
	destroy bool
}

// rulesApart says whether a provider's API creates a group and its rules
// in separate calls (EC2's CreateSecurityGroup, then
// AuthorizeSecurityGroupIngress; Neutron's group, then its rules): a usable
// group costs a creation and an update there, one insert on GCE.
func rulesApart(provider string) bool { return provider != "gce" }

// emptyBeforeDelete says whether a provider refuses to delete a security
// group while a machine that is still terminating uses it (EC2's
// DependencyViolation, Neutron's SecurityGroupInUse); a GCE firewall rule
// can go at once.
func emptyBeforeDelete(provider string) bool { return provider != "gce" }

// lowerBound is the length of the longest chain of steps no schedule can
// avoid, for the steps a run performed: cloud steps cost the profile's
// latency (wall time), platform steps what they cost in the run. The
// chains:
//
//   - a district's group exists with its rules before a machine is
//     launched in it (see rulesApart);
//   - a machine is launched before it is installed and joined, and its
//     address is allowed into the groups (one group update) before it
//     joins;
//   - the first master is initialised before anyone joins;
//   - the i-th removal of a role starts after the i-th new node of that
//     role joined (a node leaves only once its replacement serves), and at
//     most maxUnavailable removals overlap, whatever their roles (the
//     loop counts every cordoned node against max_unavailable);
//   - drain, leave and terminate a node in order;
//   - a node's address is revoked from the groups, every district's, only
//     after it left the platform;
//   - a group is deleted after its district's machines are removed and,
//     where the provider insists, finished terminating;
//   - a destroy ends when every machine finished terminating.
//
// Install and join are one platform step each, as the run measured them;
// the bound lets a worker's install overlap everything before its join.
func lowerBound(steps []step, m boundModel) time.Duration {
	lat := func(district string) cloudsim.Latency { return cloudsimLatency(m.profile, m.provider[district]) }
	wall := m.profile.Wall
	maxUn := max(m.maxUnavailable, 1)

	// Cloud steps first: earliest finish per group and launch.
	groupReady := map[string]time.Duration{}
	for _, s := range steps {
		if s.kind == "create-group" {
			l := lat(s.district)
			groupReady[s.district] = wall(l.GroupCreate)
			if rulesApart(m.provider[s.district]) {
				groupReady[s.district] += wall(l.GroupUpdate)
			}
		}
	}
	launched := map[string]time.Duration{} // node -> its machine runs
	for _, s := range steps {
		if s.kind == "launch" {
			launched[s.node] = groupReady[s.district] + wall(lat(s.district).Launch)
		}
	}
	// allowed: the node's address is in every group, one update later;
	// the slowest group of the districts in use decides.
	var slowestUpdate time.Duration
	for _, s := range steps {
		if s.kind == "allow" || s.kind == "update-group" {
			slowestUpdate = max(slowestUpdate, wall(lat(s.district).GroupUpdate))
		}
	}

	// A separate install step (if the run has one) may overlap the group
	// update and the wait for the master; without one, the bound lets the
	// whole join step overlap them, which is optimistic, as a bound must be.
	installed := map[string]time.Duration{}
	for _, s := range steps {
		if s.kind == "install" {
			installed[s.node] = s.took()
		}
	}
	var initDone time.Duration
	joined := map[string][]time.Duration{} // role -> join finishes
	for _, s := range steps {
		if s.kind == "init" {
			initDone = max(initDone, launched[s.node]+installed[s.node]+s.took())
			joined[s.role] = append(joined[s.role], initDone)
		}
	}
	for _, s := range steps {
		if s.kind != "join" {
			continue
		}
		ready := max(launched[s.node]+installed[s.node], launched[s.node]+slowestUpdate, initDone)
		done := ready + s.took()
		if _, ok := installed[s.node]; !ok {
			done = max(ready, launched[s.node]+s.took())
		}
		joined[s.role] = append(joined[s.role], done)
	}
	for r := range joined {
		slices.Sort(joined[r])
	}
	end := initDone
	for _, js := range joined {
		for _, j := range js {
			end = max(end, j)
		}
	}

	// Removals, in the order the run did them, per role.
	byNode := map[string]map[string]step{}
	var order []string
	for _, s := range steps {
		switch s.kind {
		case "drain", "remove", "terminate":
			if byNode[s.node] == nil {
				byNode[s.node] = map[string]step{}
				order = append(order, s.node)
			}
			byNode[s.node][s.kind] = s
		}
	}
	slices.SortStableFunc(order, func(a, b string) int { return firstStart(byNode[a]).Compare(firstStart(byNode[b])) })
	perRole := map[string]int{}        // role -> removals so far
	var removed []time.Duration        // removal finishes, in order
	gone := map[string]time.Duration{} // district -> its last machine gone
	left := map[string]time.Duration{} // district -> its last node left
	for _, node := range order {
		ss := byNode[node]
		var role, district string
		var work time.Duration
		for _, k := range []string{"drain", "remove"} {
			if s, ok := ss[k]; ok {
				role, district = s.role, s.district
				work += s.took()
			}
		}
		t, hasTerm := ss["terminate"]
		if hasTerm {
			role, district = firstNonEmpty(role, t.role), t.district
		}
		start := time.Duration(0)
		if i := perRole[role]; i < len(joined[role]) {
			start = joined[role][i]
		}
		perRole[role]++
		// The strategy's max_unavailable counts every cordoned node, of
		// any role (as the loop does): at most maxUn removals overlap.
		if i := len(removed); i >= maxUn {
			start = max(start, slices.Sorted(slices.Values(removed))[i-maxUn])
		}
		done := start + work
		removed = append(removed, done)
		left[district] = max(left[district], done)
		if hasTerm {
			gone[district] = max(gone[district], done+wall(lat(district).Terminate))
		}
		end = max(end, done)
	}
	// Every group holds every node's address: a revoke, in any district,
	// follows the last removal anywhere.
	var lastLeft time.Duration
	for _, l := range left {
		lastLeft = max(lastLeft, l)
	}
	if m.destroy {
		for _, g := range gone {
			end = max(end, g)
		}
	}
	// The mesh's peers are given again after the last removal; the
	// addons step follows every node's join and removal.
	for _, s := range steps {
		if s.kind == "mesh" {
			end = max(end, lastLeft+s.took())
		}
	}
	nodesDone := end
	for _, s := range steps {
		if s.kind == "addons" {
			end = max(end, nodesDone+s.took())
		}
	}
	for _, s := range steps {
		switch s.kind {
		case "revoke":
			end = max(end, lastLeft+wall(lat(s.district).GroupUpdate))
		case "delete-group":
			start := left[s.district]
			if emptyBeforeDelete(m.provider[s.district]) {
				start = max(start, gone[s.district])
			}
			end = max(end, start+wall(lat(s.district).GroupDelete))
		}
	}
	return end
}

func firstStart(ss map[string]step) time.Time {
	var t time.Time
	for _, s := range ss {
		if t.IsZero() || s.start.Before(t) {
			t = s.start
		}
	}
	return t
}

func firstNonEmpty(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

func cloudsimLatency(p cloudsim.Profile, provider string) cloudsim.Latency {
	switch provider {
	case "aws":
		return p.AWS
	case "gce":
		return p.GCE
	case "openstack":
		return p.OpenStack
	}
	return cloudsim.Latency{}
}
