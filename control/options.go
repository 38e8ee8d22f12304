package control

import (
	"errors"
	"log/slog"
	"time"

	"github.com/cloudtransit/transit/clock"
	"github.com/cloudtransit/transit/districts"
	"github.com/cloudtransit/transit/provider"
)

// Options configure a run of the control loop.
type Options struct {
	Cluster   districts.Cluster
	Districts []districts.District
	// Infra holds one driver per district id named in Districts.
	Infra map[string]provider.Infrastructure
	// Prices price the plan MakePlan makes (cost.go); the zero table
	// prices nothing.
	Prices districts.PriceTable
	// Platform is nil only for work that never asks it (plan without
	// refresh, destroy).
	Platform provider.Platform
	// Destroy tears the whole cluster down: every machine is terminated
	// without asking the platform (it goes away too) and every group
	// deleted. transit destroy sets it.
	Destroy bool
	// AllowDestroy lets an apply whose cluster.json wants no node at all
	// remove the last master. Without it such an apply is refused
	// (ErrWouldDestroy): one bad write of cluster.json must not wipe a
	// platform.
	AllowDestroy bool
	// RebuildPlatform lets the loop initialise a new platform over nodes
	// whose platform formed once and is now lost (every master gone).
	// Without it the run stops not converged.
	RebuildPlatform bool
	// ForgetMissing believes listings that lack machines transit expects
	// (every machine a district had, or one this run launched): they are
	// forgotten and replaced. Without it such a listing is not acted on:
	// the run waits for the clouds to show them, then stops not converged
	// naming them (ErrMissingMachines), since a region, project or
	// credential that changed, or an API that answers an empty page, must
	// not start a second platform.
	ForgetMissing bool
	// RotateKeys are nodes whose mesh keys rotate in this run whatever
	// their age (transit mesh rotate); RotateAllKeys rotates every
	// node's. A node named that is not in the cluster is an error.
	RotateKeys    []string
	RotateAllKeys bool
	// State is the last saved resources.json (may be empty).
	State districts.Resources
	// Fence, when set, is asked before every action: an error (the
	// state lock is no longer this run's) stops the run before it acts.
	Fence func() error
	// Save persists state; the loop calls it after every action.
	Save func(districts.Resources) error
	// SaveChanged, when set, is called instead of Save with what changed
	// since the save before (state.Journal writes only that).
	SaveChanged func(districts.Resources, Changed) error
	// AuthorizedKey is the cluster's SSH public key (authorized_keys
	// format), given to every machine launched.
	AuthorizedKey string
	// Parallel bounds concurrent launches and joins (default 10).
	Parallel int
	// MaxRounds bounds the rounds of one apply (default 50).
	MaxRounds int
	// WaitTimeout bounds how long the loop waits for what only time fixes
	// (machines still terminating, nodes not yet ready) once nothing else
	// is left to do (default 10m); it re-observes every PollInterval
	// (default 2s).
	WaitTimeout  time.Duration
	PollInterval time.Duration
	// Clock tells time and sleeps; tests inject a fake one.
	Clock clock.Clock
	// NewLineage makes a cluster's lineage id at its first apply; default
	// 16 random hex digits.
	NewLineage func() string
	// Confirmed, when set, is the plan a person approved: the first round
	// runs only if it would do exactly these actions, so what was shown is
	// what is done. Otherwise Apply returns ErrStalePlan.
	Confirmed *Plan
	// OnEvent receives progress events; it must not block for long.
	OnEvent func(Event)
	Logger  *slog.Logger
}

// Event reports progress: rounds, plans, and every action's start and
// finish. `transit apply --json` prints them one per line.
type Event struct {
	Time   time.Time `json:"time"`
	Type   string    `json:"type"`  // "round", "plan", "action", "wait", "addons", "result"
	Phase  string    `json:"phase"` // "start", "finish", "skip"
	Round  int       `json:"round"`
	Action *Action   `json:"action,omitempty"`
	Plan   *Plan     `json:"plan,omitempty"`
	// Error is set on a failed or skipped action.
	Error   string  `json:"error,omitempty"`
	Seconds float64 `json:"seconds,omitempty"`
	Message string  `json:"message,omitempty"`
	Result  *Result `json:"result,omitempty"`
	// Changed is what the addons step changed.
	Changed []string `json:"changed,omitempty"`
}

// Event types.
const (
	EventRound  = "round"
	EventPlan   = "plan"
	EventAction = "action"
	EventWait   = "wait"
	EventResult = "result"
	// EventAddons is the addons step, once the nodes converged: Message
	// lists what changed, Error why it failed.
	EventAddons = "addons"
)

// Event phases.
const (
	PhaseStart  = "start"
	PhaseFinish = "finish"
	PhaseSkip   = "skip"
)

// Result is the outcome of an apply.
type Result struct {
	Converged bool `json:"converged"`
	Rounds    int  `json:"rounds"`
	// Problems say why the loop did not converge: which node, what failed.
	Problems []string `json:"problems,omitempty"`
	// Warnings are what a converged run still reports: members the
	// platform calls not ready (not waited on, not replaced unless
	// strategy.replace_unhealthy_after says so), deployments that stopped
	// relaunching, foreign resources.
	Warnings []string `json:"warnings,omitempty"`
	// Left lists the actions an interrupted round did not finish.
	Left []string `json:"left,omitempty"`
}

// ErrStalePlan says the clouds or the platform changed between showing a
// plan and applying it; nothing was done.
var ErrStalePlan = errors.New("the plan is stale: the cluster changed since it was shown; run apply again to see the new plan")

// ErrWouldDestroy refuses an apply whose cluster.json wants no node while
// the cluster has some.
var ErrWouldDestroy = errors.New("cluster.json wants no node at all: apply never removes a cluster's last master; run `transit destroy` to tear the cluster down, or pass --allow-destroy")

// ErrPlatformLost says the platform formed once and no master serves it
// now; rebuilding it needs Options.RebuildPlatform.
var ErrPlatformLost = errors.New("platform lost")

// ErrForeign says the clouds hold resources of the cluster's name from
// another lineage, and transit cannot tell which cluster is this one.
var ErrForeign = errors.New("foreign resources")

// ErrMissingMachines says the clouds' listings lack machines that must be
// there, and nothing confirms they are gone; the run did not act on them.
var ErrMissingMachines = errors.New("machines missing from the listing")

// ErrSpendGuard says a run was about to launch more machines than the
// intended state lacked at its start plus max_surge.
var ErrSpendGuard = errors.New("spend guard")

// ErrUnknownNode says a node a run was asked to act on (RotateKeys) is
// not one of the cluster's.
var ErrUnknownNode = errors.New("unknown node")

// ErrNoMesh says a run was asked to act on the node mesh (RotateKeys) of
// a cluster that runs none.
var ErrNoMesh = errors.New("no node mesh")

// ErrNotConverged is returned (wrapped, with the reasons) when a round made
// no progress or the rounds ran out. The next run retries.
var ErrNotConverged = errors.New("not converged")

// Changed says what a save changed since the save before it: the state's
// own fields always may have; the nodes with the ids in Nodes were added or
// changed; Groups says the security groups changed; All that anything may
// have (a new observation replaced the state).
type Changed struct {
	Nodes  []string
	Groups bool
	All    bool
}
