package aws

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/cloudtransit/transit/cloudsim/pricing"
	"github.com/cloudtransit/transit/districts"
	"github.com/cloudtransit/transit/provider"
)

// priceWorld is the emulator's Price List on loopback, with what the
// driver asked of it and, when failNext is set, a harsh double that fails
// every request for a second page.
type priceWorld struct {
	srv *pricing.Server
	url string

	mu       sync.Mutex
	requests []string // bodies
	failNext bool
}

func newPriceWorld(t *testing.T) *priceWorld {
	t.Helper()
	w := &priceWorld{srv: pricing.New(pricing.Options{Credentials: map[string]pricing.Credential{keyID: {SecretAccessKey: secretKey, SessionToken: session}}})}
	ts := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(rw, err.Error(), http.StatusBadRequest)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		w.mu.Lock()
		w.requests = append(w.requests, string(body))
		fail := w.failNext && strings.Contains(string(body), `"NextToken"`)
		w.mu.Unlock()
		if fail {
			rw.Header().Set("Content-Type", "application/x-amz-json-1.1")
			rw.Header().Set("X-Amzn-ErrorType", "InternalErrorException")
			rw.WriteHeader(http.StatusInternalServerError)
			_, _ = rw.Write([]byte(`{"__type":"InternalErrorException","Message":"An internal error occurred."}`))
			return
		}
		w.srv.ServeHTTP(rw, r)
	}))
	t.Cleanup(ts.Close)
	w.url = ts.URL
	return w
}

func (w *priceWorld) district(region string, types ...string) districts.District {
	d := districts.District{Type: "district", ID: "aws-test", Provider: districts.ProviderAWS, CredentialID: "aws-cred",
		AWSRegion: region, AWSEndpoint: w.url}
	for _, t := range types {
		d.Flavors = append(d.Flavors, districts.DistrictFlavor{Flavor: t, InstanceType: t})
	}
	return d
}

func (w *priceWorld) count(sub string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, r := range w.requests {
		if strings.Contains(r, sub) {
			n++
		}
	}
	return n
}

func TestPrices(t *testing.T) {
	t.Parallel()
	w := newPriceWorld(t)
	got, err := Prices(t.Context(), w.district("eu-central-1"), credential(), []string{"t3.medium", "m4.large", "t3.medium", "x9.huge"}, fast())
	if err != nil {
		t.Fatal(err)
	}
	want := []provider.Quote{
		{MachineType: "t3.medium", HourlyPrice: 0.048, Currency: "USD",
			Source: "AWS Price List: t3.medium, EU (Frankfurt), Linux, Shared, On-Demand, USD 0.048/Hrs (SKU " + skuOf(t, w, "eu-central-1", "t3.medium") + ", effective 2025-11-01)"},
		{MachineType: "m4.large", HourlyPrice: 0.1154, Currency: "USD",
			Source: "AWS Price List: m4.large, EU (Frankfurt), Linux, Shared, On-Demand, USD 0.1154/Hrs (SKU " + skuOf(t, w, "eu-central-1", "m4.large") + ", effective 2025-11-01)"},
		{MachineType: "x9.huge", Currency: "USD",
			Unpriced: "the AWS Price List has no Linux, Shared tenancy, no pre-installed software, On-Demand price for x9.huge in eu-central-1"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("quotes (-want +got):\n%s", diff)
	}
	// One query per distinct type, each with the filters of a node's terms.
	for _, f := range []string{`"Field":"operatingSystem","Type":"TERM_MATCH","Value":"Linux"`, `"Field":"capacitystatus"`, `"Field":"preInstalledSw"`, `"Field":"tenancy"`, `"Field":"regionCode","Type":"TERM_MATCH","Value":"eu-central-1"`} {
		if n := w.count(f); n != 3 {
			t.Errorf("%d requests with %s, want 3", n, f)
		}
	}
}

func skuOf(t *testing.T, _ *priceWorld, region, instanceType string) string {
	t.Helper()
	for _, p := range pricing.DefaultCatalogue() {
		a := p.Attributes
		if a["regionCode"] == region && a["instanceType"] == instanceType && a["operatingSystem"] == "Linux" && a["tenancy"] == "Shared" && a["capacitystatus"] == "Used" {
			return p.SKU
		}
	}
	t.Fatalf("no %s in %s in the catalogue", instanceType, region)
	return ""
}

// A region without an endpoint of the API is priced through the nearest
// one; the emulator refuses a signature for another region, as AWS does.
func TestPricesAskTheRegionThatServesTheAPI(t *testing.T) {
	t.Parallel()
	for region, want := range map[string]string{"eu-west-1": "eu-central-1", "us-west-2": "us-east-1", "ap-northeast-1": "ap-south-1", "us-east-1": "us-east-1"} {
		if got := PriceListRegion(region); got != want {
			t.Errorf("PriceListRegion(%s) = %s, want %s", region, got, want)
		}
	}
	w := newPriceWorld(t)
	got, err := Prices(t.Context(), w.district("eu-west-1"), credential(), []string{"m5.large"}, fast())
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].HourlyPrice != 0.1052 {
		t.Errorf("eu-west-1 m5.large: %+v, want USD 0.1052", got)
	}
}

// Every page is read: a page of one product carries a token, and the
// second page is asked for.
func TestPricesReadEveryPage(t *testing.T) {
	t.Parallel()
	w := newPriceWorld(t)
	w.srv.SetPageSize(1)
	got, err := Prices(t.Context(), w.district("us-east-1"), credential(), []string{"t3.small"}, fast())
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].HourlyPrice != 0.0208 {
		t.Errorf("quotes %+v, want t3.small at 0.0208", got)
	}
	if n := w.count(`"NextToken"`); n != 1 {
		t.Errorf("%d requests for a next page, want 1", n)
	}
}

// A failed second page fails the call, naming the district and the type:
// no partial answer.
func TestPricesFailedPage(t *testing.T) {
	t.Parallel()
	w := newPriceWorld(t)
	w.srv.SetPageSize(1)
	w.failNext = true
	got, err := Prices(t.Context(), w.district("us-east-1"), credential(), []string{"t3.small"}, fast())
	if err == nil {
		t.Fatalf("Prices with a failing second page: %+v, want an error", got)
	}
	for _, s := range []string{`aws district "aws-test"`, "t3.small in us-east-1", "InternalErrorException"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q does not say %q", err, s)
		}
	}
	if n := w.count(`"NextToken"`); n != fast().RetryMaxAttempts {
		t.Errorf("%d requests for the second page, want the %d attempts", n, fast().RetryMaxAttempts)
	}
}

func TestPricesRefusedCredential(t *testing.T) {
	t.Parallel()
	w := newPriceWorld(t)
	cred := &districts.Credential{Type: "credential", ID: "aws-cred", Provider: districts.ProviderAWS,
		AWSAccessKeyID: "AKIAUNKNOWN000000000", AWSSecretAccessKey: secretKey}
	_, err := Prices(t.Context(), w.district("eu-central-1"), cred, []string{"t3.micro"}, fast())
	if !errors.Is(err, provider.ErrCloudAuth) {
		t.Fatalf("error %v, want ErrCloudAuth", err)
	}
	for _, s := range []string{`aws district "aws-test"`, `credential "aws-cred"`, "UnrecognizedClientException"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q does not say %q", err, s)
		}
	}
	noSecret(t, err)
}

// The quotes of a list that prices a type twice, differently, or at 0
// say so rather than pick one.
func TestQuoteAmbiguous(t *testing.T) {
	t.Parallel()
	two := quote("us-east-1", "t3.micro", []offer{{usd: 0.0104}, {usd: 0.0116}, {usd: 0.0104}})
	if two.Priced() || !strings.Contains(two.Unpriced, "2 Linux, Shared tenancy, no pre-installed software, On-Demand prices for t3.micro in us-east-1 (USD 0.0104, 0.0116)") {
		t.Errorf("two prices: %+v", two)
	}
	zero := quote("us-east-1", "t3.micro", []offer{{usd: 0}})
	if zero.Priced() || !strings.Contains(zero.Unpriced, "at 0") {
		t.Errorf("a price of 0: %+v", zero)
	}
}
