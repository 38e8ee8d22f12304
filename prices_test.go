package transit

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/cloudtransit/transit/cloudsim/gce"
	"github.com/cloudtransit/transit/cloudsim/server"
	"github.com/cloudtransit/transit/districts"
)

// startGCEPrices starts the emulator's Google endpoint accepting one
// service account, and writes that account's key file (its token_uri the
// emulator's) and a credentials.json naming it as gce_default.
func startGCEPrices(t *testing.T, dir string) *server.Emulator {
	t.Helper()
	keyFile := filepath.Join(dir, "gce-key.json")
	key, err := gce.NewKey("transit-test-1", "transit@transit-test-1.iam.gserviceaccount.com", "http://127.0.0.1:1"+gce.TokenPath)
	if err != nil {
		t.Fatal(err)
	}
	writeTestJSON(t, keyFile, json.RawMessage(key))
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
	// The emulator's port is known now: the same key, pointed at it.
	var k map[string]any
	if err := json.Unmarshal(key, &k); err != nil {
		t.Fatal(err)
	}
	k["token_uri"] = e.GCEURL + gce.TokenPath
	writeTestJSON(t, keyFile, k)
	writeTestJSON(t, filepath.Join(dir, "credentials.json"), []districts.Credential{cred})
	return e
}

func writeTestJSON(t *testing.T, path string, v any) {
	t.Helper()
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// The built-in GCE price list asks the Cloud Billing Catalog through the
// district's gce_endpoint with its credential: predefined and shared-core
// types priced, a type the catalog lacks and a district in another
// currency unpriced, saying why.
func TestAskPricesBuiltinGCE(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	e := startGCEPrices(t, dir)
	ds := []districts.District{
		{Type: "district", ID: "gce-us", Provider: districts.ProviderGCE, CredentialID: "gce_default", GCEProjectID: "transit-test-1",
			GCERegion: "us-central1", GCEZones: []string{"us-central1-b"}, GCEEndpoint: e.GCEURL, Flavors: []districts.DistrictFlavor{
				{Flavor: "small", MachineType: "e2-small"}, {Flavor: "med", MachineType: "n1-standard-2"}, {Flavor: "big", MachineType: "c2-standard-4"},
			}},
		{Type: "district", ID: "gce-eur", Provider: districts.ProviderGCE, CredentialID: "gce_default", GCEProjectID: "transit-test-1",
			GCERegion: "europe-west1", GCEZones: []string{"europe-west1-b"}, GCEEndpoint: e.GCEURL, Currency: "EUR",
			Flavors: []districts.DistrictFlavor{{Flavor: "small", MachineType: "n1-standard-1"}}},
	}
	writeTestJSON(t, filepath.Join(dir, "districts.json"), ds)
	r, err := AskPrices(t.Context(), PricesOptions{
		Files: districts.Paths{Districts: filepath.Join(dir, "districts.json"), Credentials: filepath.Join(dir, "credentials.json"),
			Prices: filepath.Join(dir, "prices.json")},
		PriceLists: BuiltinDrivers(BuiltinOptions{}).PriceLists,
	})
	if err != nil {
		t.Fatal(err)
	}
	type price struct {
		Flavor, MachineType string
		HourlyPrice         float64
		Source              string
	}
	var got []price
	for _, p := range r.List.Prices {
		src, _, _ := strings.Cut(p.Source, " × ")
		got = append(got, price{p.District + "/" + p.Flavor, p.MachineType, p.HourlyPrice, src})
	}
	want := []price{
		{"gce-us/small", "e2-small", 0.0167515, "GCE Cloud Billing Catalog: e2-small, us-central1, On-Demand, 0.5 vCPU"},
		{"gce-us/med", "n1-standard-2", 0.0949995, "GCE Cloud Billing Catalog: n1-standard-2, us-central1, On-Demand, 2 vCPU"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("prices (-want +got):\n%s", diff)
	}
	if r.List.Currency != "USD" {
		t.Errorf("currency %q, want USD", r.List.Currency)
	}
	reasons := map[string]string{}
	for _, u := range r.Unpriced {
		reasons[u.District+"/"+u.Flavor] = u.Reason
	}
	for flavor, reason := range map[string]string{
		"gce-us/big":    `has no On-Demand "Compute optimized Core running in …" SKU per h in us-central1`,
		"gce-eur/small": "the district prices in EUR",
	} {
		if !strings.Contains(reasons[flavor], reason) {
			t.Errorf("%s unpriced for %q, want %q", flavor, reasons[flavor], reason)
		}
	}
	if len(r.Unpriced) != 2 {
		t.Errorf("unpriced %+v, want gce-us/big and gce-eur/small", r.Unpriced)
	}
}
