// Package control is transit's control loop. Each round observes every
// district's tagged machines and groups and the platform's members, diffs
// them against cluster.json, builds a plan (a value: actions with a kind, a
// target and a reason) and executes it, saving state after every action.
// Rounds repeat until nothing is left to do or a round makes no progress.
//
// The plan keeps the platform whole while it changes: groups exist before
// nodes launch, nodes are allowed everywhere before they join, removals
// drain one node at a time and wait for their replacements, masters keep
// quorum, and migrations surge by max_surge instead of doubling.
package control
