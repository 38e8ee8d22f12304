package provider

// Quote is what a cloud's official price list says one machine of a
// machine type costs an hour in a district: the `transit prices` command
// asks each district's list for its flavors' machine types and writes the
// quotes into prices.json for the user to review.
type Quote struct {
	// MachineType is the provider's machine type (an EC2 instance type,
	// a Compute Engine machine type).
	MachineType string
	// HourlyPrice is the price of one machine an hour, in Currency; 0
	// when Unpriced says why the list has none.
	HourlyPrice float64
	// Currency is the price's ISO 4217 code, as the list quotes it.
	Currency string
	// Source names the list and the terms the price is for, for the
	// reviewer, e.g. "AWS Price List: t3.medium, EU (Frankfurt), Linux,
	// Shared, On-Demand, USD 0.048/Hrs".
	Source string
	// Unpriced, when not empty, says why the list has no price for the
	// machine type (it does not list it, it lists more than one).
	Unpriced string
}

// Priced says the quote carries a price.
func (q Quote) Priced() bool { return q.Unpriced == "" && q.HourlyPrice > 0 }
