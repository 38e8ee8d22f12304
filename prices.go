package transit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/cloudtransit/transit/atomicfile"
	"github.com/cloudtransit/transit/clock"
	"github.com/cloudtransit/transit/districts"
	"github.com/cloudtransit/transit/provider"
)

// PriceListFunc asks a provider's official price list for the hourly
// price of machine types in district d, with the district's credential
// (nil: the provider's usual sources). It returns a quote per machine
// type, unpriced ones saying why; an error of the list fails the call.
type PriceListFunc func(ctx context.Context, d districts.District, cred *districts.Credential, machineTypes []string) ([]provider.Quote, error)

// PricesOptions configure AskPrices.
type PricesOptions struct {
	// Files are districts.json, credentials.json (optional) and
	// prices.json, the file the prices found are compared with (a missing
	// one is none). cluster.json is not read.
	Files districts.Paths
	// PriceLists maps a provider name to its price list: Drivers'
	// PriceLists. A provider without one is unpriced.
	PriceLists map[string]PriceListFunc
	// Parallel bounds how many districts are asked at once (default 4).
	Parallel int
	// Clock stamps the list (PriceList.Made); nil is the wall clock.
	Clock  clock.Clock
	Logger *slog.Logger
}

// Kinds of PriceChange.
const (
	PriceAdded   = "+"
	PriceChanged = "~"
	PriceRemoved = "-"
)

// PriceReport is what AskPrices found: the prices.json it would write,
// what that changes in the existing file, and what it could not price.
type PriceReport struct {
	// List is the prices.json the price lists make: every district flavor
	// they price, in districts.json's order, none that districts.json
	// prices itself.
	List districts.PriceList
	// Old is the existing prices.json (OldLoaded: there was one).
	Old       districts.PriceList
	OldLoaded bool
	// Changes are List's differences from Old, by district and flavor:
	// a price added, changed (price or machine type) or removed.
	Changes []PriceChange
	// Unpriced are the district flavors no price list priced, each with
	// why; districts.json's hourly_price prices them by hand.
	Unpriced []FlavorPrice
	// InDistricts are the district flavors districts.json prices itself:
	// a price in prices.json would be shadowed, so List has none.
	InDistricts []FlavorPrice
}

// Changed says writing List would change the existing file.
func (r PriceReport) Changed() bool {
	return len(r.Changes) > 0 || r.CurrencyChanged() || !r.OldLoaded && len(r.List.Prices) > 0
}

// CurrencyChanged says the existing file quotes another currency.
func (r PriceReport) CurrencyChanged() bool {
	return r.OldLoaded && len(r.List.Prices) > 0 && orUSD(r.Old.Currency) != r.List.Currency
}

// FlavorPrice is a district flavor with its price or why it has none.
type FlavorPrice struct {
	District    string
	Flavor      string
	Provider    string
	MachineType string
	// HourlyPrice and Currency: InDistricts' price in districts.json.
	HourlyPrice float64
	Currency    string
	// Reason says why it is unpriced.
	Reason string
}

// PriceChange is one difference between the prices found and the
// existing prices.json.
type PriceChange struct {
	Kind     string // PriceAdded, PriceChanged, PriceRemoved
	District string
	Flavor   string
	// MachineType and HourlyPrice are the new price's (the old one's for
	// a removal); OldMachineType and OldHourlyPrice the old one's (a
	// change, a removal).
	MachineType    string
	HourlyPrice    float64
	OldMachineType string
	OldHourlyPrice float64
	// Source is the new price's source.
	Source string
	// Reason says why a price is removed.
	Reason string
}

// Why a provider's flavors have no price list.
var noPriceList = map[string]string{
	districts.ProviderOpenStack: "OpenStack has no official price list",
	districts.ProviderLocal:     "a local district has no price list",
}

// AskPrices asks the price list of every district's provider for the
// hourly price of its flavors' machine types, and compares what it found
// with the existing prices.json. It writes nothing (WritePrices does) and
// takes no lock: it reads districts.json, credentials.json and prices.json
// only. A flavor districts.json prices itself is not asked for. An error
// of any price list (refused credentials, a failed page) fails the call:
// a partial list would remove the prices it could not read.
func AskPrices(ctx context.Context, opts PricesOptions) (PriceReport, error) {
	if opts.Clock == nil {
		opts.Clock = clock.Real{}
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if opts.Parallel <= 0 {
		opts.Parallel = 4
	}
	cfg, err := districts.LoadDistricts(opts.Files)
	if err != nil {
		return PriceReport{}, configError(problemList(err))
	}
	var r PriceReport
	if r.Old, r.OldLoaded, err = districts.ReadPriceList(opts.Files.Prices); err != nil {
		return PriceReport{}, configError(fmt.Errorf("%w (transit prices compares the prices it finds with it: correct it, or move it away)", problemList(err)))
	}

	// What to ask each district's list for.
	type ask struct {
		d       districts.District
		flavors []string // flavors to price, in districts.json order
		types   []string
		quotes  map[string]provider.Quote // by machine type
	}
	var asks []*ask
	for _, d := range cfg.Districts {
		a := &ask{d: d}
		for _, f := range d.Flavors {
			mt, _ := d.MachineType(f.Flavor)
			fp := FlavorPrice{District: d.ID, Flavor: f.Flavor, Provider: d.Provider, MachineType: mt}
			list := opts.PriceLists[d.Provider]
			switch {
			case f.HourlyPrice != nil:
				fp.HourlyPrice, fp.Currency = *f.HourlyPrice, orUSD(d.Currency)
				r.InDistricts = append(r.InDistricts, fp)
			case list == nil:
				fp.Reason = noPriceList[d.Provider]
				if fp.Reason == "" {
					fp.Reason = fmt.Sprintf("this build has no price list for provider %q", d.Provider)
				}
				r.Unpriced = append(r.Unpriced, fp)
			case mt == "":
				fp.Reason = "the flavor maps no machine type"
				r.Unpriced = append(r.Unpriced, fp)
			default:
				a.flavors = append(a.flavors, f.Flavor)
				if !slices.Contains(a.types, mt) {
					a.types = append(a.types, mt)
				}
			}
		}
		if len(a.flavors) > 0 {
			asks = append(asks, a)
		}
	}

	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(opts.Parallel)
	var mu sync.Mutex
	var errs []error
	for _, a := range asks {
		g.Go(func() error {
			opts.Logger.Debug("asking the price list", "district", a.d.ID, "provider", a.d.Provider, "machine_types", a.types)
			quotes, err := opts.PriceLists[a.d.Provider](gctx, a.d, credential(cfg.Credentials, a.d.CredentialID), a.types)
			if err != nil {
				mu.Lock()
				errs = append(errs, fmt.Errorf("district %q: %w", a.d.ID, err))
				mu.Unlock()
				return nil // ask the others: every failure is reported at once
			}
			a.quotes = make(map[string]provider.Quote, len(quotes))
			for _, q := range quotes {
				a.quotes[q.MachineType] = q
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return PriceReport{}, err
	}
	if err := ctx.Err(); err != nil {
		return PriceReport{}, err
	}
	if len(errs) > 0 {
		return PriceReport{}, fmt.Errorf("asking the price lists failed, nothing is written: %w", errors.Join(errs...))
	}

	// The list, in districts.json's order.
	currency := ""
	for _, a := range asks {
		for _, flavor := range a.flavors {
			mt, _ := a.d.MachineType(flavor)
			q, ok := a.quotes[mt]
			fp := FlavorPrice{District: a.d.ID, Flavor: flavor, Provider: a.d.Provider, MachineType: mt}
			switch {
			case !ok:
				fp.Reason = "the price list did not answer for " + mt
			case !q.Priced():
				fp.Reason = q.Unpriced
				if fp.Reason == "" {
					fp.Reason = "the price list has no price for " + mt
				}
			case a.d.Currency != "" && a.d.Currency != q.Currency:
				fp.Reason = fmt.Sprintf("the district prices in %s (currency in %s), the price list in %s: transit does not convert", a.d.Currency, label(opts.Files.Districts, "districts.json"), q.Currency)
			case currency != "" && q.Currency != currency:
				fp.Reason = fmt.Sprintf("the price list quotes %s, the others %s: one prices.json holds one currency", q.Currency, currency)
			}
			if fp.Reason != "" {
				r.Unpriced = append(r.Unpriced, fp)
				continue
			}
			currency = q.Currency
			r.List.Prices = append(r.List.Prices, districts.Price{Type: "price", District: a.d.ID, Flavor: flavor, MachineType: mt, HourlyPrice: q.HourlyPrice, Source: q.Source})
		}
	}
	if currency == "" {
		currency = orUSD(r.Old.Currency)
	}
	r.List.Type, r.List.Currency, r.List.Made = "prices", currency, opts.Clock.Now().UTC().Truncate(time.Second)
	if err := districts.CheckPriceList(r.List, cfg.Districts, opts.Files); err != nil {
		return PriceReport{}, configError(fmt.Errorf("the prices found would not load beside %s: %w", label(opts.Files.Districts, "districts.json"), problemList(err)))
	}
	// Unpriced flavors in districts.json's order.
	order := map[[2]string]int{}
	for _, d := range cfg.Districts {
		for _, f := range d.Flavors {
			order[[2]string{d.ID, f.Flavor}] = len(order)
		}
	}
	slices.SortStableFunc(r.Unpriced, func(a, b FlavorPrice) int {
		return order[[2]string{a.District, a.Flavor}] - order[[2]string{b.District, b.Flavor}]
	})
	r.Changes = priceChanges(r)
	return r, nil
}

// priceChanges compares the list with the existing file: additions and
// changes in the list's order, then removals in the file's.
func priceChanges(r PriceReport) []PriceChange {
	type key struct{ district, flavor string }
	old := map[key]districts.Price{}
	if r.OldLoaded {
		for _, p := range r.Old.Prices {
			old[key{p.District, p.Flavor}] = p
		}
	}
	var out []PriceChange
	kept := map[key]bool{}
	for _, p := range r.List.Prices {
		k := key{p.District, p.Flavor}
		kept[k] = true
		c := PriceChange{District: p.District, Flavor: p.Flavor, MachineType: p.MachineType, HourlyPrice: p.HourlyPrice, Source: p.Source}
		o, found := old[k]
		switch {
		case !found:
			c.Kind = PriceAdded
		case o.HourlyPrice != p.HourlyPrice || o.MachineType != p.MachineType:
			c.Kind, c.OldHourlyPrice, c.OldMachineType = PriceChanged, o.HourlyPrice, o.MachineType
		default:
			continue
		}
		out = append(out, c)
	}
	if !r.OldLoaded {
		return out
	}
	why := map[key]string{}
	for _, f := range r.InDistricts {
		why[key{f.District, f.Flavor}] = "districts.json prices it now (hourly_price)"
	}
	for _, f := range r.Unpriced {
		why[key{f.District, f.Flavor}] = "unpriced now: " + f.Reason
	}
	for _, p := range r.Old.Prices {
		k := key{p.District, p.Flavor}
		if kept[k] {
			continue
		}
		reason := why[k]
		if reason == "" {
			reason = "districts.json has no such district flavor"
		}
		out = append(out, PriceChange{Kind: PriceRemoved, District: p.District, Flavor: p.Flavor, MachineType: p.MachineType,
			HourlyPrice: p.HourlyPrice, OldMachineType: p.MachineType, OldHourlyPrice: p.HourlyPrice, Reason: reason})
	}
	return out
}

// WritePrices writes list to path atomically (a temporary file renamed
// over it): a reader sees the old file or the new one, never half.
func WritePrices(path string, list districts.PriceList) error {
	data, err := json.MarshalIndent(list, "", "  ")
	if err != nil {
		return err
	}
	if err := atomicfile.Write(path, append(data, '\n'), 0o644); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

func orUSD(currency string) string {
	if currency == "" {
		return districts.DefaultCurrency
	}
	return currency
}

// label is how messages name a file: its path, or the default name.
func label(path, def string) string {
	if path == "" {
		return def
	}
	return path
}
