package provider

// GroupLimiter is implemented by drivers whose cloud caps a security group
// by default (rules per group, rules per project): the loop refuses at
// plan time a plan whose groups would outgrow it, rather than failing
// half-way through an apply.
type GroupLimiter interface {
	// GroupLimit is what a group letting in sources node addresses, and
	// with mesh the node mesh's port, takes of the cloud's default quota.
	GroupLimit(sources int, mesh bool) GroupLimit
}

// GroupLimit is a group's size against a cloud quota.
type GroupLimit struct {
	// Need is how many of the quota's units the group takes; Max how many
	// the quota allows by default.
	Need, Max int
	// Quota names it as the cloud does; Raise says where to raise it.
	Quota, Raise string
}
