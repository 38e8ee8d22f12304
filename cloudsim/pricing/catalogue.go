package pricing

import (
	"crypto/sha256"
	"fmt"
	"strings"
	"time"
)

// Product is one product of the price list with its On-Demand price.
type Product struct {
	// SKU identifies the product (16 capitals and digits).
	SKU string
	// ProductFamily is "Compute Instance" for EC2 instances.
	ProductFamily string
	// Attributes are the product's attributes, as the price list names
	// them (instanceType, regionCode, location, operatingSystem, ...).
	Attributes map[string]string
	// OnDemandUSD is the On-Demand price per Unit in USD, as the list
	// writes it ("0.0480000000").
	OnDemandUSD string
	Unit        string // "Hrs"
	// ReservedUSD, when set, adds a 1-year No Upfront standard Reserved
	// term at that hourly price (a price a reader must not take).
	ReservedUSD string
	// Effective is when the terms took effect.
	Effective time.Time
}

// catalogueEffective is when the built-in catalogue's prices took effect.
var catalogueEffective = time.Date(2025, 11, 1, 0, 0, 0, 0, time.UTC)

// region is one region of the built-in catalogue.
type region struct {
	code, location, usagePrefix string
	// factor scales the us-east-1 price, as the regions' prices differ.
	factor float64
}

var catalogueRegions = []region{
	{"us-east-1", "US East (N. Virginia)", "", 1},
	{"eu-central-1", "EU (Frankfurt)", "EUC1-", 1.154},
	{"eu-west-1", "EU (Ireland)", "EU-", 1.096},
}

// instanceType is one instance type of the built-in catalogue, with its
// us-east-1 Linux On-Demand hourly price.
type instanceType struct {
	name, family, vcpu, memory string
	current                    bool
	usd                        float64
}

var catalogueTypes = []instanceType{
	{"t3.micro", "General purpose", "2", "1 GiB", true, 0.0104},
	{"t3.small", "General purpose", "2", "2 GiB", true, 0.0208},
	{"t3.medium", "General purpose", "2", "4 GiB", true, 0.0416},
	{"m3.medium", "General purpose", "1", "3.75 GiB", false, 0.067},
	{"m4.large", "General purpose", "2", "8 GiB", false, 0.1},
	{"m4.xlarge", "General purpose", "4", "16 GiB", false, 0.2},
	{"m5.large", "General purpose", "2", "8 GiB", true, 0.096},
}

// DefaultCatalogue is the built-in catalogue: for each instance type of
// t3.micro, t3.small, t3.medium, m3.medium, m4.large, m4.xlarge and
// m5.large in us-east-1, eu-central-1 and eu-west-1, its Linux Shared
// On-Demand product (with a Reserved term beside), and the Windows,
// Dedicated-tenancy and unused-capacity-reservation products the usual
// filters exclude. Prices are the regions' published ones, rounded.
func DefaultCatalogue() []Product {
	var out []Product
	for _, r := range catalogueRegions {
		for _, it := range catalogueTypes {
			linux := it.usd * r.factor
			variants := []struct {
				os, tenancy, capacity, usage string
				usd                          float64
				reserved                     bool
			}{
				{"Linux", "Shared", "Used", "BoxUsage", linux, true},
				{"Windows", "Shared", "Used", "BoxUsage", linux + 0.0184*float64(atoi(it.vcpu)), false},
				{"Linux", "Dedicated", "Used", "DedicatedUsage", linux * 1.1, false},
				{"Linux", "Shared", "UnusedCapacityReservation", "UnusedBox", linux, false},
			}
			for _, v := range variants {
				op := "RunInstances"
				if v.os == "Windows" {
					op = "RunInstances:0002"
				}
				attrs := map[string]string{
					"servicecode": "AmazonEC2", "servicename": "Amazon Elastic Compute Cloud",
					"locationType": "AWS Region", "location": r.location, "regionCode": r.code,
					"instanceType": it.name, "instanceFamily": it.family, "vcpu": it.vcpu, "memory": it.memory,
					"currentGeneration": yesNo(it.current), "storage": "EBS only", "processorArchitecture": "64-bit",
					"networkPerformance": "Up to 5 Gigabit", "operatingSystem": v.os, "tenancy": v.tenancy,
					"capacitystatus": v.capacity, "preInstalledSw": "NA", "licenseModel": "No License required",
					"operation": op, "marketoption": "OnDemand", "availabilityzone": "NA",
					"usagetype": r.usagePrefix + v.usage + ":" + it.name,
				}
				p := Product{SKU: sku(attrs), ProductFamily: "Compute Instance", Attributes: attrs,
					OnDemandUSD: fmt.Sprintf("%.10f", round4(v.usd)), Unit: "Hrs", Effective: catalogueEffective}
				if v.reserved {
					p.ReservedUSD = fmt.Sprintf("%.10f", round4(v.usd*0.63))
				}
				out = append(out, p)
			}
		}
	}
	return out
}

func yesNo(b bool) string {
	if b {
		return "Yes"
	}
	return "No"
}

func atoi(s string) int {
	n := 0
	for _, c := range s {
		n = n*10 + int(c-'0')
	}
	return n
}

// round4 rounds to four decimals, as the list's prices are.
func round4(f float64) float64 { return float64(int64(f*10000+0.5)) / 10000 }

// sku makes a stable SKU of a product's attributes.
func sku(attrs map[string]string) string {
	h := sha256.Sum256([]byte(attrs["regionCode"] + "|" + attrs["usagetype"] + "|" + attrs["operatingSystem"] + "|" + attrs["tenancy"] + "|" + attrs["capacitystatus"]))
	const alphabet = "ABCDEFGHJKMNPQRSTUVWXYZ23456789"
	var b strings.Builder
	for _, c := range h[:16] {
		b.WriteByte(alphabet[int(c)%len(alphabet)])
	}
	return b.String()
}

// Term and rate codes of the price list: On-Demand and 1-year No Upfront
// standard Reserved.
const (
	onDemandTerm = "JRTCKXETXF"
	onDemandRate = "6YS6EN2CT7"
	reservedTerm = "4NA7Y494T4"
	reservedRate = "6YS6EN2CT7"
)

// document is the product as the price list writes it (aws_v1).
func (p Product) document(version string) map[string]any {
	desc := fmt.Sprintf("$%s per On Demand %s %s Instance Hour", trimPrice(p.OnDemandUSD), p.Attributes["operatingSystem"], p.Attributes["instanceType"])
	onDemand := p.SKU + "." + onDemandTerm
	terms := map[string]any{
		"OnDemand": map[string]any{
			onDemand: map[string]any{
				"priceDimensions": map[string]any{
					onDemand + "." + onDemandRate: map[string]any{
						"unit": p.Unit, "endRange": "Inf", "description": desc, "appliesTo": []string{},
						"rateCode": onDemand + "." + onDemandRate, "beginRange": "0",
						"pricePerUnit": map[string]string{"USD": p.OnDemandUSD},
					},
				},
				"sku": p.SKU, "effectiveDate": p.Effective.Format(time.RFC3339), "offerTermCode": onDemandTerm, "termAttributes": map[string]string{},
			},
		},
	}
	if p.ReservedUSD != "" {
		reserved := p.SKU + "." + reservedTerm
		terms["Reserved"] = map[string]any{
			reserved: map[string]any{
				"priceDimensions": map[string]any{
					reserved + "." + reservedRate: map[string]any{
						"unit": p.Unit, "endRange": "Inf", "description": "Linux/UNIX (Amazon VPC), " + p.Attributes["instanceType"] + " reserved instance applied",
						"appliesTo": []string{}, "rateCode": reserved + "." + reservedRate, "beginRange": "0",
						"pricePerUnit": map[string]string{"USD": p.ReservedUSD},
					},
				},
				"sku": p.SKU, "effectiveDate": p.Effective.Format(time.RFC3339), "offerTermCode": reservedTerm,
				"termAttributes": map[string]string{"LeaseContractLength": "1yr", "OfferingClass": "standard", "PurchaseOption": "No Upfront"},
			},
		}
	}
	return map[string]any{
		"product":         map[string]any{"productFamily": p.ProductFamily, "attributes": p.Attributes, "sku": p.SKU},
		"serviceCode":     "AmazonEC2",
		"terms":           terms,
		"version":         version,
		"publicationDate": p.Effective.Format(time.RFC3339),
	}
}

func trimPrice(s string) string {
	if strings.Contains(s, ".") {
		s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	}
	return s
}
