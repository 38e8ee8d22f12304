package cli

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/cloudtransit/transit"
	"github.com/cloudtransit/transit/districts"
	"github.com/cloudtransit/transit/shellquote"
)

type pricesFlags struct {
	out   string
	write bool
	json  bool
}

// NewPricesCommand builds `transit prices`.
func NewPricesCommand(deps Deps, g *GlobalFlags) *cobra.Command {
	f := &pricesFlags{}
	cmd := &cobra.Command{
		Use:   "prices",
		Short: "Ask the clouds' price lists for the flavors' hourly prices (prices.json)",
		Long: `Prices asks each district's official price list for the hourly price of the
machine type of every flavor in districts.json, and shows what that changes in
prices.json (--out, default the --prices file): + a price added, ~ changed
(price or machine type), - removed. Like terraform plan, it writes nothing:
review the changes, then run it again with --write to write them (atomically).
It reads districts.json and credentials.json, not cluster.json nor the state,
and takes no lock.

Price lists: AWS's Price List Query API (Linux, Shared tenancy, On-Demand, in
USD), with each district's credential and through its aws_endpoint when set.
OpenStack has none, and local districts none; a Compute Engine district is
priced by hand. A flavor that no list prices (those, a machine type missing
from the list) is listed as unpriced, never written as 0: price it by hand
with hourly_price on the flavor in districts.json. A flavor that districts.json
prices already is not asked for: its price there wins over prices.json's.

An error of a price list (refused credentials, a page that fails) writes
nothing and exits 1. Otherwise it exits 0 when every district flavor is
priced (by prices.json or districts.json) and 4 when some are not; --write
writes the prices found either way.

With --json it prints one JSON object (type "prices", format_version ` + strconv.Itoa(FormatVersion) + `):
the prices found, the changes, the unpriced and the districts.json-priced
flavors, and whether the file was written.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if f.out == "" {
				f.out = g.Prices
			}
			o, err := f.options(deps, g)
			if err != nil {
				return err
			}
			r, err := transit.AskPrices(cmd.Context(), o)
			if err != nil {
				return err
			}
			written := f.write && r.Changed()
			if written {
				if err := transit.WritePrices(f.out, r.List); err != nil {
					return err
				}
			}
			if err := f.render(deps.Out, g, r, written); err != nil {
				return err
			}
			if len(r.Unpriced) > 0 {
				return &CodeError{Code: ExitUnpriced} // the view named them
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&f.out, "out", "", "the prices file to compare with and write (default: the --prices file)")
	cmd.Flags().BoolVar(&f.write, "write", false, "write the prices found to the file (without it, only show what would change)")
	cmd.Flags().BoolVar(&f.json, "json", false, "print the result as JSON")
	return cmd
}

func (f *pricesFlags) options(deps Deps, g *GlobalFlags) (transit.PricesOptions, error) {
	logger, err := g.logger(deps.Err)
	if err != nil {
		return transit.PricesOptions{}, err
	}
	b, err := g.env.builtin()
	if err != nil {
		return transit.PricesOptions{}, err
	}
	files := g.paths()
	files.Prices = f.out
	o := transit.PricesOptions{Files: files, Clock: deps.clock(), Logger: logger}
	if deps.Drivers != nil {
		o.PriceLists = deps.Drivers(b).PriceLists
	}
	return o, nil
}

func (f *pricesFlags) render(w io.Writer, g *GlobalFlags, r transit.PriceReport, written bool) error {
	if f.json {
		return writeJSON(w, newPricesJSON(f.out, r, written))
	}
	return writePrices(w, f.out, g.Prices, r, written)
}

// writePrices is the review: the changes, the flavors priced in
// districts.json, the unpriced ones, and what to do next.
func writePrices(w io.Writer, file, readFile string, r transit.PriceReport, written bool) error {
	var b strings.Builder
	cur := r.List.Currency
	fmt.Fprintf(&b, "Asked the price lists at %s: %s priced", r.List.Made.Format("2006-01-02 15:04:05 UTC"), plural(len(r.List.Prices), "district flavor"))
	if n := len(r.Unpriced); n > 0 {
		fmt.Fprintf(&b, ", %d unpriced", n)
	}
	if n := len(r.InDistricts); n > 0 {
		fmt.Fprintf(&b, ", %d priced in districts.json", n)
	}
	b.WriteString(".\n")
	if r.CurrencyChanged() {
		fmt.Fprintf(&b, "\n  ~ currency %s -> %s\n", orUSD(r.Old.Currency), cur)
	}
	if len(r.Changes) > 0 {
		b.WriteString("\n")
		for _, c := range r.Changes {
			name := c.District + "/" + c.Flavor
			switch c.Kind {
			case transit.PriceAdded:
				fmt.Fprintf(&b, "  + %s: %s %s %s/h\n      %s\n", name, c.MachineType, cur, money(c.HourlyPrice), c.Source)
			case transit.PriceChanged:
				fmt.Fprintf(&b, "  ~ %s: %s %s %s/h -> %s %s %s/h\n      %s\n", name, orDash(c.OldMachineType), orUSD(r.Old.Currency), money(c.OldHourlyPrice),
					c.MachineType, cur, money(c.HourlyPrice), c.Source)
			case transit.PriceRemoved:
				fmt.Fprintf(&b, "  - %s: %s %s %s/h: %s\n", name, orDash(c.MachineType), orUSD(r.Old.Currency), money(c.OldHourlyPrice), c.Reason)
			}
		}
	}
	if len(r.InDistricts) > 0 {
		b.WriteString("\nPriced in districts.json (its hourly_price wins; prices.json leaves them out):\n")
		for _, p := range r.InDistricts {
			fmt.Fprintf(&b, "  %s/%s: %s %s/h\n", p.District, p.Flavor, p.Currency, money(p.HourlyPrice))
		}
	}
	if len(r.Unpriced) > 0 {
		b.WriteString("\nUnpriced (no price list prices them):\n")
		for _, p := range r.Unpriced {
			mt := ""
			if p.MachineType != "" {
				mt = " (" + p.MachineType + ")"
			}
			fmt.Fprintf(&b, "  %s/%s%s: %s\n", p.District, p.Flavor, mt, p.Reason)
		}
	}
	b.WriteString("\n")
	counts := priceCounts(r)
	switch {
	case !r.Changed():
		fmt.Fprintf(&b, "%s is up to date: %s.\n", file, counts)
	case written:
		fmt.Fprintf(&b, "Wrote %s: %s.\n", file, counts)
	default:
		fmt.Fprintf(&b, "Prices: %s. Nothing is written: review them, then run transit prices --write%s to write %s.\n", counts, outFlag(file, readFile), file)
	}
	if file != readFile && (written || r.Changed()) {
		fmt.Fprintf(&b, "transit reads prices from %s; give it --prices %s to read these.\n", readFile, shellquote.Quote(file))
	}
	if n := len(r.Unpriced); n > 0 {
		fmt.Fprintf(&b, "%s unpriced: set hourly_price on %s in districts.json to price %s by hand (exit code %d).\n",
			pronoun(n, "1 district flavor is", strconv.Itoa(n)+" district flavors are"), pronoun(n, "the flavor", "each flavor"), pronoun(n, "it", "them"), ExitUnpriced)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// priceCounts counts the changes, and the prices left as they are.
func priceCounts(r transit.PriceReport) string {
	var add, change, remove int
	for _, c := range r.Changes {
		switch c.Kind {
		case transit.PriceAdded:
			add++
		case transit.PriceChanged:
			change++
		case transit.PriceRemoved:
			remove++
		}
	}
	same := len(r.List.Prices) - add - change
	return fmt.Sprintf("%d to add, %d to change, %d to remove, %d unchanged", add, change, remove, same)
}

func outFlag(file, readFile string) string {
	if file == readFile {
		return ""
	}
	return " --out " + shellquote.Quote(file)
}

func pronoun(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// money prints a price as the lists write it, without trailing zeros.
func money(p float64) string { return strconv.FormatFloat(p, 'f', -1, 64) }

func orUSD(c string) string {
	if c == "" {
		return districts.DefaultCurrency
	}
	return c
}

// pricesJSON is what prices --json prints.
type pricesJSON struct {
	header
	File      string            `json:"file"`
	Written   bool              `json:"written"`
	Changes   bool              `json:"changes"`
	AllPriced bool              `json:"all_priced"`
	Currency  string            `json:"currency"`
	Made      time.Time         `json:"made"`
	Prices    []districts.Price `json:"prices"`
	Diff      []priceChangeJSON `json:"diff"`
	Unpriced  []flavorPriceJSON `json:"unpriced"`
	Districts []flavorPriceJSON `json:"priced_in_districts"`
}

type priceChangeJSON struct {
	Kind           string  `json:"kind"`
	District       string  `json:"district"`
	Flavor         string  `json:"flavor"`
	MachineType    string  `json:"machine_type,omitempty"`
	HourlyPrice    float64 `json:"hourly_price"`
	OldMachineType string  `json:"old_machine_type,omitempty"`
	OldHourlyPrice float64 `json:"old_hourly_price,omitempty"`
	Source         string  `json:"source,omitempty"`
	Reason         string  `json:"reason,omitempty"`
}

type flavorPriceJSON struct {
	District    string  `json:"district"`
	Flavor      string  `json:"flavor"`
	Provider    string  `json:"provider"`
	MachineType string  `json:"machine_type,omitempty"`
	HourlyPrice float64 `json:"hourly_price,omitempty"`
	Currency    string  `json:"currency,omitempty"`
	Reason      string  `json:"reason,omitempty"`
}

const typePrices = "prices"

func newPricesJSON(file string, r transit.PriceReport, written bool) pricesJSON {
	v := pricesJSON{header: newHeader(typePrices), File: file, Written: written, Changes: r.Changed(), AllPriced: len(r.Unpriced) == 0,
		Currency: r.List.Currency, Made: r.List.Made, Prices: list(r.List.Prices),
		Diff: []priceChangeJSON{}, Unpriced: []flavorPriceJSON{}, Districts: []flavorPriceJSON{}}
	for _, c := range r.Changes {
		v.Diff = append(v.Diff, priceChangeJSON(c))
	}
	for _, p := range r.Unpriced {
		v.Unpriced = append(v.Unpriced, flavorPriceJSON(p))
	}
	for _, p := range r.InDistricts {
		v.Districts = append(v.Districts, flavorPriceJSON(p))
	}
	return v
}
