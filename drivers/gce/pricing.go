package gce

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	billing "cloud.google.com/go/billing/apiv1"
	"cloud.google.com/go/billing/apiv1/billingpb"
	compute "cloud.google.com/go/compute/apiv1"
	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/api/iterator"

	"github.com/cloudtransit/transit/districts"
	"github.com/cloudtransit/transit/provider"
)

// The Cloud Billing Catalog API: what transit asks of it.
const (
	catalogName = "the Cloud Billing Catalog API"
	// computeService is the display name of Compute Engine's service in
	// the catalog; its id (6F81-5844-456A) is found by listing.
	computeService = "Compute Engine"
	// priceCurrency is the currency transit asks the catalog for.
	priceCurrency = "USD"
	// skuPageSize is the most SKUs the API gives a page.
	skuPageSize = 5000
)

// familySKUs are how the catalog describes the On-Demand SKUs of a
// family's predefined machine types, before " running in <area>": one
// per vCPU-hour (usage unit h), one per GiB-hour of memory (GiBy.h).
var familySKUs = map[string]struct{ core, ram string }{
	"n1":  {"N1 Predefined Instance Core", "N1 Predefined Instance Ram"},
	"e2":  {"E2 Instance Core", "E2 Instance Ram"},
	"n2":  {"N2 Instance Core", "N2 Instance Ram"},
	"n2d": {"N2D AMD Instance Core", "N2D AMD Instance Ram"},
	"c2":  {"Compute optimized Core", "Compute optimized Ram"},
	"t2d": {"T2D AMD Instance Core", "T2D AMD Instance Ram"},
	"c3":  {"C3 Instance Core", "C3 Instance Ram"},
}

// e2SharedVCPUs are the vCPUs an e2 shared-core type is billed for at
// the E2 core rate (Compute Engine's pricing: e2-micro a quarter of a
// vCPU, e2-small a half, e2-medium one), though it reports 2 guest CPUs.
var e2SharedVCPUs = map[string]float64{"e2-micro": 0.25, "e2-small": 0.5, "e2-medium": 1}

// ownSKU are the shared-core types the catalog prices per instance-hour
// by a SKU of their own.
var ownSKU = map[string]string{"f1-micro": "Micro Instance with burstable CPU", "g1-small": "Small Instance with 1 VCPU"}

// Prices asks the Cloud Billing Catalog API (cloudbilling.googleapis.com,
// services.skus.list of the service named Compute Engine, in USD) for
// the hourly On-Demand price of each machine type in district d's
// region, with the district's credential (nil: application default
// credentials) and through its gce_endpoint when set (the emulator serves
// the API beside Compute Engine). A predefined type is priced as its
// vCPUs at its family's core rate plus its memory in GiB at the family's
// RAM rate, its shape read from Compute Engine (machineTypes.get in the
// district's first zone); e2-micro, e2-small and e2-medium as a quarter,
// a half and one vCPU plus their memory, f1-micro and g1-small at their
// own per-instance SKUs. It returns a quote per distinct machine type, in
// their order: a type the catalog does not price (a custom type, a family
// transit does not know, a SKU missing in the region or listed more than
// once at different prices) is a quote whose Unpriced says so. An error
// of either API — refused credentials, a failed page — fails the whole
// call: no partial answer.
func Prices(ctx context.Context, d districts.District, cred *districts.Credential, machineTypes []string, opts Options) ([]provider.Quote, error) {
	if err := checkDistrict(d); err != nil {
		return nil, err
	}
	opts = opts.withDefaults()
	copts, credName, err := clientOptions(d, cred)
	if err != nil {
		return nil, err
	}
	drv := &driver{d: d, opts: opts, credName: credName}
	catalog, err := billing.NewCloudCatalogRESTClient(ctx, copts...)
	if err != nil {
		return nil, &cloudError{Kind: provider.ErrCloudAuth,
			Msg: fmt.Sprintf("gce district %q: set up the Cloud Billing Catalog client with %s", d.ID, credName), Err: err}
	}
	defer func() { _ = catalog.Close() }()
	types, err := compute.NewMachineTypesRESTClient(ctx, copts...)
	if err != nil {
		return nil, &cloudError{Kind: provider.ErrCloudAuth,
			Msg: fmt.Sprintf("gce district %q: set up the Compute Engine client with %s", d.ID, credName), Err: err}
	}
	defer func() { _ = types.Close() }()

	var wanted []string
	for _, mt := range machineTypes {
		if mt != "" && !slices.Contains(wanted, mt) {
			wanted = append(wanted, mt)
		}
	}
	if len(wanted) == 0 {
		return nil, nil
	}
	skus, err := drv.computeSKUs(ctx, catalog)
	if err != nil {
		return nil, err
	}
	quotes := make([]provider.Quote, 0, len(wanted))
	for _, mt := range wanted {
		parts, why, err := drv.parts(ctx, types, mt)
		if err != nil {
			return nil, err
		}
		if why != "" {
			quotes = append(quotes, provider.Quote{MachineType: mt, Currency: priceCurrency, Unpriced: why})
			continue
		}
		quotes = append(quotes, quote(d.GCERegion, mt, parts, skus))
	}
	return quotes, nil
}

// sku is an On-Demand Compute SKU of the district's region, with its
// current price.
type sku struct {
	id, description string
	unit            string
	price           float64
	currency        string
	tiers           int
	effective       time.Time
}

// computeSKUs finds Compute Engine's service and reads every page of its
// SKUs, keeping the On-Demand Compute ones of the district's region.
func (drv *driver) computeSKUs(ctx context.Context, catalog *billing.CloudCatalogClient) ([]sku, error) {
	service := ""
	services := catalog.ListServices(ctx, &billingpb.ListServicesRequest{}, drv.retry())
	for {
		s, err := services.Next()
		if errors.Is(err, iterator.Done) {
			break
		}
		if err != nil {
			return nil, drv.wrapCatalog(fmt.Sprintf("list the services of %s", catalogName), err)
		}
		if s.GetDisplayName() == computeService {
			service = s.GetName()
			break
		}
	}
	if service == "" {
		return nil, fmt.Errorf("gce district %q: %s lists no service named %q: transit cannot price Compute Engine", drv.d.ID, catalogName, computeService)
	}
	region := drv.d.GCERegion
	var out []sku
	it := catalog.ListSkus(ctx, &billingpb.ListSkusRequest{Parent: service, CurrencyCode: priceCurrency, PageSize: skuPageSize}, drv.retry())
	for {
		s, err := it.Next()
		if errors.Is(err, iterator.Done) {
			return out, nil
		}
		if err != nil {
			return nil, drv.wrapCatalog(fmt.Sprintf("list the SKUs of %s (%s) in %s", computeService, service, catalogName), err)
		}
		c := s.GetCategory()
		if c.GetResourceFamily() != "Compute" || c.GetUsageType() != "OnDemand" || !slices.Contains(s.GetServiceRegions(), region) {
			continue
		}
		k, ok := current(s)
		if ok {
			out = append(out, k)
		}
	}
}

// current is the SKU's latest pricing, false when it has none.
func current(s *billingpb.Sku) (sku, bool) {
	var latest *billingpb.PricingInfo
	for _, p := range s.GetPricingInfo() {
		if latest == nil || p.GetEffectiveTime().AsTime().After(latest.GetEffectiveTime().AsTime()) {
			latest = p
		}
	}
	if latest == nil {
		return sku{}, false
	}
	e := latest.GetPricingExpression()
	k := sku{id: s.GetSkuId(), description: s.GetDescription(), unit: e.GetUsageUnit(), tiers: len(e.GetTieredRates()),
		effective: latest.GetEffectiveTime().AsTime()}
	if rates := e.GetTieredRates(); len(rates) > 0 {
		m := rates[0].GetUnitPrice()
		k.price = float64(m.GetUnits()) + float64(m.GetNanos())/1e9
		k.currency = m.GetCurrencyCode()
	}
	return k, true
}

// part is one thing a machine type is billed for: qty units of the SKU
// whose description starts with what.
type part struct {
	what  string // description up to " running in <area>"
	unit  string // the SKU's usage unit
	qty   float64
	label string // what qty counts: "vCPU", "GiB", "instance"
}

// parts are what machine type mt is billed for, or why transit does not
// price it. Only Compute Engine's errors are errors.
func (drv *driver) parts(ctx context.Context, types *compute.MachineTypesClient, mt string) ([]part, string, error) {
	if what, ok := ownSKU[mt]; ok {
		return []part{{what: what, unit: "h", qty: 1, label: "instance"}}, "", nil
	}
	family, _, _ := strings.Cut(mt, "-")
	names, known := familySKUs[family]
	switch {
	case strings.Contains(mt, "custom"):
		return nil, fmt.Sprintf("%s is a custom machine type: %s prices it by Custom SKUs, which transit does not read", mt, catalogName), nil
	case !known:
		return nil, fmt.Sprintf("transit does not know the SKUs %s prices the %s family by (it reads n1, e2, n2, n2d, c2, t2d, c3, f1-micro and g1-small)", catalogName, family), nil
	}
	zone := drv.d.GCEZones[0]
	m, err := types.Get(ctx, &computepb.GetMachineTypeRequest{Project: drv.d.GCEProjectID, Zone: zone, MachineType: mt}, drv.retry())
	if isNotFound(err) {
		return nil, fmt.Sprintf("Compute Engine has no machine type %s in zone %s", mt, zone), nil
	}
	if err != nil {
		return nil, "", drv.wrap(fmt.Sprintf("read machine type %s in %s", mt, zone), err)
	}
	vcpus := float64(m.GetGuestCpus())
	if m.GetIsSharedCpu() {
		share, ok := e2SharedVCPUs[mt]
		if !ok {
			return nil, fmt.Sprintf("%s is a shared-core type transit does not know the billed share of", mt), nil
		}
		vcpus = share
	}
	gib := float64(m.GetMemoryMb()) / 1024
	if vcpus <= 0 || gib <= 0 {
		return nil, fmt.Sprintf("Compute Engine says %s has %d vCPUs and %d MB of memory: nothing to price", mt, m.GetGuestCpus(), m.GetMemoryMb()), nil
	}
	return []part{
		{what: names.core, unit: "h", qty: vcpus, label: "vCPU"},
		{what: names.ram, unit: "GiBy.h", qty: gib, label: "GiB"},
	}, "", nil
}

// quote prices machine type mt in region as the sum of its parts, each
// at the one price the SKUs give it; else it is unpriced, saying why.
func quote(region, mt string, parts []part, skus []sku) provider.Quote {
	q := provider.Quote{MachineType: mt, Currency: priceCurrency}
	var total float64
	var terms []string
	var effective time.Time
	for i, p := range parts {
		var found []sku
		var prices []float64
		for _, k := range skus {
			if strings.HasPrefix(k.description, p.what+" running in ") && k.unit == p.unit {
				found = append(found, k)
				if !slices.Contains(prices, k.price) {
					prices = append(prices, k.price)
				}
			}
		}
		switch {
		case len(found) == 0:
			q.Unpriced = fmt.Sprintf("%s has no On-Demand %q SKU per %s in %s", catalogName, p.what+" running in …", p.unit, region)
			return q
		case len(prices) > 1:
			slices.Sort(prices)
			strs := make([]string, len(prices))
			for i, v := range prices {
				strs[i] = strconv.FormatFloat(v, 'f', -1, 64)
			}
			q.Unpriced = fmt.Sprintf("%s has %d On-Demand %q prices per %s in %s (%s): which one is yours is for you to say",
				catalogName, len(prices), p.what+" running in …", p.unit, region, strings.Join(strs, ", "))
			return q
		}
		k := found[0]
		switch {
		case k.tiers != 1:
			q.Unpriced = fmt.Sprintf("%s prices SKU %s (%s) in %d tiers: transit takes one rate only", catalogName, k.id, k.description, k.tiers)
			return q
		case k.price <= 0:
			q.Unpriced = fmt.Sprintf("%s prices SKU %s (%s) at 0: transit does not take a price of nothing", catalogName, k.id, k.description)
			return q
		case i > 0 && k.currency != q.Currency:
			q.Unpriced = fmt.Sprintf("%s prices %s's parts in %s and %s: transit does not convert", catalogName, mt, q.Currency, k.currency)
			return q
		}
		q.Currency = k.currency
		total += p.qty * k.price
		terms = append(terms, fmt.Sprintf("%s %s × %s %s/%s (SKU %s, %s)", strconv.FormatFloat(p.qty, 'f', -1, 64), p.label,
			k.currency, strconv.FormatFloat(k.price, 'f', -1, 64), k.unit, k.id, k.description))
		if k.effective.After(effective) {
			effective = k.effective
		}
	}
	// Drop the float noise of the sum: the catalog's rates are in nanos.
	q.HourlyPrice = math.Round(total*1e10) / 1e10
	q.Source = fmt.Sprintf("GCE Cloud Billing Catalog: %s, %s, On-Demand, %s", mt, region, strings.Join(terms, " + "))
	if !effective.IsZero() {
		q.Source += ", effective " + effective.UTC().Format(time.DateOnly)
	}
	return q
}
