package control

import "slices"

// Kind is what an action does.
type Kind string

// Action kinds.
const (
	KindCreateGroup Kind = "create-group" // + a district's security group
	KindUpdateGroup Kind = "update-group" // ~ allow exactly the cluster's current addresses
	KindLaunch      Kind = "launch"       // + start a machine
	KindInstall     Kind = "install"      // + install the platform's software on a new machine, while the groups change
	KindAllow       Kind = "allow"        // ~ let new nodes' addresses into a group before they join
	KindInit        Kind = "init"         // + install, make the first master
	KindJoin        Kind = "join"         // + install, join in its role (or fix the role), label
	KindLabel       Kind = "label"        // ~ set a node's labels to its tags
	KindUncordon    Kind = "uncordon"     // ~ undo transit's own interrupted drain of a wanted node
	KindForget      Kind = "forget"       // - remove a member whose machine is gone from the platform
	KindDrain       Kind = "drain"        // - move workloads away
	KindRemove      Kind = "remove"       // - leave the platform
	KindTerminate   Kind = "terminate"    // - delete the machine (asynchronous)
	KindRevoke      Kind = "revoke"       // ~ drop removed nodes' addresses from a group
	KindDeleteGroup Kind = "delete-group" // - remove an empty district's group
	// KindMesh gives every node its mesh peers (mesh.go); a join gives
	// them first on its own.
	KindMesh Kind = "mesh" // ~ make every node's mesh peers the live nodes
	// KindRotateKey gives a node a new mesh key (rotate.go).
	KindRotateKey Kind = "rotate-key" // ~ a node's new mesh key, then every node's peers
)

// Stage is when in a round an action runs. A round runs its stages in
// this order, each stage's actions together (bounded by --parallel,
// max_unavailable, or one at a time for masters): the order is a property
// of the kinds, not of where an action sits in the plan.
type Stage int

// Stages, in execution order.
const (
	StageGroups Stage = iota // create-group, update-group
	StageLaunch              // launch, each new machine's install as soon as it runs
	StageAllow               // allow
	StageInit                // init (alone)
	StageJoin                // join
	StageChange              // label, uncordon
	StageForget              // forget (one at a time, quorum checked)
	StageRemove              // drain → remove → terminate, one chain per node
	StageNarrow              // revoke, delete-group, mesh: each group on its own, at once
	StageRotate              // rotate-key, one node at a time
)

// Stage is the stage kind k runs in.
func (k Kind) Stage() Stage {
	switch k {
	case KindCreateGroup, KindUpdateGroup:
		return StageGroups
	case KindLaunch, KindInstall:
		return StageLaunch
	case KindAllow:
		return StageAllow
	case KindInit:
		return StageInit
	case KindJoin:
		return StageJoin
	case KindLabel, KindUncordon:
		return StageChange
	case KindForget:
		return StageForget
	case KindDrain, KindRemove, KindTerminate:
		return StageRemove
	case KindRotateKey:
		return StageRotate
	}
	return StageNarrow
}

// Symbol is the terraform-style mark of a kind: + adds, ~ changes, - removes.
func (k Kind) Symbol() string {
	switch k {
	case KindCreateGroup, KindLaunch, KindInstall, KindInit, KindJoin:
		return "+"
	case KindUpdateGroup, KindAllow, KindRevoke, KindLabel, KindUncordon, KindMesh, KindRotateKey:
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
	// After lists nodes this action waits for within the round: joins
	// wait for the node that initialises the platform.
	After []string `json:"after,omitempty"`
	// KeepReady, on the drain of a ready member, is how many other
	// members of its role must stay ready: the drain starts only once the
	// platform reports that many (not counting nodes this round removes),
	// waiting for the role's joins of the same round; otherwise the node
	// stays until a later round.
	KeepReady int `json:"keep_ready,omitempty"`
	// Widen, on a group change, keeps every address the group allows and
	// adds the cluster's: while the platform does not confirm that the
	// machines the listings lack are gone, groups only widen.
	Widen bool `json:"widen,omitempty"`
	// Hourly, on a launch or a termination, is what the machine adds to
	// (or, negative, takes from) the cluster's hourly cost; nil when its
	// flavor has no price in its district.
	Hourly *float64 `json:"hourly,omitempty"`
}

// SameActions says two plans' actions are the same, in the same order: a
// plan read back from a file (an empty list and none alike) is the plan
// that was written.
func SameActions(a, b []Action) bool {
	return slices.EqualFunc(a, b, func(x, y Action) bool {
		return x.Kind == y.Kind && x.District == y.District && x.Node == y.Node && x.Role == y.Role && x.Flavor == y.Flavor &&
			x.Group == y.Group && x.Reason == y.Reason && slices.Equal(x.After, y.After) && x.KeepReady == y.KeepReady && x.Widen == y.Widen
	})
}

// Plan is what one round will do. `transit plan` prints it and
// `transit apply` executes exactly it.
type Plan struct {
	Cluster string   `json:"cluster"`
	Actions []Action `json:"actions"`
	// Waiting says what only time fixes and the loop waits for: machines
	// still terminating before their group goes, new members becoming
	// ready before the nodes they replace leave.
	Waiting []string `json:"waiting,omitempty"`
	// Blocked says what differs from cluster.json but will not be done,
	// and why (the platform is unreachable, launches back off after
	// failures): an apply ends not converged.
	Blocked []string `json:"blocked,omitempty"`
	// Warnings report what the loop does not fix and does not wait for
	// (members not ready since before the run, foreign resources).
	Warnings []string `json:"warnings,omitempty"`
	// Notes report what observation found: adopted and forgotten nodes.
	Notes []string `json:"notes,omitempty"`
	// Cost is what the cluster costs now and after the change (cost.go);
	// nil when nothing is priced and no budget set.
	Cost *Cost `json:"cost,omitempty"`
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
		case KindAllow:
			// Allowing new nodes into a group the plan creates is part
			// of the creation.
			if !p.has(KindCreateGroup, a.District) {
				s.Change++
			}
		case KindUpdateGroup, KindRevoke, KindLabel, KindUncordon, KindMesh, KindRotateKey:
			s.Change++
		case KindTerminate, KindDeleteGroup, KindForget:
			s.Remove++
		case KindInit, KindJoin:
			// A join of an already-launched node is its own change.
			if !p.launches(a.Node) {
				s.Change++
			}
		case KindInstall:
			// Part of the launch.
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

// Empty reports whether the plan has nothing to do, nothing to wait for
// and nothing it cannot do: the cluster matches cluster.json.
func (p Plan) Empty() bool { return len(p.Actions) == 0 && len(p.Waiting) == 0 && len(p.Blocked) == 0 }
