package control

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"

	"github.com/cloudtransit/transit/districts"
)

// What a plan costs. A machine costs its flavor's hourly price in its
// district from its launch until transit terminates it (a stopped one too:
// the clouds bill its disks, some its compute), so the cluster costs now
// what its live machines cost, and after the change what cluster.json's
// deployments cost. While it changes it may cost more: the loop runs new
// nodes before the ones they replace leave, up to strategy.max_surge
// above each role's size.

// ErrOverBudget refuses an apply whose cluster would cost more than
// cluster.json's budget: before anything is launched.
var ErrOverBudget = errors.New("over budget")

// Cost is a plan's price: hourly amounts in Currency.
type Cost struct {
	Currency string `json:"currency"`
	// Now is what the live machines cost an hour, After what the
	// converged cluster will.
	Now   float64 `json:"hourly_now"`
	After float64 `json:"hourly_after"`
	// Peak bounds what the cluster may cost an hour while it changes:
	// per role, the dearest of the old and new machines that may run at
	// once (an upper bound: the loop replaces few at a time).
	Peak      float64        `json:"hourly_peak"`
	Districts []DistrictCost `json:"districts"`
	// Unpriced names the district flavors (district/flavor) of live or
	// wanted machines that have no price: counted as nothing above.
	Unpriced []string `json:"unpriced,omitempty"`
	// Budget is cluster.json's; nil for none.
	Budget *districts.Budget `json:"budget,omitempty"`
	// OverBudget says why an apply is refused (ErrOverBudget); empty
	// when it is not.
	OverBudget string `json:"over_budget,omitempty"`
}

// DistrictCost is one district's part of a Cost.
type DistrictCost struct {
	District string  `json:"district"`
	Now      float64 `json:"hourly_now"`
	After    float64 `json:"hourly_after"`
}

// Bill is what the live machines of a state cost an hour: what status
// shows.
type Bill struct {
	Currency  string         `json:"currency"`
	Hourly    float64        `json:"hourly"`
	Districts []DistrictBill `json:"districts"`
	// Unpriced names the district flavors (district/flavor) of live
	// machines without a price: counted as nothing.
	Unpriced []string `json:"unpriced"`
}

// DistrictBill is one district's part of a Bill.
type DistrictBill struct {
	District string  `json:"district"`
	Hourly   float64 `json:"hourly"`
	Machines int     `json:"machines"`
}

// StateBill is what res's live machines cost an hour; nil when nothing
// is priced.
func StateBill(res districts.Resources, prices districts.PriceTable) *Bill {
	if !prices.Priced() {
		return nil
	}
	b := &Bill{Currency: prices.Currency, Districts: []DistrictBill{}}
	byDistrict := map[string]*DistrictBill{}
	unpriced := map[string]bool{}
	for _, n := range liveNodes(res) {
		v, ok := prices.Hourly(n.District, n.Flavor)
		if !ok {
			unpriced[n.District+"/"+n.Flavor] = true
		}
		if byDistrict[n.District] == nil {
			byDistrict[n.District] = &DistrictBill{District: n.District}
		}
		byDistrict[n.District].Hourly += v
		byDistrict[n.District].Machines++
		b.Hourly += v
	}
	b.Hourly = rounded(b.Hourly)
	for _, id := range slices.Sorted(maps.Keys(byDistrict)) {
		d := *byDistrict[id]
		d.Hourly = rounded(d.Hourly)
		b.Districts = append(b.Districts, d)
	}
	b.Unpriced = append([]string{}, slices.Sorted(maps.Keys(unpriced))...)
	return b
}

// Refusal is the error an apply of a plan of this cost ends with: nil
// when the budget allows it (or there is none).
func (c *Cost) Refusal() error {
	if c == nil || c.OverBudget == "" {
		return nil
	}
	return fmt.Errorf("%w: %s", ErrOverBudget, c.OverBudget)
}

// priceActions gives each launch and termination of p the hourly amount
// it adds or takes away, and p its Cost; nothing when no price is known
// and no budget set.
func priceActions(in planInput, prices districts.PriceTable, p *Plan) {
	if !prices.Priced() && in.cluster.Budget == nil {
		return
	}
	for i, a := range p.Actions {
		switch a.Kind {
		case KindLaunch:
			if v, ok := prices.Hourly(a.District, a.Flavor); ok {
				p.Actions[i].Hourly = &v
			}
		case KindTerminate:
			n, ok := in.world.node(a.Node)
			if !ok {
				continue
			}
			if v, ok := prices.Hourly(n.District, n.Flavor); ok {
				v = -v
				p.Actions[i].Hourly = &v
			}
		}
	}
	p.Cost = planCost(in, prices)
}

// planCost is what the cluster costs now, after, and at most between.
func planCost(in planInput, prices districts.PriceTable) *Cost {
	c := &Cost{Currency: prices.Currency, Budget: in.cluster.Budget}
	if b := in.cluster.Budget; b != nil {
		c.Currency = b.CurrencyCode()
	}
	unpriced := map[string]bool{}
	price := func(district, flavor string) float64 {
		v, ok := prices.Hourly(district, flavor)
		if !ok {
			unpriced[district+"/"+flavor] = true
		}
		return v
	}
	byDistrict := map[string]*DistrictCost{}
	district := func(id string) *DistrictCost {
		if byDistrict[id] == nil {
			byDistrict[id] = &DistrictCost{District: id}
		}
		return byDistrict[id]
	}

	// Per role: the prices of the machines that run now, of those the
	// change adds, and how many may run at once.
	type role struct {
		live, added []float64
		want        int
	}
	roles := map[string]*role{}
	roleOf := func(r string) *role {
		if roles[r] == nil {
			roles[r] = &role{}
		}
		return roles[r]
	}
	kept := map[districts.DeploymentKey]int{}
	for _, n := range in.world.live() {
		v := price(n.District, n.Flavor)
		c.Now += v
		district(n.District).Now += v
		r := roleOf(n.Role)
		r.live = append(r.live, v)
		if n.Phase != districts.PhaseFailed && n.CopyOf == "" {
			kept[districts.DeploymentKey{District: n.District, Flavor: n.Flavor, Role: n.Role}]++
		}
	}
	var growth []string
	for _, d := range in.cluster.Deployments {
		if d.Quantity <= 0 {
			continue
		}
		v := price(d.District, d.Flavor)
		if have := kept[d.Key()]; d.Quantity > have {
			growth = append(growth, fmt.Sprintf("%s %d → %d (+%.4f/h)", d.Key(), have, d.Quantity, v*float64(d.Quantity-have)))
		}
		c.After += v * float64(d.Quantity)
		district(d.District).After += v * float64(d.Quantity)
		r := roleOf(d.Role)
		r.want += d.Quantity
		for range max(d.Quantity-kept[d.Key()], 0) {
			r.added = append(r.added, v)
		}
	}
	surge := in.cluster.Strategy.Resolved().MaxSurge
	for _, r := range roles {
		all := append(slices.Clone(r.live), r.added...)
		slices.SortFunc(all, func(a, b float64) int { return cmp.Compare(b, a) })
		// The loop runs at most max(live, wanted) + max_surge machines
		// of a role at once, old and new.
		for _, v := range all[:min(len(all), max(len(r.live), r.want)+surge)] {
			c.Peak += v
		}
	}
	c.Now, c.After, c.Peak = rounded(c.Now), rounded(c.After), rounded(c.Peak)
	c.Peak = max(c.Peak, c.Now, c.After)
	for _, id := range slices.Sorted(maps.Keys(byDistrict)) {
		d := *byDistrict[id]
		d.Now, d.After = rounded(d.Now), rounded(d.After)
		c.Districts = append(c.Districts, d)
	}
	c.Unpriced = slices.Sorted(maps.Keys(unpriced))
	c.OverBudget = overBudget(c, in.cluster.Budget, growth)
	return c
}

// overBudget says why the budget refuses the change; "" when it allows
// it. Only growth is refused: a cluster over its budget may still shrink
// or move to cheaper machines, whatever its surge costs meanwhile.
func overBudget(c *Cost, b *districts.Budget, growth []string) string {
	if b == nil {
		return ""
	}
	money := func(v float64) string { return fmt.Sprintf("%.4f %s/h", v, c.Currency) }
	if c.After > b.MaxHourly && c.After > c.Now {
		return fmt.Sprintf("the cluster would cost %s once converged, more than budget.max_hourly %s in cluster.json (it costs %s now); grown: %s",
			money(c.After), money(b.MaxHourly), money(c.Now), strings.Join(growth, ", "))
	}
	// A change that lowers the cost (a move to cheaper machines) may
	// pass the budget while both run: refusing it would keep the dearer
	// cluster for good.
	if limit := b.SurgeLimit(); c.Peak > limit && c.After > c.Now {
		field := "budget.max_hourly"
		if b.MaxSurgeHourly != nil {
			field = "budget.max_surge_hourly"
		}
		return fmt.Sprintf("while it changes the cluster may cost up to %s (new nodes run before the ones they replace leave), more than %s %s in cluster.json; set budget.max_surge_hourly to allow the surge, or lower strategy.max_surge",
			money(c.Peak), field, money(limit))
	}
	return ""
}

// rounded drops what summing binary fractions adds (0.067 ten times is
// 0.6699999999999999): prices have at most a few decimals.
func rounded(v float64) float64 { return math.Round(v*1e9) / 1e9 }
