package districts

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func pr(path, msg string) Problem { return Problem{File: "prices.json", Path: path, Message: msg} }

func price(v float64) *float64 { return &v }

// pricedConfig is validConfig with every deployment priced: the aws
// district in districts.json, the gce one by prices.json, both USD.
func pricedConfig() Config {
	c := validConfig()
	c.Districts[1].Flavors[1].HourlyPrice = price(0.2)
	c.Prices = PriceList{Type: "prices", Currency: "USD", Prices: []Price{
		{District: "gce-europe", Flavor: "small", MachineType: "n1-standard-1", HourlyPrice: 0.0475, Source: "test"},
		{District: "gce-europe", Flavor: "large", HourlyPrice: 0.19},
	}}
	c.PricesLoaded = true
	c.Cluster.Budget = &Budget{MaxHourly: 2}
	return c
}

func TestPricedConfigValid(t *testing.T) {
	t.Parallel()
	c := pricedConfig()
	if err := Validate(c); err != nil {
		t.Fatalf("Validate(pricedConfig()) = %v", err)
	}
	tab := c.PriceTable()
	for _, tc := range []struct {
		district, flavor string
		want             float64
		ok               bool
	}{
		{"aws-europe", "large", 0.2, true},
		{"gce-europe", "small", 0.0475, true},
		{"aws-europe", "small", 0, false},
	} {
		if got, ok := tab.Hourly(tc.district, tc.flavor); got != tc.want || ok != tc.ok {
			t.Errorf("Hourly(%s, %s) = %v, %v; want %v, %v", tc.district, tc.flavor, got, ok, tc.want, tc.ok)
		}
	}
	if tab.Currency != "USD" {
		t.Errorf("currency %q, want USD", tab.Currency)
	}
}

// districts.json's own price wins over a reviewed prices.json's.
func TestDistrictPriceWins(t *testing.T) {
	t.Parallel()
	c := pricedConfig()
	c.Districts[0].Flavors[0].HourlyPrice = price(0.03)
	if got, _ := c.PriceTable().Hourly("gce-europe", "small"); got != 0.03 {
		t.Errorf("gce-europe/small costs %v, want districts.json's 0.03", got)
	}
}

func TestValidatePrices(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		mutate func(*Config)
		want   Problems
	}{
		{"negative price in districts.json", func(c *Config) { c.Districts[1].Flavors[0].HourlyPrice = price(-1) },
			Problems{ds("[1].flavors[0].hourly_price", "must not be negative, got -1")}},
		{"negative price in prices.json", func(c *Config) { c.Prices.Prices[1].HourlyPrice = -0.5 },
			Problems{pr("prices[1].hourly_price", "must not be negative, got -0.5")}},
		{"currency not ISO 4217", func(c *Config) { c.Districts[3].Currency = "euro" },
			Problems{withHint(ds("[3].currency", `"euro" is not an ISO 4217 currency code`), `use three capital letters, such as "USD" or "EUR"`)}},
		{"prices in two currencies", func(c *Config) { c.Districts[1].Currency = "EUR" },
			Problems{withHint(ds("[1].currency", `district "aws-europe" prices in EUR, prices.json in USD`), "transit does not convert currencies: price every district in one")}},
		{"budget in another currency than prices.json", func(c *Config) { c.Prices.Currency = "EUR"; c.Cluster.Budget.Currency = "USD" },
			Problems{withHint(cl("budget.currency", `the budget is in USD, the prices (prices.json) in EUR`), "set budget.currency to the prices' currency: transit does not convert")}},
		{"budget without max_hourly", func(c *Config) { c.Cluster.Budget.MaxHourly = 0 },
			Problems{withHint(cl("budget.max_hourly", "missing or 0: a budget of nothing refuses every node"), "give the most the cluster may cost an hour, or remove budget")}},
		{"surge below the budget", func(c *Config) { c.Cluster.Budget.MaxSurgeHourly = price(1) },
			Problems{withHint(cl("budget.max_surge_hourly", "1 is below max_hourly 2"), "the surge is what the cluster costs while nodes are replaced: at least max_hourly")}},
		{"budget with an unpriced deployment", func(c *Config) { c.Prices.Prices = c.Prices.Prices[1:] },
			Problems{withHint(cl("deployments[0]", `flavor "small" has no price in district "gce-europe", and the budget needs every deployment's`),
				"set hourly_price on the flavor in districts.json, or add it to prices.json (transit prices writes it)")}},
		{"price of an undefined district", func(c *Config) { c.Prices.Prices[0].District = "gce-asia" },
			Problems{
				withHint(cl("deployments[0]", `flavor "small" has no price in district "gce-europe", and the budget needs every deployment's`),
					"set hourly_price on the flavor in districts.json, or add it to prices.json (transit prices writes it)"),
				withHint(pr("prices[0].district", `"gce-asia" is not defined in districts.json (known: gce-europe, aws-europe, os-lab, local-a, local-b)`), "remove the price, or run transit prices again"),
			}},
		{"price of an unmapped flavor", func(c *Config) { c.Prices.Prices[1].District = "os-lab" },
			Problems{withHint(pr("prices[1].flavor", `"large" is not mapped by district "os-lab" in districts.json`), "remove the price, or run transit prices again")}},
		{"price of another machine type", func(c *Config) { c.Districts[0].Flavors[0].MachineType = "e2-small" },
			Problems{withHint(pr("prices[0].machine_type", `prices n1-standard-1, but districts.json maps small in "gce-europe" to e2-small now`), "run transit prices again, or correct the price and its machine_type")}},
		{"price twice", func(c *Config) {
			c.Prices.Prices = append(c.Prices.Prices, Price{District: "gce-europe", Flavor: "small", HourlyPrice: 1})
		},
			Problems{withHint(pr("prices[2]", "prices gce-europe/small again (first at [0])"), "keep one price per district and flavor")}},
		{"prices file type", func(c *Config) { c.Prices.Type = "price" },
			Problems{pr("type", `must be "prices", got "price"`)}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := pricedConfig()
			tc.mutate(&c)
			var got Problems
			if err := Validate(c); err != nil && !errors.As(err, &got) {
				t.Fatalf("Validate: %v", err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("problems (-want +got):\n%s", diff)
			}
		})
	}
}

// Load reads prices.json beside the others when it exists, and names
// it in its problems; a non-numeric price is refused with its path.
func TestLoadPrices(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	paths := Paths{
		Cluster: write("cluster.json", `{"type": "cluster", "id": "c", "platform": "swarm",
			"flavors": [{"flavor": "small", "cores": 1, "memory_gb": 1, "disk_gb": 10}],
			"deployments": [{"district": "a", "flavor": "small", "role": "master", "quantity": 1}],
			"budget": {"max_hourly": 1}}`),
		Districts: write("districts.json", `[{"type": "district", "id": "a", "provider": "local", "local_subnet": "10.9.0.0/24", "flavors": [{"flavor": "small"}]}]`),
		Prices:    filepath.Join(dir, "prices.json"),
	}
	if _, err := Load(paths); err == nil || !strings.Contains(err.Error(), `flavor "small" has no price in district "a"`) {
		t.Fatalf("a budget without prices.json: %v", err)
	}
	write("prices.json", `{"type": "prices", "prices": [{"district": "a", "flavor": "small", "hourly_price": "cheap"}]}`)
	if _, err := Load(paths); err == nil || !strings.Contains(err.Error(), "prices.json: prices[0].hourly_price: expected a number") {
		t.Fatalf("a non-numeric price: %v", err)
	}
	write("prices.json", `{"type": "prices", "prices": [{"district": "a", "flavor": "small", "hourly_price": 0.5}]}`)
	cfg, err := Load(paths)
	if err != nil {
		t.Fatal(err)
	}
	if p, ok := cfg.PriceTable().Hourly("a", "small"); !ok || p != 0.5 {
		t.Errorf("a/small costs %v, %v; want 0.5 from prices.json", p, ok)
	}
}
