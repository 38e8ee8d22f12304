package districts

import (
	"fmt"
	"slices"
	"time"
)

// Autoscaling. A deployment may give bounds instead of a quantity; `transit
// autoscale` reads the platform, decides each autoscaled deployment's
// quantity within them and records it in the state (never in
// cluster.json), and the loop makes it so like any quantity.

// Autoscale bounds an autoscaled deployment's quantity.
type Autoscale struct {
	Type string `json:"type,omitempty"`
	Min  int    `json:"min"`
	Max  int    `json:"max"`
	// Spread shares new capacity between this deployment and the other
	// spreading deployments that fit the same workloads (one per
	// district, say) instead of giving it all to the cheapest.
	Spread bool `json:"spread,omitempty"`
}

// Autoscaler tunes `transit autoscale` (cluster.json "autoscaler"); every
// field is optional.
type Autoscaler struct {
	// UtilizationThreshold: a node whose workloads ask for less than this
	// share of its CPU and of its memory is underused (default 0.5).
	UtilizationThreshold float64 `json:"utilization_threshold,omitempty"`
	// ScaleDownAfter is how long a node stays underused before it goes
	// (default 10m).
	ScaleDownAfter Duration `json:"scale_down_after,omitzero"`
	// ScaleDownDelayAfterAdd: no deployment shrinks for this long after
	// any grew (default 10m): no flapping.
	ScaleDownDelayAfterAdd Duration `json:"scale_down_delay_after_add,omitzero"`
}

// Autoscaler defaults (Cluster Autoscaler's).
const (
	DefaultUtilizationThreshold   = 0.5
	DefaultScaleDownAfter         = 10 * time.Minute
	DefaultScaleDownDelayAfterAdd = 10 * time.Minute
)

// Resolved returns the settings with their defaults.
func (a *Autoscaler) Resolved() Autoscaler {
	r := Autoscaler{UtilizationThreshold: DefaultUtilizationThreshold,
		ScaleDownAfter: Duration(DefaultScaleDownAfter), ScaleDownDelayAfterAdd: Duration(DefaultScaleDownDelayAfterAdd)}
	if a == nil {
		return r
	}
	if a.UtilizationThreshold > 0 {
		r.UtilizationThreshold = a.UtilizationThreshold
	}
	if a.ScaleDownAfter > 0 {
		r.ScaleDownAfter = a.ScaleDownAfter
	}
	if a.ScaleDownDelayAfterAdd > 0 {
		r.ScaleDownDelayAfterAdd = a.ScaleDownDelayAfterAdd
	}
	return r
}

// Autoscaled is what `transit autoscale` decided for one deployment,
// kept in resources.json by the deployment's key (DeploymentKey.String).
type Autoscaled struct {
	Quantity int       `json:"quantity"`
	Reason   string    `json:"reason"`
	At       time.Time `json:"at"`
	// GrewAt is when it last grew the deployment.
	GrewAt time.Time `json:"grew_at,omitzero"`
	// Remove are the nodes it chose to take away: the loop removes them
	// before others.
	Remove []string `json:"remove,omitempty"`
}

// AutoscaleState is everything `transit autoscale` keeps between runs.
type AutoscaleState struct {
	Deployments map[string]Autoscaled `json:"deployments,omitempty"`
	// UnderusedSince is when each underused node was first seen so.
	UnderusedSince map[string]time.Time `json:"underused_since,omitempty"`
	// Reported are the problems already reported (a workload no
	// deployment could ever fit), so each is reported once.
	Reported []string `json:"reported,omitempty"`
}

// QuantityIn is a deployment's quantity: its own, or for an autoscaled one
// what the autoscaler decided, within the bounds (Min before it decided).
func (d Deployment) QuantityIn(res Resources) int {
	if d.Autoscale == nil {
		return d.Quantity
	}
	q := d.Autoscale.Min
	if res.Autoscale != nil {
		if a, ok := res.Autoscale.Deployments[d.Key().String()]; ok {
			q = a.Quantity
		}
	}
	return min(max(q, d.Autoscale.Min), d.Autoscale.Max)
}

// Effective is the cluster the loop makes: autoscaled deployments at the
// quantity the state records.
func (c Cluster) Effective(res Resources) Cluster {
	if !c.Autoscaled() {
		return c
	}
	c.Deployments = slices.Clone(c.Deployments)
	for i, d := range c.Deployments {
		c.Deployments[i].Quantity = d.QuantityIn(res)
	}
	return c
}

// Autoscaled says a deployment is autoscaled.
func (c Cluster) Autoscaled() bool {
	return slices.ContainsFunc(c.Deployments, func(d Deployment) bool { return d.Autoscale != nil })
}

// validateAutoscale checks one deployment's bounds.
func validateAutoscale(c *problems, p string, d Deployment) {
	a := d.Autoscale
	if a == nil {
		return
	}
	checkType(c, p+".autoscale.type", a.Type, "autoscale", false)
	if d.Quantity != 0 {
		c.add(p+".quantity", fmt.Sprintf("%d set together with autoscale", d.Quantity), "give a quantity or autoscale bounds, not both")
	}
	if d.Role == RoleMaster {
		c.add(p+".autoscale", "masters are never autoscaled", "autoscale worker deployments; give masters a quantity")
	}
	switch {
	case a.Min < 0:
		c.add(p+".autoscale.min", fmt.Sprintf("must not be negative, got %d", a.Min), "")
	case a.Max < a.Min:
		c.add(p+".autoscale.max", fmt.Sprintf("%d is below min %d", a.Max, a.Min), "")
	case a.Max > MaxDeploymentQuantity:
		c.add(p+".autoscale.max", fmt.Sprintf("%d is more than %d, the most one deployment line may hold", a.Max, MaxDeploymentQuantity), quantityHint)
	}
}

// validateAutoscaler checks cluster.json's autoscaler settings.
func validateAutoscaler(c *problems, a *Autoscaler) {
	if a == nil {
		return
	}
	if v := a.UtilizationThreshold; v < 0 || v > 1 {
		c.add("autoscaler.utilization_threshold", fmt.Sprintf("%v is not a share between 0 and 1", v), "e.g. 0.5: a node whose workloads ask for less than half of it is underused")
	}
	checkNotNegative(c, "autoscaler.scale_down_after", a.ScaleDownAfter)
	checkNotNegative(c, "autoscaler.scale_down_delay_after_add", a.ScaleDownDelayAfterAdd)
}
