package pricing_test

import (
	"encoding/json"
	"errors"
	"net/http/httptest"
	"testing"

	sdk "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	sdkpricing "github.com/aws/aws-sdk-go-v2/service/pricing"
	"github.com/aws/aws-sdk-go-v2/service/pricing/types"
	"github.com/aws/smithy-go"

	"github.com/cloudtransit/transit/awsbody"
	"github.com/cloudtransit/transit/cloudsim/pricing"
)

// client is the real SDK's Price List client on a front end on loopback.
func client(t *testing.T, opts pricing.Options, region, key, secret string) *sdkpricing.Client {
	t.Helper()
	ts := httptest.NewServer(pricing.New(opts))
	t.Cleanup(ts.Close)
	return sdkpricing.New(sdkpricing.Options{Region: region, BaseEndpoint: sdk.String(ts.URL), RetryMaxAttempts: 1, HTTPClient: awsbody.Wrap(nil),
		Credentials: credentials.NewStaticCredentialsProvider(key, secret, "")})
}

func defaultClient(t *testing.T, opts pricing.Options) *sdkpricing.Client {
	return client(t, opts, "us-east-1", pricing.DefaultAccessKeyID, pricing.DefaultSecretAccessKey)
}

func term(field, value string) types.Filter {
	return types.Filter{Type: types.FilterTypeTermMatch, Field: sdk.String(field), Value: sdk.String(value)}
}

// linux are the filters that leave one product of an instance type in a
// region: its Linux, Shared, On-Demand one.
func linux(instanceType, region string) []types.Filter {
	return []types.Filter{
		term("instanceType", instanceType), term("regionCode", region), term("operatingSystem", "Linux"),
		term("tenancy", "Shared"), term("preInstalledSw", "NA"), term("capacitystatus", "Used"),
	}
}

// doc is the part of a price list document the tests read.
type doc struct {
	Product struct {
		SKU        string            `json:"sku"`
		Attributes map[string]string `json:"attributes"`
	} `json:"product"`
	Terms struct {
		OnDemand map[string]struct {
			PriceDimensions map[string]struct {
				Unit         string            `json:"unit"`
				PricePerUnit map[string]string `json:"pricePerUnit"`
			} `json:"priceDimensions"`
		} `json:"OnDemand"`
		Reserved map[string]any `json:"Reserved"`
	} `json:"terms"`
}

func parse(t *testing.T, s string) doc {
	t.Helper()
	var d doc
	if err := json.Unmarshal([]byte(s), &d); err != nil {
		t.Fatalf("price list document: %v\n%s", err, s)
	}
	return d
}

func TestGetProductsLinuxOnDemand(t *testing.T) {
	t.Parallel()
	c := defaultClient(t, pricing.Options{})
	out, err := c.GetProducts(t.Context(), &sdkpricing.GetProductsInput{ServiceCode: sdk.String("AmazonEC2"), FormatVersion: sdk.String("aws_v1"),
		Filters: linux("t3.medium", "eu-central-1")})
	if err != nil {
		t.Fatal(err)
	}
	if len(out.PriceList) != 1 || out.NextToken != nil {
		t.Fatalf("got %d products (next token %v), want the one Linux On-Demand product", len(out.PriceList), out.NextToken)
	}
	d := parse(t, out.PriceList[0])
	if a := d.Product.Attributes; a["location"] != "EU (Frankfurt)" || a["instanceType"] != "t3.medium" || a["operatingSystem"] != "Linux" {
		t.Errorf("attributes %v", a)
	}
	if len(d.Terms.OnDemand) != 1 || len(d.Terms.Reserved) != 1 {
		t.Fatalf("terms: %d On-Demand, %d Reserved; want one each", len(d.Terms.OnDemand), len(d.Terms.Reserved))
	}
	for _, term := range d.Terms.OnDemand {
		for _, dim := range term.PriceDimensions {
			if dim.Unit != "Hrs" || dim.PricePerUnit["USD"] != "0.0480000000" {
				t.Errorf("price dimension %+v, want USD 0.0480000000 per Hrs", dim)
			}
		}
	}
}

// A broad query pages: every product once, across pages of MaxResults.
func TestGetProductsPages(t *testing.T) {
	t.Parallel()
	c := defaultClient(t, pricing.Options{})
	in := &sdkpricing.GetProductsInput{ServiceCode: sdk.String("AmazonEC2"), MaxResults: sdk.Int32(10),
		Filters: []types.Filter{term("regionCode", "eu-west-1")}}
	p := sdkpricing.NewGetProductsPaginator(c, in)
	seen := map[string]bool{}
	pages := 0
	for p.HasMorePages() {
		out, err := p.NextPage(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		pages++
		if len(out.PriceList) > 10 {
			t.Fatalf("page %d holds %d products, more than MaxResults 10", pages, len(out.PriceList))
		}
		for _, s := range out.PriceList {
			d := parse(t, s)
			if seen[d.Product.SKU] {
				t.Fatalf("SKU %s on two pages", d.Product.SKU)
			}
			seen[d.Product.SKU] = true
			if d.Product.Attributes["regionCode"] != "eu-west-1" {
				t.Fatalf("product of %s in a eu-west-1 query", d.Product.Attributes["regionCode"])
			}
		}
	}
	if want := 28; len(seen) != want || pages < 3 {
		t.Errorf("%d products in %d pages, want %d in at least 3", len(seen), pages, want)
	}

	// ANY_OF and NONE_OF take comma-separated values.
	out, err := c.GetProducts(t.Context(), &sdkpricing.GetProductsInput{ServiceCode: sdk.String("AmazonEC2"), Filters: []types.Filter{
		{Type: types.FilterTypeAnyOf, Field: sdk.String("instanceType"), Value: sdk.String("t3.micro, m5.large")},
		{Type: types.FilterTypeNoneOf, Field: sdk.String("operatingSystem"), Value: sdk.String("Windows")},
		term("regionCode", "us-east-1"), term("tenancy", "Shared"), term("capacitystatus", "Used"),
	}})
	if err != nil {
		t.Fatal(err)
	}
	if len(out.PriceList) != 2 {
		t.Errorf("ANY_OF two types, NONE_OF Windows: %d products, want 2", len(out.PriceList))
	}
}

// The page size option caps pages below MaxResults; a full page carries
// a token even when nothing follows, as the service's may.
func TestGetProductsPageSize(t *testing.T) {
	t.Parallel()
	c := defaultClient(t, pricing.Options{PageSize: 1})
	in := &sdkpricing.GetProductsInput{ServiceCode: sdk.String("AmazonEC2"), Filters: linux("m4.large", "us-east-1")}
	first, err := c.GetProducts(t.Context(), in)
	if err != nil {
		t.Fatal(err)
	}
	if len(first.PriceList) != 1 || first.NextToken == nil {
		t.Fatalf("first page: %d products, token %v; want 1 and a token", len(first.PriceList), first.NextToken)
	}
	in.NextToken = first.NextToken
	second, err := c.GetProducts(t.Context(), in)
	if err != nil {
		t.Fatal(err)
	}
	if len(second.PriceList) != 0 || second.NextToken != nil {
		t.Errorf("second page: %d products, token %v; want none", len(second.PriceList), second.NextToken)
	}
}

func TestGetProductsErrors(t *testing.T) {
	t.Parallel()
	c := defaultClient(t, pricing.Options{})
	first, err := c.GetProducts(t.Context(), &sdkpricing.GetProductsInput{ServiceCode: sdk.String("AmazonEC2"), MaxResults: sdk.Int32(1)})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		in   sdkpricing.GetProductsInput
		code string
	}{
		{"unknown field", sdkpricing.GetProductsInput{ServiceCode: sdk.String("AmazonEC2"), Filters: []types.Filter{term("instanceSize", "large")}}, "InvalidParameterException"},
		{"unknown filter type", sdkpricing.GetProductsInput{ServiceCode: sdk.String("AmazonEC2"),
			Filters: []types.Filter{{Type: "REGEX", Field: sdk.String("instanceType"), Value: sdk.String("t3.*")}}}, "InvalidParameterException"},
		{"format version", sdkpricing.GetProductsInput{ServiceCode: sdk.String("AmazonEC2"), FormatVersion: sdk.String("aws_v2")}, "InvalidParameterException"},
		{"max results", sdkpricing.GetProductsInput{ServiceCode: sdk.String("AmazonEC2"), MaxResults: sdk.Int32(101)}, "InvalidParameterException"},
		{"other service", sdkpricing.GetProductsInput{ServiceCode: sdk.String("AmazonS3")}, "NotFoundException"},
		{"token of another query", sdkpricing.GetProductsInput{ServiceCode: sdk.String("AmazonEC2"), NextToken: first.NextToken,
			Filters: []types.Filter{term("regionCode", "us-east-1")}}, "InvalidNextTokenException"},
		{"forged token", sdkpricing.GetProductsInput{ServiceCode: sdk.String("AmazonEC2"), NextToken: sdk.String("MTA=:00")}, "InvalidNextTokenException"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := c.GetProducts(t.Context(), &tc.in)
			if code := errorCode(err); code != tc.code {
				t.Errorf("error %v (code %q), want %s", err, code, tc.code)
			}
		})
	}
}

func TestGetProductsRefusesSignatures(t *testing.T) {
	t.Parallel()
	in := &sdkpricing.GetProductsInput{ServiceCode: sdk.String("AmazonEC2")}
	for _, tc := range []struct {
		name, region, key, secret, code string
	}{
		{"region without the API", "eu-west-1", pricing.DefaultAccessKeyID, pricing.DefaultSecretAccessKey, "InvalidSignatureException"},
		{"unknown key", "us-east-1", "AKIAUNKNOWN000000000", pricing.DefaultSecretAccessKey, "UnrecognizedClientException"},
		{"wrong secret", "us-east-1", pricing.DefaultAccessKeyID, "not-the-secret", "InvalidSignatureException"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := client(t, pricing.Options{}, tc.region, tc.key, tc.secret)
			_, err := c.GetProducts(t.Context(), in)
			if code := errorCode(err); code != tc.code {
				t.Errorf("error %v (code %q), want %s", err, code, tc.code)
			}
		})
	}
	// The other regions that serve the API are accepted.
	for _, r := range pricing.Regions {
		if _, err := client(t, pricing.Options{}, r, pricing.DefaultAccessKeyID, pricing.DefaultSecretAccessKey).GetProducts(t.Context(), in); err != nil {
			t.Errorf("signed for %s: %v", r, err)
		}
	}
}

func errorCode(err error) string {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		return ae.ErrorCode()
	}
	return ""
}
