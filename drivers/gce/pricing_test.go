package gce

import (
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/cloudtransit/transit/cloudsim/gce"
	"github.com/cloudtransit/transit/cloudsim/gcebilling"
	"github.com/cloudtransit/transit/districts"
	"github.com/cloudtransit/transit/provider"
)

// newPriceWorld is a world whose endpoint serves the Cloud Billing
// Catalog API beside Compute Engine, as cloudsim/server does, taking the
// same tokens.
func newPriceWorld(t *testing.T, opts gcebilling.Options) (*world, *gcebilling.Server) {
	t.Helper()
	w := newWorld(t)
	if opts.Authorize == nil {
		opts.Authorize = w.srv.Authorized
	}
	b := gcebilling.New(opts)
	compute := w.srv
	w.rec.Handler = http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if gcebilling.IsRequest(r) {
			b.ServeHTTP(rw, r)
			return
		}
		compute.ServeHTTP(rw, r)
	})
	return w, b
}

func inRegion(region string) func(*districts.District) {
	return func(d *districts.District) { d.GCERegion, d.GCEZones = region, []string{region + "-b"} }
}

// skuOf is the id of the catalogue's SKU described so.
func skuOf(t *testing.T, description string) string {
	t.Helper()
	for _, k := range gcebilling.DefaultCatalogue() {
		if k.Description == description {
			return k.ID
		}
	}
	t.Fatalf("no SKU %q in the catalogue", description)
	return ""
}

// Prices of predefined, shared-core and unpriceable types in two
// regions, from the real client over HTTP: core and RAM at the region's
// On-Demand rates, the decoys (Preemptible, Spot, commitments, sole
// tenancy, custom, GPU, other regions) passed over.
func TestPrices(t *testing.T) {
	t.Parallel()
	w, _ := newPriceWorld(t, gcebilling.Options{})
	got, err := Prices(t.Context(), w.district(inRegion("us-central1")), w.credential(),
		[]string{"n1-standard-2", "e2-standard-4", "n1-standard-2", "e2-micro", "f1-micro", "n2-standard-2"}, fast())
	if err != nil {
		t.Fatal(err)
	}
	n1c, n1r := skuOf(t, "N1 Predefined Instance Core running in Americas"), skuOf(t, "N1 Predefined Instance Ram running in Americas")
	e2c, e2r := skuOf(t, "E2 Instance Core running in Americas"), skuOf(t, "E2 Instance Ram running in Americas")
	n2c, n2r := skuOf(t, "N2 Instance Core running in Americas"), skuOf(t, "N2 Instance Ram running in Americas")
	want := []provider.Quote{
		{MachineType: "n1-standard-2", HourlyPrice: 0.0949995, Currency: "USD",
			Source: "GCE Cloud Billing Catalog: n1-standard-2, us-central1, On-Demand, 2 vCPU × USD 0.031611/h (SKU " + n1c + ", N1 Predefined Instance Core running in Americas) + 7.5 GiB × USD 0.004237/GiBy.h (SKU " + n1r + ", N1 Predefined Instance Ram running in Americas), effective 2025-11-01"},
		{MachineType: "e2-standard-4", HourlyPrice: 0.134012, Currency: "USD",
			Source: "GCE Cloud Billing Catalog: e2-standard-4, us-central1, On-Demand, 4 vCPU × USD 0.021811/h (SKU " + e2c + ", E2 Instance Core running in Americas) + 16 GiB × USD 0.002923/GiBy.h (SKU " + e2r + ", E2 Instance Ram running in Americas), effective 2025-11-01"},
		// Shared-core: a quarter of a vCPU, as Compute Engine bills it.
		{MachineType: "e2-micro", HourlyPrice: 0.00837575, Currency: "USD",
			Source: "GCE Cloud Billing Catalog: e2-micro, us-central1, On-Demand, 0.25 vCPU × USD 0.021811/h (SKU " + e2c + ", E2 Instance Core running in Americas) + 1 GiB × USD 0.002923/GiBy.h (SKU " + e2r + ", E2 Instance Ram running in Americas), effective 2025-11-01"},
		{MachineType: "f1-micro", HourlyPrice: 0.0076, Currency: "USD",
			Source: "GCE Cloud Billing Catalog: f1-micro, us-central1, On-Demand, 1 instance × USD 0.0076/h (SKU " + skuOf(t, "Micro Instance with burstable CPU running in Americas") + ", Micro Instance with burstable CPU running in Americas), effective 2025-11-01"},
		{MachineType: "n2-standard-2", HourlyPrice: 0.097118, Currency: "USD",
			Source: "GCE Cloud Billing Catalog: n2-standard-2, us-central1, On-Demand, 2 vCPU × USD 0.031611/h (SKU " + n2c + ", N2 Instance Core running in Americas) + 8 GiB × USD 0.004237/GiBy.h (SKU " + n2r + ", N2 Instance Ram running in Americas), effective 2025-11-01"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("us-central1 quotes (-want +got):\n%s", diff)
	}
	// The catalogue is read once, in USD; each type's shape is asked of
	// Compute Engine in the district's zone, but f1-micro's (priced per
	// instance).
	if n := len(w.rec.Sent("/skus?")); n != 1 {
		t.Errorf("%d SKU listings, want 1", n)
	}
	if n := len(w.rec.Sent("currencyCode=USD")); n != 1 {
		t.Errorf("%d SKU listings in USD, want 1", n)
	}
	for _, mt := range []string{"n1-standard-2", "e2-standard-4", "e2-micro", "n2-standard-2"} {
		if n := len(w.rec.Sent("GET /compute/v1/projects/" + project + "/zones/us-central1-b/machineTypes/" + mt + "?")); n != 1 {
			t.Errorf("%d machineTypes.get of %s, want 1", n, mt)
		}
	}

	got, err = Prices(t.Context(), w.district(), w.credential(),
		[]string{"n1-standard-2", "e2-medium", "n2-standard-2", "c2-standard-4", "n1-standard-3", "n1-custom-2-4096", "a2-highgpu-1g"}, fast())
	if err != nil {
		t.Fatal(err)
	}
	want = []provider.Quote{
		{MachineType: "n1-standard-2", HourlyPrice: 0.1045035, Currency: "USD",
			Source: "GCE Cloud Billing Catalog: n1-standard-2, europe-west1, On-Demand, 2 vCPU × USD 0.034773/h (SKU " + skuOf(t, "N1 Predefined Instance Core running in EMEA") + ", N1 Predefined Instance Core running in EMEA) + 7.5 GiB × USD 0.004661/GiBy.h (SKU " + skuOf(t, "N1 Predefined Instance Ram running in EMEA") + ", N1 Predefined Instance Ram running in EMEA), effective 2025-11-01"},
		{MachineType: "e2-medium", HourlyPrice: 0.036853, Currency: "USD",
			Source: "GCE Cloud Billing Catalog: e2-medium, europe-west1, On-Demand, 1 vCPU × USD 0.023993/h (SKU " + skuOf(t, "E2 Instance Core running in EMEA") + ", E2 Instance Core running in EMEA) + 4 GiB × USD 0.003215/GiBy.h (SKU " + skuOf(t, "E2 Instance Ram running in EMEA") + ", E2 Instance Ram running in EMEA), effective 2025-11-01"},
		// The catalogue has no N2 nor C2 SKUs in EMEA.
		{MachineType: "n2-standard-2", Currency: "USD",
			Unpriced: `the Cloud Billing Catalog API has no On-Demand "N2 Instance Core running in …" SKU per h in europe-west1`},
		{MachineType: "c2-standard-4", Currency: "USD",
			Unpriced: `the Cloud Billing Catalog API has no On-Demand "Compute optimized Core running in …" SKU per h in europe-west1`},
		{MachineType: "n1-standard-3", Currency: "USD", Unpriced: "Compute Engine has no machine type n1-standard-3 in zone europe-west1-b"},
		{MachineType: "n1-custom-2-4096", Currency: "USD",
			Unpriced: "n1-custom-2-4096 is a custom machine type: the Cloud Billing Catalog API prices it by Custom SKUs, which transit does not read"},
		{MachineType: "a2-highgpu-1g", Currency: "USD",
			Unpriced: "transit does not know the SKUs the Cloud Billing Catalog API prices the a2 family by (it reads n1, e2, n2, n2d, c2, t2d, c3, f1-micro and g1-small)"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("europe-west1 quotes (-want +got):\n%s", diff)
	}
}

// The SKU a node runs on is the On-Demand one: a SKU of the same
// description on other terms, of another resource family or in another
// unit is not taken; two On-Demand prices for one part are the reviewer's to choose.
func TestPricesTermsAndAmbiguity(t *testing.T) {
	t.Parallel()
	skus := gcebilling.DefaultCatalogue()
	skus = append(skus,
		gcebilling.SKU{ID: "DEC0-0000-0001", Service: gcebilling.ComputeEngineID, Description: "E2 Instance Core running in Americas",
			ResourceFamily: "Compute", ResourceGroup: "CPU", UsageType: "Commit1Yr", Regions: []string{"us-central1"}, Unit: "h", USD: 0.0137},
		gcebilling.SKU{ID: "DEC0-0000-0002", Service: gcebilling.ComputeEngineID, Description: "E2 Instance Ram running in Americas",
			ResourceFamily: "License", ResourceGroup: "RAM", UsageType: "OnDemand", Regions: []string{"us-central1"}, Unit: "GiBy.h", USD: 0.001},
		gcebilling.SKU{ID: "DEC0-0000-0004", Service: gcebilling.ComputeEngineID, Description: "E2 Instance Ram running in Americas",
			ResourceFamily: "Compute", ResourceGroup: "RAM", UsageType: "OnDemand", Regions: []string{"us-central1"}, Unit: "GiBy.mo", USD: 2.1338},
		gcebilling.SKU{ID: "DEC0-0000-0003", Service: gcebilling.ComputeEngineID, Description: "N1 Predefined Instance Ram running in Iowa",
			ResourceFamily: "Compute", ResourceGroup: "N1Standard", UsageType: "OnDemand", Regions: []string{"us-central1"}, Unit: "GiBy.h", USD: 0.0045},
	)
	w, _ := newPriceWorld(t, gcebilling.Options{SKUs: skus})
	got, err := Prices(t.Context(), w.district(inRegion("us-central1")), w.credential(), []string{"e2-small", "n1-standard-1"}, fast())
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 {
		t.Fatalf("quotes %+v, want 2", got)
	}
	if got[0].HourlyPrice != 0.0167515 || !got[0].Priced() {
		t.Errorf("e2-small: %+v, want 0.5 vCPU × 0.021811 + 2 GiB × 0.002923 = 0.0167515", got[0])
	}
	if got[1].Priced() || got[1].Unpriced != `the Cloud Billing Catalog API has 2 On-Demand "N1 Predefined Instance Ram running in …" prices per GiBy.h in us-central1 (0.004237, 0.0045): which one is yours is for you to say` {
		t.Errorf("n1-standard-1 with two RAM prices: %+v", got[1])
	}
}

// Compute Engine's service is found by its name, on whatever page and
// under whatever id, and every page of SKUs is read.
func TestPricesReadEveryPage(t *testing.T) {
	t.Parallel()
	services := gcebilling.DefaultServices()
	var skus []gcebilling.SKU
	for _, k := range gcebilling.DefaultCatalogue() {
		if k.Service == gcebilling.ComputeEngineID {
			k.Service = "ABCD-0000-EF12"
		}
		skus = append(skus, k)
	}
	for i := range services {
		if services[i].ID == gcebilling.ComputeEngineID {
			services[i].ID = "ABCD-0000-EF12"
		}
	}
	w, srv := newPriceWorld(t, gcebilling.Options{Services: services, SKUs: skus})
	srv.SetPageSize(2)
	got, err := Prices(t.Context(), w.district(), w.credential(), []string{"n1-standard-2", "g1-small"}, fast())
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].HourlyPrice != 0.1045035 || got[1].HourlyPrice != 0.0283 {
		t.Errorf("quotes %+v, want n1-standard-2 at 0.1045035 and g1-small at 0.0283", got)
	}
	n := 0
	for _, k := range skus {
		if k.Service == "ABCD-0000-EF12" {
			n++
		}
	}
	if pages, sent := (n+1)/2, len(w.rec.Sent("GET /v1/services/ABCD-0000-EF12/skus?")); sent != pages {
		t.Errorf("%d SKU pages asked, want all %d", sent, pages)
	}
	if sent := len(w.rec.Sent("GET /v1/services?")); sent < 2 {
		t.Errorf("%d service pages asked: Compute Engine is not on the first", sent)
	}
}

// A failed page fails the call, naming the district and the listing,
// after the retries: no partial answer.
func TestPricesFailedPage(t *testing.T) {
	t.Parallel()
	w, srv := newPriceWorld(t, gcebilling.Options{})
	srv.SetPageSize(50)
	srv.FailPages(1000)
	got, err := Prices(t.Context(), w.district(), w.credential(), []string{"n1-standard-2"}, fast())
	if err == nil {
		t.Fatalf("Prices with failing later pages: %+v, want an error", got)
	}
	for _, s := range []string{`gce district "gce-test"`, "list the SKUs of Compute Engine", "500"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q does not say %q", err, s)
		}
	}
	if n := len(w.rec.Sent("pageToken=")); n != fast().RetryMaxAttempts {
		t.Errorf("%d requests for the second page, want the %d attempts", n, fast().RetryMaxAttempts)
	}
}

// A key the cloud does not know is refused at the token endpoint, and a
// token the catalog refuses is refused there: both ErrCloudAuth naming
// the credential, without the key.
func TestPricesRefusedCredential(t *testing.T) {
	t.Parallel()
	w, _ := newPriceWorld(t, gcebilling.Options{})
	other, err := gce.NewKey(project, "intruder@transit-test-1.iam.gserviceaccount.com", w.url+gce.TokenPath)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "other.json")
	writeFile(t, file, other)
	cred := &districts.Credential{Type: "credential", ID: "gce-other", Provider: districts.ProviderGCE, GCEKeyFile: file}
	_, err = Prices(t.Context(), w.district(), cred, []string{"n1-standard-2"}, fast())
	w.wantKind(err, provider.ErrCloudAuth)
	for _, s := range []string{`gce district "gce-test"`, `credential "gce-other"`, "token endpoint refused"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q does not say %q", err, s)
		}
	}
	for _, l := range strings.Split(string(other), `\n`) {
		if len(l) > 40 && strings.Contains(err.Error(), l) {
			t.Errorf("auth error shows the key: %v", err)
		}
	}

	refusing, _ := newPriceWorld(t, gcebilling.Options{Authorize: func(*http.Request) bool { return false }})
	_, err = Prices(t.Context(), refusing.district(), refusing.credential(), []string{"n1-standard-2"}, fast())
	refusing.wantKind(err, provider.ErrCloudAuth)
	for _, s := range []string{`gce district "gce-test"`, `the Cloud Billing Catalog API refused credential "gce-cred"`, "(401)"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q does not say %q", err, s)
		}
	}
}

// A district that is not a complete GCE district is refused before any
// request.
func TestPricesInvalidDistrict(t *testing.T) {
	t.Parallel()
	w, _ := newPriceWorld(t, gcebilling.Options{})
	_, err := Prices(t.Context(), w.district(func(d *districts.District) { d.GCEZones = nil }), w.credential(), []string{"n1-standard-2"}, fast())
	if err == nil || !strings.Contains(err.Error(), "gce_zones: missing") {
		t.Errorf("a district without zones: %v, want gce_zones: missing", err)
	}
	if n := len(w.rec.Sent("")); n != 0 {
		t.Errorf("%d requests for an invalid district, want none", n)
	}
}
