package gcebilling

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"
)

func serve(t *testing.T, opts Options) (*Server, string) {
	t.Helper()
	s := New(opts)
	ts := httptest.NewServer(s)
	t.Cleanup(ts.Close)
	return s, ts.URL
}

// get asks path with query q and a bearer token; it returns the status
// and the decoded body.
func get(t *testing.T, base, path string, q url.Values) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), "GET", base+path+"?"+q.Encode(), nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer test")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	var out map[string]any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatalf("GET %s: not JSON: %s", path, b)
	}
	return resp.StatusCode, out
}

// skus reads every page of a service's SKUs.
func skus(t *testing.T, base, service string, q url.Values) (all []map[string]any, pages int) {
	t.Helper()
	for {
		code, out := get(t, base, "/v1/services/"+service+"/skus", q)
		if code != 200 {
			t.Fatalf("GET skus %v: %d %v", q, code, out)
		}
		pages++
		for _, s := range out["skus"].([]any) {
			all = append(all, s.(map[string]any))
		}
		next, _ := out["nextPageToken"].(string)
		if next == "" {
			return all, pages
		}
		q.Set("pageToken", next)
	}
}

// Services and SKUs as the API writes them: money as units (a string)
// and nanos, enums as numbers when asked, every SKU of the service over
// the pages, none of another's.
func TestListSKUs(t *testing.T) {
	t.Parallel()
	s, base := serve(t, Options{})
	code, out := get(t, base, "/v1/services", nil)
	if code != 200 {
		t.Fatalf("GET services: %d %v", code, out)
	}
	var names []string
	for _, sv := range out["services"].([]any) {
		names = append(names, sv.(map[string]any)["displayName"].(string))
	}
	if !slices.Contains(names, "Compute Engine") || !slices.Contains(names, "Cloud Storage") {
		t.Errorf("services %v, want Compute Engine and Cloud Storage", names)
	}

	want := 0
	for _, k := range DefaultCatalogue() {
		if k.Service == ComputeEngineID {
			want++
		}
	}
	s.SetPageSize(10)
	all, pages := skus(t, base, ComputeEngineID, url.Values{"$alt": {"json;enum-encoding=int"}})
	if len(all) != want || pages != (want+9)/10 {
		t.Errorf("%d SKUs in %d pages, want %d in %d", len(all), pages, want, (want+9)/10)
	}
	var core map[string]any
	for _, k := range all {
		if k["category"].(map[string]any)["serviceDisplayName"] != "Compute Engine" {
			t.Errorf("SKU %v is not Compute Engine's", k["description"])
		}
		if k["description"] == "N1 Predefined Instance Core running in Americas" {
			core = k
		}
	}
	if core == nil {
		t.Fatal("no N1 Americas core SKU")
	}
	price := core["pricingInfo"].([]any)[0].(map[string]any)["pricingExpression"].(map[string]any)
	rate := price["tieredRates"].([]any)[0].(map[string]any)["unitPrice"].(map[string]any)
	if price["usageUnit"] != "h" || rate["currencyCode"] != "USD" || rate["units"] != "0" || rate["nanos"] != float64(31611000) {
		t.Errorf("N1 Americas core priced %v, want USD 0 units 31611000 nanos per h", price)
	}
	if geo := core["geoTaxonomy"].(map[string]any); geo["type"] != float64(3) || !slices.Contains(core["serviceRegions"].([]any), any("us-east1")) {
		t.Errorf("N1 Americas core: geoTaxonomy %v, serviceRegions %v", geo, core["serviceRegions"])
	}

	// Converted on request, the rate said.
	eur, _ := skus(t, base, ComputeEngineID, url.Values{"currencyCode": {"EUR"}})
	for _, k := range eur {
		info := k["pricingInfo"].([]any)[0].(map[string]any)
		rate := info["pricingExpression"].(map[string]any)["tieredRates"].([]any)[0].(map[string]any)["unitPrice"].(map[string]any)
		if k["description"] == "N1 Predefined Instance Core running in Americas" &&
			(rate["currencyCode"] != "EUR" || rate["nanos"] != float64(29082120) || info["currencyConversionRate"] != 0.92) {
			t.Errorf("N1 Americas core in EUR: %v", info)
		}
	}
	if code, _ := get(t, base, "/v1/services/"+ComputeEngineID+"/skus", url.Values{"currencyCode": {"XXX"}}); code != 400 {
		t.Errorf("an unknown currency: %d, want 400", code)
	}
	if code, _ := get(t, base, "/v1/services/0000-0000-0000/skus", nil); code != 404 {
		t.Errorf("an unknown service: %d, want 404", code)
	}
}

// A page token belongs to its query; FailPages fails the later pages.
func TestPageTokens(t *testing.T) {
	t.Parallel()
	s, base := serve(t, Options{PageSize: 5})
	_, out := get(t, base, "/v1/services/"+ComputeEngineID+"/skus", nil)
	tok, _ := out["nextPageToken"].(string)
	if tok == "" {
		t.Fatal("no next page token on a full page")
	}
	if code, _ := get(t, base, "/v1/services/"+ComputeEngineID+"/skus", url.Values{"pageToken": {tok}, "currencyCode": {"EUR"}}); code != 400 {
		t.Errorf("a USD listing's token used for EUR: %d, want 400", code)
	}
	if code, _ := get(t, base, "/v1/services/95FF-2EF5-5EA1/skus", url.Values{"pageToken": {tok}}); code != 400 {
		t.Errorf("a token used for another service: %d, want 400", code)
	}
	s.FailPages(1)
	if code, _ := get(t, base, "/v1/services/"+ComputeEngineID+"/skus", url.Values{"pageToken": {tok}}); code != 500 {
		t.Errorf("a failed page: %d, want 500", code)
	}
	if code, _ := get(t, base, "/v1/services/"+ComputeEngineID+"/skus", nil); code != 200 {
		t.Errorf("a first page while pages fail: %d, want 200", code)
	}
	if code, _ := get(t, base, "/v1/services/"+ComputeEngineID+"/skus", url.Values{"pageToken": {tok}}); code != 200 {
		t.Errorf("the page again after one failure: %d, want 200", code)
	}
}

// A request without a bearer token, or one Authorize refuses, is 401.
func TestUnauthenticated(t *testing.T) {
	t.Parallel()
	_, base := serve(t, Options{})
	resp, err := http.Get(base + "/v1/services")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 401 {
		t.Errorf("no token: %d, want 401", resp.StatusCode)
	}
	_, base = serve(t, Options{Authorize: func(r *http.Request) bool { return r.Header.Get("Authorization") == "Bearer good" }})
	if code, out := get(t, base, "/v1/services", nil); code != 401 || !strings.Contains(out["error"].(map[string]any)["status"].(string), "UNAUTHENTICATED") {
		t.Errorf("a refused token: %d %v, want 401 UNAUTHENTICATED", code, out)
	}
}

func TestIsRequest(t *testing.T) {
	t.Parallel()
	for path, want := range map[string]bool{"/v1/services": true, "/v1/services/X/skus": true, "/compute/v1/projects/p/zones": false, "/token": false, "/v1/servicesx": false} {
		if got := IsRequest(httptest.NewRequest("GET", path, nil)); got != want {
			t.Errorf("IsRequest(%s) = %v, want %v", path, got, want)
		}
	}
}
