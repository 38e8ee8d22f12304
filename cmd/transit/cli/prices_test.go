package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cloudtransit/transit"
	"github.com/cloudtransit/transit/clock/clocktest"
	gcesim "github.com/cloudtransit/transit/cloudsim/gce"
	"github.com/cloudtransit/transit/cloudsim/server"
	"github.com/cloudtransit/transit/districts"
	"github.com/cloudtransit/transit/drivers/aws"
	"github.com/cloudtransit/transit/drivers/cloudutil"
	"github.com/cloudtransit/transit/drivers/gce"
	"github.com/cloudtransit/transit/provider"
)

// priceCloud is cloudsim's AWS endpoint (EC2 and the Price List Query
// API) on loopback behind a proxy that counts the requests for a next
// page and, with failNext, is a harsh double failing each of them.
type priceCloud struct {
	emu      *server.Emulator
	url      string // the proxy's: the districts' aws_endpoint
	nextSeen atomic.Int64
	failNext atomic.Bool
}

func newPriceCloud(t *testing.T) *priceCloud {
	t.Helper()
	e, err := server.Start(t.Context(), server.Options{AWS: "127.0.0.1:0", Credentials: []districts.Credential{
		{Type: "credential", ID: "aws_default", Provider: districts.ProviderAWS, AWSAccessKeyID: "AKID", AWSSecretAccessKey: "SECRET"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := e.Close(context.WithoutCancel(t.Context())); err != nil {
			t.Error(err)
		}
	})
	// Every product on a page of its own: each query reads a second page.
	e.Pricing.SetPageSize(1)
	target, err := url.Parse(e.AWSURL)
	if err != nil {
		t.Fatal(err)
	}
	c := &priceCloud{emu: e}
	proxy := httputil.NewSingleHostReverseProxy(target)
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body := new(strings.Builder)
		if r.Body != nil {
			b, _ := readAllString(r)
			body.WriteString(b)
		}
		if strings.Contains(body.String(), `"NextToken"`) {
			c.nextSeen.Add(1)
			if c.failNext.Load() {
				w.Header().Set("Content-Type", "application/x-amz-json-1.1")
				w.Header().Set("X-Amzn-ErrorType", "InternalErrorException")
				w.WriteHeader(http.StatusInternalServerError)
				fmt.Fprint(w, `{"__type":"InternalErrorException","Message":"An internal error occurred."}`)
				return
			}
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(ts.Close)
	c.url = ts.URL
	return c
}

func readAllString(r *http.Request) (string, error) {
	var b strings.Builder
	buf := make([]byte, 4096)
	for {
		n, err := r.Body.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			r.Body = readCloser{strings.NewReader(b.String())}
			return b.String(), nil
		}
	}
}

type readCloser struct{ *strings.Reader }

func (readCloser) Close() error { return nil }

// priceHarness is the paper's files with districts the price lists know:
// AWS ones on the emulator, the paper's GCE one and a local one.
func priceHarness(t *testing.T, c *priceCloud) *harness {
	t.Helper()
	h := newHarness(t)
	h.clock = clocktest.NewFake(time.Date(2026, 3, 1, 10, 30, 0, 0, time.UTC))
	// The real AWS price list on the emulator, with a test's waits.
	h.priceLists = map[string]transit.PriceListFunc{
		districts.ProviderAWS: func(ctx context.Context, d districts.District, cred *districts.Credential, types []string) ([]provider.Quote, error) {
			return aws.Prices(ctx, d, cred, types, aws.Options{Waits: cloudutil.Waits{RetryMaxAttempts: 3, RetryBaseDelay: time.Millisecond, RetryMaxDelay: 5 * time.Millisecond}})
		},
	}
	writeDistricts(t, h, c.url, nil)
	return h
}

// writeDistricts writes the test's districts.json; edit changes the AWS
// Frankfurt district's flavors.
func writeDistricts(t *testing.T, h *harness, endpoint string, edit func(*[]districts.DistrictFlavor)) {
	t.Helper()
	price := 0.25
	frankfurt := []districts.DistrictFlavor{
		{Flavor: "small", InstanceType: "m3.medium"},
		{Flavor: "med", InstanceType: "m4.large"},
		{Flavor: "large", InstanceType: "m4.xlarge", HourlyPrice: &price},
		{Flavor: "huge", InstanceType: "x9.huge"},
	}
	if edit != nil {
		edit(&frankfurt)
	}
	ds := []districts.District{
		{Type: "district", ID: "gce-europe", Provider: districts.ProviderGCE, CredentialID: "gce_default", GCEProjectID: "your-proj-id",
			GCERegion: "europe-west1", GCEZones: []string{"europe-west1-b", "europe-west1-c"}, Flavors: []districts.DistrictFlavor{
				{Flavor: "small", MachineType: "n1-standard-1"}, {Flavor: "med", MachineType: "n1-standard-2"}, {Flavor: "large", MachineType: "n1-standard-4"},
			}},
		{Type: "district", ID: "aws-europe", Provider: districts.ProviderAWS, CredentialID: "aws_default", AWSRegion: "eu-central-1",
			AWSEndpoint: endpoint, Flavors: frankfurt},
		{Type: "district", ID: "aws-ireland", Provider: districts.ProviderAWS, CredentialID: "aws_default", AWSRegion: "eu-west-1",
			AWSEndpoint: endpoint, Flavors: []districts.DistrictFlavor{{Flavor: "small", InstanceType: "t3.small"}}},
		{Type: "district", ID: "local-a", Provider: districts.ProviderLocal, LocalSubnet: "10.240.1.0/24",
			Flavors: []districts.DistrictFlavor{{Flavor: "small"}}},
	}
	writeJSONFile(t, h.path("districts.json"), ds)
}

func (h *harness) prices(t *testing.T, args ...string) result {
	t.Helper()
	return h.run(t, runOpts{}, append([]string{"prices", "--prices", h.path("prices.json")}, args...)...)
}

// The review, the write, the review of a file up to date, and one after
// districts.json changed; the written file loads with the paper's files.
func TestPricesReviewThenWrite(t *testing.T) {
	t.Parallel()
	c := newPriceCloud(t)
	h := priceHarness(t, c)

	r := h.prices(t)
	wantCode(t, r, ExitUnpriced)
	golden(t, "prices-review.golden", strings.ReplaceAll(r.out, h.dir, "DIR"))
	if _, err := os.Stat(h.path("prices.json")); !os.IsNotExist(err) {
		t.Fatalf("prices without --write wrote prices.json (%v)", err)
	}
	if n := c.nextSeen.Load(); n < 3 {
		t.Errorf("%d requests for a second page, want one per instance type asked (3)", n)
	}

	r = h.prices(t, "--write")
	wantCode(t, r, ExitUnpriced)
	if !strings.Contains(r.out, "Wrote "+h.path("prices.json")+": 3 to add, 0 to change, 0 to remove, 0 unchanged.") {
		t.Errorf("prices --write does not say what it wrote:\n%s", r)
	}
	pl, ok, err := districts.ReadPriceList(h.path("prices.json"))
	if err != nil || !ok {
		t.Fatalf("read the written prices.json: %v (found %v)", err, ok)
	}
	got := map[string]districts.Price{}
	for _, p := range pl.Prices {
		got[p.District+"/"+p.Flavor] = p
	}
	if pl.Type != "prices" || pl.Currency != "USD" || !pl.Made.Equal(time.Date(2026, 3, 1, 10, 30, 0, 0, time.UTC)) || len(pl.Prices) != 3 {
		t.Errorf("prices.json: %+v", pl)
	}
	if p := got["aws-europe/small"]; p.MachineType != "m3.medium" || p.HourlyPrice != 0.0773 ||
		!strings.HasPrefix(p.Source, "AWS Price List: m3.medium, EU (Frankfurt), Linux, Shared, On-Demand, USD 0.0773/Hrs") {
		t.Errorf("aws-europe/small: %+v", p)
	}
	if _, shadowed := got["aws-europe/large"]; shadowed {
		t.Error("prices.json prices aws-europe/large, which districts.json prices (its price would be shadowed)")
	}
	for _, unpriced := range []string{"aws-europe/huge", "gce-europe/small", "local-a/small"} {
		if p, ok := got[unpriced]; ok {
			t.Errorf("prices.json prices %s (%+v), which no list priced", unpriced, p)
		}
	}
	if v := h.run(t, runOpts{}, "validate", "--prices", h.path("prices.json")); v.code != 0 {
		t.Errorf("the written prices.json does not validate:\n%s", v)
	}

	r = h.prices(t, "--write")
	wantCode(t, r, ExitUnpriced)
	if !strings.Contains(r.out, h.path("prices.json")+" is up to date: 0 to add, 0 to change, 0 to remove, 3 unchanged.") {
		t.Errorf("a second run does not say the file is up to date:\n%s", r)
	}

	// districts.json moves med to another type and prices small itself.
	writeDistricts(t, h, c.url, func(fs *[]districts.DistrictFlavor) {
		p := 0.07
		(*fs)[0].HourlyPrice = &p
		(*fs)[1].InstanceType = "m5.large"
	})
	r = h.prices(t)
	wantCode(t, r, ExitUnpriced)
	golden(t, "prices-changed.golden", strings.ReplaceAll(r.out, h.dir, "DIR"))

	// --json carries the same, and the unpriced flavors.
	r = h.prices(t, "--json")
	wantCode(t, r, ExitUnpriced)
	var v pricesJSON
	if err := json.Unmarshal([]byte(r.out), &v); err != nil {
		t.Fatalf("prices --json: %v\n%s", err, r.out)
	}
	if v.Type != "prices" || v.FormatVersion != FormatVersion || v.Written || !v.Changes || v.AllPriced || len(v.Diff) != 2 || len(v.Prices) != 2 ||
		len(v.Unpriced) != 5 || len(v.Districts) != 2 {
		t.Errorf("prices --json: %+v", v)
	}
}

// Every district flavor priced: exit 0.
func TestPricesAllPriced(t *testing.T) {
	t.Parallel()
	c := newPriceCloud(t)
	h := priceHarness(t, c)
	ds := []districts.District{{Type: "district", ID: "aws-ireland", Provider: districts.ProviderAWS, CredentialID: "aws_default", AWSRegion: "eu-west-1",
		AWSEndpoint: c.url, Flavors: []districts.DistrictFlavor{{Flavor: "small", InstanceType: "t3.small"}, {Flavor: "med", InstanceType: "m5.large"}}}}
	writeJSONFile(t, h.path("districts.json"), ds)
	r := h.prices(t, "--write", "--out", h.path("new-prices.json"))
	wantCode(t, r, ExitOK)
	for _, s := range []string{"Wrote " + h.path("new-prices.json") + ": 2 to add", "transit reads prices from " + h.path("prices.json") + "; give it --prices " + h.path("new-prices.json")} {
		if !strings.Contains(r.out, s) {
			t.Errorf("output does not say %q:\n%s", s, r)
		}
	}
	if strings.Contains(r.out, "unpriced") {
		t.Errorf("output names unpriced flavors:\n%s", r)
	}
}

// A credential the price list refuses: exit 1, the district and the
// credential named, nothing written.
func TestPricesRefusedCredential(t *testing.T) {
	t.Parallel()
	c := newPriceCloud(t)
	h := priceHarness(t, c)
	creds := `[{"type": "credential", "id": "gce_default", "provider": "gce", "gce_key_file": "path-to-key.json"},
	{"type": "credential", "id": "aws_default", "provider": "aws", "aws_access_key_id": "AKIDOTHER", "aws_secret_access_key": "SECRET"}]`
	if err := os.WriteFile(h.path("credentials.json"), []byte(creds), 0o600); err != nil {
		t.Fatal(err)
	}
	r := h.prices(t, "--write")
	wantCode(t, r, ExitError)
	for _, s := range []string{`district "aws-europe"`, `district "aws-ireland"`, `credential "aws_default"`, "UnrecognizedClientException", "nothing is written"} {
		if !strings.Contains(r.err, s) {
			t.Errorf("stderr does not say %q:\n%s", s, r)
		}
	}
	if strings.Contains(r.err, "SECRET") {
		t.Errorf("stderr shows the secret:\n%s", r)
	}
	if _, err := os.Stat(h.path("prices.json")); !os.IsNotExist(err) {
		t.Errorf("a refused credential wrote prices.json (%v)", err)
	}
}

// The emulator fails the second page: exit 1, a clear error, and the
// existing prices.json left as it was.
func TestPricesFailedSecondPage(t *testing.T) {
	t.Parallel()
	c := newPriceCloud(t)
	h := priceHarness(t, c)
	old := `{"type": "prices", "currency": "USD", "prices": [{"district": "aws-europe", "flavor": "small", "machine_type": "m3.medium", "hourly_price": 0.5}]}` + "\n"
	if err := os.WriteFile(h.path("prices.json"), []byte(old), 0o644); err != nil {
		t.Fatal(err)
	}
	c.failNext.Store(true)
	r := h.prices(t, "--write")
	wantCode(t, r, ExitError)
	for _, s := range []string{"asking the price lists failed, nothing is written", `aws district "aws-europe"`, "in eu-central-1", "InternalErrorException"} {
		if !strings.Contains(r.err, s) {
			t.Errorf("stderr does not say %q:\n%s", s, r)
		}
	}
	if got, err := os.ReadFile(h.path("prices.json")); err != nil || string(got) != old {
		t.Errorf("prices.json after a failed run: %q, %v; want it unchanged", got, err)
	}
}

func TestPricesBadInput(t *testing.T) {
	t.Parallel()
	c := newPriceCloud(t)
	for _, tc := range []struct {
		name   string
		prices string // prices.json's content, "" for none
		setup  func(t *testing.T, h *harness)
		args   []string
		want   []string
	}{
		{name: "prices.json not JSON", prices: `{"type": "prices", "prices": [`, want: []string{"prices.json", "correct it, or move it away"}},
		{name: "prices.json of an unknown key", prices: `{"type": "prices", "prices": [], "discount": 0.1}`, want: []string{"prices.json", "discount"}},
		{name: "districts.json invalid", setup: func(t *testing.T, h *harness) {
			if err := os.WriteFile(h.path("districts.json"), []byte(`[{"type": "district", "id": "x", "provider": "aws", "flavors": [{"flavor": "small", "instance_type": "t3.small", "hourly_price": -1}]}]`), 0o600); err != nil {
				t.Fatal(err)
			}
		}, want: []string{"districts.json", "hourly_price"}},
		{name: "argument", args: []string{"extra"}, want: []string{"unknown command"}},
		{name: "currency of another district", setup: func(t *testing.T, h *harness) {
			writeDistricts(t, h, c.url, func(fs *[]districts.DistrictFlavor) { *fs = (*fs)[:2] })
			ds := []districts.District{}
			data, err := os.ReadFile(h.path("districts.json"))
			if err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(data, &ds); err != nil {
				t.Fatal(err)
			}
			p := 0.05
			ds[3].Currency = "EUR"
			ds[3].Flavors[0].HourlyPrice = &p
			writeJSONFile(t, h.path("districts.json"), ds)
		}, want: []string{"would not load", "EUR", "USD"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := priceHarness(t, c)
			if tc.prices != "" {
				if err := os.WriteFile(h.path("prices.json"), []byte(tc.prices), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if tc.setup != nil {
				tc.setup(t, h)
			}
			r := h.prices(t, append([]string{"--write"}, tc.args...)...)
			wantCode(t, r, ExitError)
			for _, s := range tc.want {
				if !strings.Contains(r.err, s) {
					t.Errorf("stderr does not say %q:\n%s", s, r)
				}
			}
			if got, _ := os.ReadFile(h.path("prices.json")); string(got) != tc.prices {
				t.Errorf("prices.json changed: %q", got)
			}
		})
	}
}

// GCE districts priced end to end: transit prices asks the emulator's
// Cloud Billing Catalog and Compute Engine with the district's key file,
// writes the prices it found with their sources, and names what the
// catalog does not price.
func TestPricesGCE(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.clock = clocktest.NewFake(time.Date(2026, 3, 1, 10, 30, 0, 0, time.UTC))
	keyFile := h.path("gce-key.json")
	key, err := gcesim.NewKey("transit-test-1", "transit@transit-test-1.iam.gserviceaccount.com", "http://127.0.0.1:1"+gcesim.TokenPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, key, 0o600); err != nil {
		t.Fatal(err)
	}
	cred := districts.Credential{Type: "credential", ID: "gce_default", Provider: districts.ProviderGCE, GCEKeyFile: keyFile}
	e, err := server.Start(t.Context(), server.Options{GCE: "127.0.0.1:0", Credentials: []districts.Credential{cred}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := e.Close(context.WithoutCancel(t.Context())); err != nil {
			t.Error(err)
		}
	})
	e.GCEBilling.SetPageSize(20) // several pages
	var k map[string]any
	if err := json.Unmarshal(key, &k); err != nil {
		t.Fatal(err)
	}
	k["token_uri"] = e.GCEURL + gcesim.TokenPath
	writeJSONFile(t, keyFile, k)
	writeJSONFile(t, h.path("credentials.json"), []districts.Credential{cred})
	h.priceLists = map[string]transit.PriceListFunc{
		districts.ProviderGCE: func(ctx context.Context, d districts.District, cred *districts.Credential, types []string) ([]provider.Quote, error) {
			return gce.Prices(ctx, d, cred, types, gce.Options{Waits: cloudutil.Waits{RetryMaxAttempts: 3, RetryBaseDelay: time.Millisecond, RetryMaxDelay: 5 * time.Millisecond}})
		},
	}
	writeJSONFile(t, h.path("districts.json"), []districts.District{
		{Type: "district", ID: "gce-europe", Provider: districts.ProviderGCE, CredentialID: "gce_default", GCEProjectID: "transit-test-1",
			GCERegion: "europe-west1", GCEZones: []string{"europe-west1-b", "europe-west1-c"}, GCEEndpoint: e.GCEURL, Flavors: []districts.DistrictFlavor{
				{Flavor: "small", MachineType: "n1-standard-1"}, {Flavor: "med", MachineType: "e2-medium"}, {Flavor: "large", MachineType: "n2-standard-4"},
			}},
	})

	r := h.prices(t, "--write")
	wantCode(t, r, ExitUnpriced)
	for _, s := range []string{"Wrote " + h.path("prices.json") + ": 2 to add", `has no On-Demand "N2 Instance Core running in …" SKU per h in europe-west1`} {
		if !strings.Contains(r.out, s) {
			t.Errorf("output does not say %q:\n%s", s, r)
		}
	}
	pl, ok, err := districts.ReadPriceList(h.path("prices.json"))
	if err != nil || !ok {
		t.Fatalf("read the written prices.json: %v (found %v)", err, ok)
	}
	got := map[string]districts.Price{}
	for _, p := range pl.Prices {
		got[p.District+"/"+p.Flavor] = p
	}
	if pl.Currency != "USD" || len(pl.Prices) != 2 {
		t.Errorf("prices.json: %+v", pl)
	}
	// n1-standard-1: 1 vCPU × 0.034773 + 3.75 GiB × 0.004661.
	if p := got["gce-europe/small"]; p.MachineType != "n1-standard-1" || p.HourlyPrice != 0.05225175 ||
		!strings.HasPrefix(p.Source, "GCE Cloud Billing Catalog: n1-standard-1, europe-west1, On-Demand, 1 vCPU × USD 0.034773/h (SKU ") {
		t.Errorf("gce-europe/small: %+v", p)
	}
	// e2-medium: 1 (shared) vCPU × 0.023993 + 4 GiB × 0.003215.
	if p := got["gce-europe/med"]; p.MachineType != "e2-medium" || p.HourlyPrice != 0.036853 {
		t.Errorf("gce-europe/med: %+v", p)
	}
	if _, ok := got["gce-europe/large"]; ok {
		t.Error("prices.json prices gce-europe/large, which the catalog does not price in europe-west1")
	}
}
