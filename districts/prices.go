package districts

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"time"
)

// Prices. A district flavor may carry its hourly price in districts.json;
// prices.json, written by `transit prices` from the clouds' price lists
// and reviewed by the user, prices the rest. The cost package adds them
// up; a budget in cluster.json bounds the sum.

// DefaultCurrency is the currency of prices and budgets that name none.
const DefaultCurrency = "USD"

// HoursPerMonth is the month monthly costs are quoted for (the clouds'
// own calculators use 730 hours).
const HoursPerMonth = 730

// Budget is cluster.json's spend guard: an apply whose resulting cluster
// would cost more an hour than MaxHourly is refused before anything is
// launched. Shrinking and destroying are never refused.
type Budget struct {
	// MaxHourly is the most the converged cluster may cost an hour.
	MaxHourly float64 `json:"max_hourly"`
	// MaxSurgeHourly, when set, is the most the cluster may cost an hour
	// while it changes (new nodes run before the ones they replace
	// leave); unset, the surge is held to MaxHourly too.
	MaxSurgeHourly *float64 `json:"max_surge_hourly,omitempty"`
	// Currency is the ISO 4217 code of the amounts (default USD); the
	// prices must be in it.
	Currency string `json:"currency,omitempty"`
}

// SurgeLimit is the most the cluster may cost an hour while it changes.
func (b Budget) SurgeLimit() float64 {
	if b.MaxSurgeHourly != nil {
		return *b.MaxSurgeHourly
	}
	return b.MaxHourly
}

// CurrencyCode returns the budget's currency, defaulted.
func (b Budget) CurrencyCode() string { return orDefaultCurrency(b.Currency) }

// PriceList is prices.json: hourly prices of district flavors.
type PriceList struct {
	Type string `json:"type"` // "prices"
	// Currency is the ISO 4217 code of every price in the file (default
	// USD).
	Currency string `json:"currency,omitempty"`
	// Made is when `transit prices` asked the price lists.
	Made   time.Time `json:"made,omitzero"`
	Prices []Price   `json:"prices"`
}

// Price is what one machine of a flavor costs an hour in a district.
type Price struct {
	Type     string `json:"type,omitempty"` // "price"
	District string `json:"district"`
	Flavor   string `json:"flavor"`
	// MachineType is the provider's machine type the price is for; when
	// districts.json maps the flavor to another one now, the price is
	// stale and refused.
	MachineType string  `json:"machine_type,omitempty"`
	HourlyPrice float64 `json:"hourly_price"`
	// Source says where the price came from (the price list and the
	// terms), for the reviewer.
	Source string `json:"source,omitempty"`
}

const pricesShape = `a prices file holds one object: {"type": "prices", "currency": "USD", "prices": [{"district": ..., "flavor": ..., "hourly_price": 0.0416}]}`

// readPrices reads prices.json when it exists; a missing file prices
// nothing.
func readPrices(c *problems, path string, pl *PriceList) (read, ok bool) {
	if path == "" {
		return false, true
	}
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, true
	}
	if err != nil {
		c.add("", "cannot read: "+ioReason(err), "")
		return false, false
	}
	if !decodeFile(c, data, pl, false, pricesShape) {
		return false, false
	}
	return true, true
}

// validCurrency says s is an ISO 4217 code's shape: three capital letters.
func validCurrency(s string) bool {
	if len(s) != 3 {
		return false
	}
	for _, r := range s {
		if r < 'A' || r > 'Z' {
			return false
		}
	}
	return true
}

func checkCurrency(c *problems, path, code string) {
	if code != "" && !validCurrency(code) {
		c.add(path, fmt.Sprintf("%q is not an ISO 4217 currency code", code), `use three capital letters, such as "USD" or "EUR"`)
	}
}

func orDefaultCurrency(s string) string {
	if s == "" {
		return DefaultCurrency
	}
	return s
}

// validateBudget checks cluster.json's budget on its own.
func validateBudget(c *problems, b *Budget) {
	if b == nil {
		return
	}
	switch {
	case b.MaxHourly < 0:
		c.add("budget.max_hourly", fmt.Sprintf("must not be negative, got %v", b.MaxHourly), "")
	case b.MaxHourly == 0:
		c.add("budget.max_hourly", "missing or 0: a budget of nothing refuses every node", "give the most the cluster may cost an hour, or remove budget")
	}
	if s := b.MaxSurgeHourly; s != nil && *s < b.MaxHourly {
		c.add("budget.max_surge_hourly", fmt.Sprintf("%v is below max_hourly %v", *s, b.MaxHourly), "the surge is what the cluster costs while nodes are replaced: at least max_hourly")
	}
	checkCurrency(c, "budget.currency", b.Currency)
}

// validatePriceList checks prices.json against districts.json: every
// price names a district and a flavor it maps, for the machine type it
// maps it to now, once.
func validatePriceList(c *problems, pl PriceList, ds []District, districtsOK bool, districtsFile string) {
	checkType(c, "type", pl.Type, "prices", true)
	checkCurrency(c, "currency", pl.Currency)
	byID := make(map[string]District, len(ds))
	var ids []string
	for _, d := range ds {
		if _, dup := byID[d.ID]; !dup && d.ID != "" {
			byID[d.ID] = d
			ids = append(ids, d.ID)
		}
	}
	seen := make(map[[2]string]int)
	for i, p := range pl.Prices {
		path := joinIndex("prices", i)
		checkType(c, path+".type", p.Type, "price", false)
		checkNotNegative(c, path+".hourly_price", p.HourlyPrice)
		if p.District == "" {
			c.add(path+".district", "missing", "")
			continue
		}
		if p.Flavor == "" {
			c.add(path+".flavor", "missing", "")
			continue
		}
		if j, dup := seen[[2]string{p.District, p.Flavor}]; dup {
			c.add(path, fmt.Sprintf("prices %s/%s again (first at [%d])", p.District, p.Flavor, j), "keep one price per district and flavor")
			continue
		}
		seen[[2]string{p.District, p.Flavor}] = i
		if !districtsOK {
			continue
		}
		d, found := byID[p.District]
		if !found {
			c.add(path+".district", fmt.Sprintf("%q is not defined in %s %s", p.District, districtsFile, known(ids)), "remove the price, or run transit prices again")
			continue
		}
		machine, mapped := d.MachineType(p.Flavor)
		switch {
		case !mapped:
			c.add(path+".flavor", fmt.Sprintf("%q is not mapped by district %q in %s", p.Flavor, p.District, districtsFile), "remove the price, or run transit prices again")
		case p.MachineType != "" && machine != "" && p.MachineType != machine:
			c.add(path+".machine_type", fmt.Sprintf("prices %s, but %s maps %s in %q to %s now", p.MachineType, districtsFile, p.Flavor, p.District, machine), "run transit prices again, or correct the price and its machine_type")
		}
		if dc := d.Currency; dc != "" && dc != orDefaultCurrency(pl.Currency) {
			c.add(path, fmt.Sprintf("district %q prices in %s (%s), this file in %s", p.District, dc, districtsFile, orDefaultCurrency(pl.Currency)), "transit does not convert currencies: use one")
		}
	}
}

// PriceTable is every district flavor's hourly price, resolved.
type PriceTable struct {
	// Currency is the prices' one currency (validation refuses more).
	Currency string
	hourly   map[[2]string]float64
}

// PriceTable resolves the configuration's prices: a district flavor's
// hourly_price in districts.json wins over prices.json's.
func (cfg Config) PriceTable() PriceTable {
	t := PriceTable{Currency: DefaultCurrency, hourly: make(map[[2]string]float64)}
	if cfg.PricesLoaded {
		t.Currency = orDefaultCurrency(cfg.Prices.Currency)
		for _, p := range cfg.Prices.Prices {
			t.hourly[[2]string{p.District, p.Flavor}] = p.HourlyPrice
		}
	}
	for _, d := range cfg.Districts {
		for _, f := range d.Flavors {
			if f.HourlyPrice != nil {
				t.hourly[[2]string{d.ID, f.Flavor}] = *f.HourlyPrice
				if d.Currency != "" {
					t.Currency = d.Currency
				}
			}
		}
	}
	return t
}

// Hourly returns what one machine of flavor costs an hour in district,
// and whether it is priced.
func (t PriceTable) Hourly(district, flavor string) (float64, bool) {
	p, ok := t.hourly[[2]string{district, flavor}]
	return p, ok
}

// Priced says any price is known.
func (t PriceTable) Priced() bool { return len(t.hourly) > 0 }

// validatePricing checks the files together: every price in one currency
// (transit does not convert), the budget's too, and with a budget every
// deployment priced (an unpriced one would count as free).
func validatePricing(cc, dc *problems, cfg Config, l labels) {
	fileCurrency := DefaultCurrency
	if cfg.PricesLoaded {
		fileCurrency = orDefaultCurrency(cfg.Prices.Currency)
	}
	// The first priced district's currency is the one the others must
	// share; prices.json's when it prices anything.
	want, wantFrom := "", ""
	if cfg.PricesLoaded && len(cfg.Prices.Prices) > 0 {
		want, wantFrom = fileCurrency, l.prices
	}
	for i, d := range cfg.Districts {
		priced := false
		for _, f := range d.Flavors {
			priced = priced || f.HourlyPrice != nil
		}
		if !priced || !validCurrency(orDefaultCurrency(d.Currency)) {
			continue
		}
		cur := d.Currency
		if cur == "" {
			cur = fileCurrency
		}
		switch {
		case want == "":
			want, wantFrom = cur, fmt.Sprintf("district %q", d.ID)
		case cur != want:
			dc.add(joinIndex("", i)+".currency", fmt.Sprintf("district %q prices in %s, %s in %s", d.ID, cur, wantFrom, want), "transit does not convert currencies: price every district in one")
		}
	}
	b := cfg.Cluster.Budget
	if b == nil || !validCurrency(b.CurrencyCode()) {
		return
	}
	if want != "" && b.CurrencyCode() != want {
		cc.add("budget.currency", fmt.Sprintf("the budget is in %s, the prices (%s) in %s", b.CurrencyCode(), wantFrom, want), "set budget.currency to the prices' currency: transit does not convert")
	}
	t := cfg.PriceTable()
	for i, d := range cfg.Cluster.Deployments {
		if _, ok := t.Hourly(d.District, d.Flavor); !ok && d.District != "" && d.Flavor != "" {
			cc.add(joinIndex("deployments", i), fmt.Sprintf("flavor %q has no price in district %q, and the budget needs every deployment's", d.Flavor, d.District),
				fmt.Sprintf("set hourly_price on the flavor in %s, or add it to %s (transit prices writes it)", l.districts, l.prices))
		}
	}
}

// LoadDistricts reads districts.json and (when it exists) credentials.json
// strictly and validates them together, as Load does, without cluster.json
// or prices.json: what `transit prices` needs to ask the price lists.
func LoadDistricts(p Paths) (Config, error) {
	l := p.labels()
	cfg := Config{Paths: p}
	dc := newProblems(l.districts, reflect.TypeFor[[]District]())
	districtsOK := readConfig(dc, p.Districts, &cfg.Districts, districtsShape, "districts.example.json")
	kc := newProblems(l.credentials, reflect.TypeFor[[]Credential]())
	if p.Credentials != "" {
		cfg.CredentialsLoaded = readCredentials(kc, p.Credentials, &cfg.Credentials)
	}
	if districtsOK {
		validateDistricts(dc, cfg.Districts, cfg.Credentials, cfg.CredentialsLoaded, l.credentials)
	}
	if cfg.CredentialsLoaded {
		validateCredentials(kc, cfg.Credentials)
	}
	if all := collect(dc, kc); len(all) > 0 {
		return Config{Paths: p}, all
	}
	return cfg, nil
}

// ReadPriceList reads prices.json strictly, as Load does, but checks it
// against nothing: `transit prices` compares what it found with the file
// it would replace, stale or not. A missing file (or an empty path) is
// none: ok false, no error.
func ReadPriceList(path string) (pl PriceList, ok bool, err error) {
	pc := newProblems(filepath.Base(path), reflect.TypeFor[PriceList]())
	read, _ := readPrices(pc, path, &pl)
	if all := collect(pc); len(all) > 0 {
		return PriceList{}, false, all
	}
	return pl, read, nil
}

// CheckPriceList validates pl as Load would validate it as the file at
// p.Prices against the districts: each price names a district and a flavor
// it maps, for the machine type it maps it to, once, and every price of
// both files is in one currency.
func CheckPriceList(pl PriceList, ds []District, p Paths) error {
	l := p.labels()
	pc := newProblems(l.prices, reflect.TypeFor[PriceList]())
	validatePriceList(pc, pl, ds, true, l.districts)
	dc := newProblems(l.districts, reflect.TypeFor[[]District]())
	cc := newProblems(l.cluster, reflect.TypeFor[Cluster]())
	validatePricing(cc, dc, Config{Districts: ds, Prices: pl, PricesLoaded: true}, l)
	if all := collect(pc, dc); len(all) > 0 {
		return all
	}
	return nil
}
