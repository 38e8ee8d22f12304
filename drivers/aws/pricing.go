package aws

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"

	sdk "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/pricing"
	"github.com/aws/aws-sdk-go-v2/service/pricing/types"

	"github.com/cloudtransit/transit/districts"
	"github.com/cloudtransit/transit/provider"
)

// The Price List Query API: what transit asks of it, and where.
const (
	priceListName = "the AWS Price List"
	// priceCurrency is the currency AWS's public list quotes.
	priceCurrency = "USD"
	// priceTerms are the terms every quote is for, besides the region and
	// the instance type: they are what a node transit launches runs on.
	priceTerms = "Linux, Shared tenancy, no pre-installed software, On-Demand"
)

// PriceListRegion is the region whose endpoint of the Price List Query
// API transit asks for prices in region: the API is served from
// us-east-1, eu-central-1 and ap-south-1 only.
func PriceListRegion(region string) string {
	switch {
	case strings.HasPrefix(region, "eu-"), strings.HasPrefix(region, "me-"), strings.HasPrefix(region, "il-"):
		return "eu-central-1"
	case strings.HasPrefix(region, "ap-"):
		return "ap-south-1"
	}
	return "us-east-1"
}

// Prices asks the AWS Price List Query API (GetProducts, service code
// AmazonEC2) for the hourly Linux On-Demand price of each instance type in
// district d's region, with the district's credential (nil: the SDK's
// default chain) and through its aws_endpoint when set (the emulator
// serves the API beside EC2). It returns a quote per distinct instance
// type, in their order: a type the list does not price, or prices more
// than once, is a quote whose Unpriced says so. An error of the API —
// refused credentials, a failed page — fails the whole call: no partial
// answer.
func Prices(ctx context.Context, d districts.District, cred *districts.Credential, instanceTypes []string, opts Options) ([]provider.Quote, error) {
	if d.Provider != districts.ProviderAWS {
		return nil, invalid(d, "provider %q is not %q", d.Provider, districts.ProviderAWS)
	}
	if d.AWSRegion == "" {
		return nil, invalid(d, "aws_region: missing")
	}
	opts = opts.withDefaults()
	cfg, credName, err := sdkConfig(ctx, d, cred, PriceListRegion(d.AWSRegion), opts)
	if err != nil {
		return nil, err
	}
	drv := &driver{d: d, opts: opts, credName: credName}
	client := pricing.NewFromConfig(cfg, func(o *pricing.Options) {
		if d.AWSEndpoint != "" {
			o.BaseEndpoint = sdk.String(d.AWSEndpoint)
		}
	})
	var quotes []provider.Quote
	seen := map[string]bool{}
	for _, it := range instanceTypes {
		if seen[it] || it == "" {
			continue
		}
		seen[it] = true
		q, err := price(ctx, client, d.AWSRegion, it)
		if err != nil {
			return nil, drv.wrapAPI(priceListName, fmt.Sprintf("ask %s for %s in %s", priceListName, it, d.AWSRegion), err)
		}
		quotes = append(quotes, q)
	}
	return quotes, nil
}

// priceFilters select the product a node of instanceType in region runs
// as: Linux, Shared tenancy, no pre-installed software, capacity used (not
// a reservation's unused share), no license.
func priceFilters(region, instanceType string) []types.Filter {
	term := func(field, value string) types.Filter {
		return types.Filter{Type: types.FilterTypeTermMatch, Field: sdk.String(field), Value: sdk.String(value)}
	}
	return []types.Filter{
		term("instanceType", instanceType), term("regionCode", region), term("operatingSystem", "Linux"),
		term("tenancy", "Shared"), term("preInstalledSw", "NA"), term("capacitystatus", "Used"),
		term("licenseModel", "No License required"),
	}
}

// price reads every page of the products that match and makes one quote
// of their On-Demand USD prices.
func price(ctx context.Context, client *pricing.Client, region, instanceType string) (provider.Quote, error) {
	in := &pricing.GetProductsInput{ServiceCode: sdk.String("AmazonEC2"), FormatVersion: sdk.String("aws_v1"),
		MaxResults: sdk.Int32(100), Filters: priceFilters(region, instanceType)}
	var offers []offer
	pages := pricing.NewGetProductsPaginator(client, in)
	for pages.HasMorePages() {
		out, err := pages.NextPage(ctx)
		if err != nil {
			return provider.Quote{}, err
		}
		for _, doc := range out.PriceList {
			found, err := onDemandOffers(doc)
			if err != nil {
				return provider.Quote{}, err
			}
			offers = append(offers, found...)
		}
	}
	return quote(region, instanceType, offers), nil
}

// offer is one On-Demand hourly price of a product.
type offer struct {
	usd                float64
	raw, unit          string
	location, os, ten  string
	sku, effectiveDate string
}

// priceDocument is the part of a price list document (aws_v1) transit
// reads.
type priceDocument struct {
	Product struct {
		SKU        string            `json:"sku"`
		Attributes map[string]string `json:"attributes"`
	} `json:"product"`
	Terms struct {
		OnDemand map[string]struct {
			EffectiveDate   string `json:"effectiveDate"`
			PriceDimensions map[string]struct {
				Unit         string            `json:"unit"`
				PricePerUnit map[string]string `json:"pricePerUnit"`
			} `json:"priceDimensions"`
		} `json:"OnDemand"`
	} `json:"terms"`
}

// onDemandOffers reads a document's On-Demand prices per hour in USD.
func onDemandOffers(doc string) ([]offer, error) {
	var d priceDocument
	if err := json.Unmarshal([]byte(doc), &d); err != nil {
		return nil, fmt.Errorf("a price list document that is not JSON of the aws_v1 format: %w", err)
	}
	a := d.Product.Attributes
	var out []offer
	for _, term := range d.Terms.OnDemand {
		for _, dim := range term.PriceDimensions {
			raw, ok := dim.PricePerUnit[priceCurrency]
			if !ok || !strings.EqualFold(dim.Unit, "Hrs") {
				continue
			}
			usd, err := strconv.ParseFloat(raw, 64)
			if err != nil {
				return nil, fmt.Errorf("product %s: pricePerUnit %s %q is not a number", d.Product.SKU, priceCurrency, raw)
			}
			out = append(out, offer{usd: usd, raw: raw, unit: dim.Unit, location: a["location"], os: a["operatingSystem"], ten: a["tenancy"],
				sku: d.Product.SKU, effectiveDate: term.EffectiveDate})
		}
	}
	return out, nil
}

// quote makes one quote of the offers: one price (however many products
// carry it), else unpriced, saying why.
func quote(region, instanceType string, offers []offer) provider.Quote {
	q := provider.Quote{MachineType: instanceType, Currency: priceCurrency}
	var prices []float64
	for _, o := range offers {
		if !slices.Contains(prices, o.usd) {
			prices = append(prices, o.usd)
		}
	}
	switch {
	case len(prices) == 0:
		q.Unpriced = fmt.Sprintf("%s has no %s price for %s in %s", priceListName, priceTerms, instanceType, region)
		return q
	case len(prices) > 1:
		slices.Sort(prices)
		strs := make([]string, len(prices))
		for i, p := range prices {
			strs[i] = strconv.FormatFloat(p, 'f', -1, 64)
		}
		q.Unpriced = fmt.Sprintf("%s has %d %s prices for %s in %s (USD %s): which one is yours is for you to say", priceListName, len(prices), priceTerms, instanceType, region, strings.Join(strs, ", "))
		return q
	case prices[0] <= 0:
		q.Unpriced = fmt.Sprintf("%s prices %s in %s at 0: transit does not take a price of nothing", priceListName, instanceType, region)
		return q
	}
	o := offers[0]
	q.HourlyPrice = o.usd
	q.Source = fmt.Sprintf("AWS Price List: %s, %s, %s, %s, On-Demand, %s %s/%s (SKU %s",
		instanceType, o.location, o.os, o.ten, priceCurrency, strconv.FormatFloat(o.usd, 'f', -1, 64), o.unit, o.sku)
	if o.effectiveDate != "" {
		q.Source += ", effective " + strings.TrimSuffix(o.effectiveDate, "T00:00:00Z")
	}
	q.Source += ")"
	return q
}
