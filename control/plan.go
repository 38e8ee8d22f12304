package control

import (
	"github.com/cloudtransit/transit/districts"
)

// Kind is what an action does.
type Kind string

// Action kinds, in the order a round executes them.
const (
	KindCreateGroup Kind = "create-group" // + a district's security group
	KindUpdateGroup Kind = "update-group" // ~ allow the cluster's current addresses
	KindLaunch      Kind = "launch"       // + start a machine
	KindInit        Kind = "init"         // + install, make the first master, label
	KindJoin        Kind = "join"         // + install, join in its role, label
	KindLabel       Kind = "label"        // ~ set a node's labels to its tags
	KindUncordon    Kind = "uncordon"     // ~ undo an interrupted drain of a wanted node
	KindDrain       Kind = "drain"        // - move workloads away
	KindRemove      Kind = "remove"       // - leave the platform
	KindTerminate   Kind = "terminate"    // - delete the machine (asynchronous)
	KindDeleteGroup Kind = "delete-group" // - remove an empty district's group
)

// Symbol is the terraform-style mark of a kind: + adds, ~ changes, - removes.
func (k Kind) Symbol() string {
	switch k {
	case KindCreateGroup, KindLaunch, KindInit, KindJoin:
		return "+"
	case KindUpdateGroup, KindLabel, KindUncordon:
		return "~"
	default:
		return "-"
	}
}

// Action is one step of a plan: what is done to which target, and why.
type Action struct {
	Kind     Kind   `json:"kind"`
	District string `json:"district"`
	// Node is the node's id (for a launch, the id the new node will get).
	Node   string `json:"node,omitempty"`
	Role   string `json:"role,omitempty"`
	Flavor string `json:"flavor,omitempty"`
	// Group is the security group's name for group actions.
	Group  string `json:"group,omitempty"`
	Reason string `json:"reason"`
	// After lists nodes that must have joined before this action runs: a
	// removal waits for the nodes replacing it.
	After []string `json:"after,omitempty"`
}

// Plan is what one round will do. `transit plan` prints it and
// `transit apply` executes exactly it.
type Plan struct {
	Cluster string   `json:"cluster"`
	Actions []Action `json:"actions"`
	// Waiting says what the plan cannot do yet (a group whose district
	// still has machines terminating).
	Waiting []string `json:"waiting,omitempty"`
	// Notes report what observation found: adopted and forgotten nodes,
	// skipped drains.
	Notes []string `json:"notes,omitempty"`
	// Remaining counts the work between the current and the intended
	// state, including work later rounds will do (migration waves). A round
	// that does not lower it made no progress.
	Remaining int `json:"remaining"`
}

// Summary counts a plan's actions by symbol.
type Summary struct {
	Add    int `json:"add"`
	Change int `json:"change"`
	Remove int `json:"remove"`
}

// Summary counts nodes and groups added, changed and removed: a node's
// launch and join count once, as do its drain, removal and termination.
func (p Plan) Summary() Summary {
	var s Summary
	for _, a := range p.Actions {
		switch a.Kind {
		case KindCreateGroup, KindLaunch:
			s.Add++
		case KindUpdateGroup:
			// Allowing new nodes into a group the plan creates is part
			// of the creation.
			if !p.has(KindCreateGroup, a.District) {
				s.Change++
			}
		case KindLabel, KindUncordon:
			s.Change++
		case KindTerminate, KindDeleteGroup:
			s.Remove++
		case KindInit, KindJoin:
			// A join of an already-launched node is its own change.
			if !p.launches(a.Node) {
				s.Change++
			}
		case KindDrain, KindRemove:
			// Counted by the node's terminate.
		}
	}
	return s
}

func (p Plan) launches(node string) bool {
	for _, a := range p.Actions {
		if a.Kind == KindLaunch && a.Node == node {
			return true
		}
	}
	return false
}

func (p Plan) has(k Kind, district string) bool {
	for _, a := range p.Actions {
		if a.Kind == k && a.District == district {
			return true
		}
	}
	return false
}

// Empty reports whether the plan has nothing to do and nothing to wait for.
func (p Plan) Empty() bool { return len(p.Actions) == 0 && len(p.Waiting) == 0 }

// GroupName is the name of a cluster's security group in a district.
func GroupName(cluster, district string) string {
	return "transit-" + cluster + "-" + district
}

// IdentityTags are the tags that mark a node as transit's.
func IdentityTags(n districts.Node) map[string]string {
	return map[string]string{
		districts.TagCluster:  n.Cluster,
		districts.TagDistrict: n.District,
		districts.TagRole:     n.Role,
		districts.TagFlavor:   n.Flavor,
		districts.TagNode:     n.ID,
	}
}
