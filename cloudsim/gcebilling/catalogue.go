package gcebilling

import (
	"crypto/sha256"
	"fmt"
	"strings"
	"time"
)

// Service is a service of the catalogue.
type Service struct {
	// ID is the service's id ("6F81-5844-456A"), DisplayName its name
	// ("Compute Engine").
	ID, DisplayName string
}

// SKU is one SKU of the catalogue with its one price.
type SKU struct {
	// ID is the SKU's id ("0009-6F35-3126"); Service the id of its
	// service.
	ID, Service string
	Description string
	// ResourceFamily ("Compute"), ResourceGroup ("N1Standard", "CPU",
	// "RAM", "GPU") and UsageType ("OnDemand", "Preemptible",
	// "Commit1Yr") are its category.
	ResourceFamily, ResourceGroup, UsageType string
	// Regions are its serviceRegions.
	Regions []string
	// Unit is the usage unit ("h", "GiBy.h", "GiBy.mo", "GiBy").
	Unit string
	// USD is the price of a unit in USD.
	USD float64
	// Effective is when the price took effect.
	Effective time.Time
}

// ComputeEngineID is Compute Engine's service id, as the real catalogue
// names it.
const ComputeEngineID = "6F81-5844-456A"

// DefaultServices are the built-in catalogue's services.
func DefaultServices() []Service {
	return []Service{
		{ID: "24E6-581D-38E5", DisplayName: "BigQuery"},
		{ID: "95FF-2EF5-5EA1", DisplayName: "Cloud Storage"},
		{ID: ComputeEngineID, DisplayName: "Compute Engine"},
		{ID: "CCD8-9BF1-090E", DisplayName: "Kubernetes Engine"},
	}
}

// catalogueEffective is when the built-in catalogue's prices took effect.
var catalogueEffective = time.Date(2025, 11, 1, 0, 0, 0, 0, time.UTC)

// area is one pricing area of the built-in catalogue: the regions its
// SKUs serve and their prices per family.
type area struct {
	name    string // as the SKUs' descriptions say it
	regions []string
	// core and ram are the On-Demand USD per vCPU-hour and GiB-hour by
	// family ("N1", "E2", "N2", "N2D"); micro and small f1-micro's and
	// g1-small's per hour (0: none).
	core, ram    map[string]float64
	micro, small float64
}

var areas = []area{
	{name: "Americas", regions: []string{"us-central1", "us-east1", "us-west1"},
		core:  map[string]float64{"N1": 0.031611, "E2": 0.021811, "N2": 0.031611, "N2D": 0.027502},
		ram:   map[string]float64{"N1": 0.004237, "E2": 0.002923, "N2": 0.004237, "N2D": 0.003686},
		micro: 0.0076, small: 0.0257},
	{name: "EMEA", regions: []string{"europe-west1"},
		core:  map[string]float64{"N1": 0.034773, "E2": 0.023993},
		ram:   map[string]float64{"N1": 0.004661, "E2": 0.003215},
		micro: 0.0084, small: 0.0283},
	{name: "Frankfurt", regions: []string{"europe-west3"},
		core: map[string]float64{"N1": 0.040618, "E2": 0.028027},
		ram:  map[string]float64{"N1": 0.005444, "E2": 0.003756}},
	{name: "Japan", regions: []string{"asia-northeast1"},
		core: map[string]float64{"N1": 0.036489, "E2": 0.025127},
		ram:  map[string]float64{"N1": 0.004891, "E2": 0.003368}},
}

// family is how the catalogue names a family's SKUs: the start of its
// core and RAM descriptions and their resource groups.
type family struct {
	name, prefix, coreGroup, ramGroup string
}

var families = []family{
	{"N1", "N1 Predefined Instance", "N1Standard", "N1Standard"},
	{"E2", "E2 Instance", "CPU", "RAM"},
	{"N2", "N2 Instance", "CPU", "RAM"},
	{"N2D", "N2D AMD Instance", "CPU", "RAM"},
}

// DefaultCatalogue is the built-in catalogue: see the package's doc.
// Prices are the published ones, rounded to the catalogue's precision.
func DefaultCatalogue() []SKU {
	var out []SKU
	add := func(s SKU) {
		if s.Service == "" {
			s.Service = ComputeEngineID
		}
		if s.ResourceFamily == "" {
			s.ResourceFamily = "Compute"
		}
		s.Effective = catalogueEffective
		s.ID = skuID(s.Service, s.Description)
		out = append(out, s)
	}
	for _, a := range areas {
		for _, f := range families {
			core, ok := a.core[f.name]
			if !ok {
				continue
			}
			ram := a.ram[f.name]
			add(SKU{Description: f.prefix + " Core running in " + a.name, ResourceGroup: f.coreGroup, UsageType: "OnDemand",
				Regions: a.regions, Unit: "h", USD: core})
			add(SKU{Description: f.prefix + " Ram running in " + a.name, ResourceGroup: f.ramGroup, UsageType: "OnDemand",
				Regions: a.regions, Unit: "GiBy.h", USD: ram})
			// Decoys: the same resources on other terms.
			preemptible := "Preemptible "
			if f.name != "N1" {
				preemptible = "Spot Preemptible "
			}
			add(SKU{Description: preemptible + f.prefix + " Core running in " + a.name, ResourceGroup: f.coreGroup, UsageType: "Preemptible",
				Regions: a.regions, Unit: "h", USD: round(core * 0.3)})
			add(SKU{Description: preemptible + f.prefix + " Ram running in " + a.name, ResourceGroup: f.ramGroup, UsageType: "Preemptible",
				Regions: a.regions, Unit: "GiBy.h", USD: round(ram * 0.3)})
			add(SKU{Description: fmt.Sprintf("Commitment v1: %s Cpu in %s for 1 Year", f.name, a.name), ResourceGroup: "CPU", UsageType: "Commit1Yr",
				Regions: a.regions, Unit: "h", USD: round(core * 0.63)})
			add(SKU{Description: fmt.Sprintf("Commitment v1: %s Ram in %s for 3 Year", f.name, a.name), ResourceGroup: "RAM", UsageType: "Commit3Yr",
				Regions: a.regions, Unit: "GiBy.h", USD: round(ram * 0.45)})
		}
		if n1, ok := a.core["N1"]; ok {
			add(SKU{Description: "N1 Sole Tenancy Instance Core running in " + a.name, ResourceGroup: "CPU", UsageType: "OnDemand",
				Regions: a.regions, Unit: "h", USD: round(n1 * 1.1)})
			add(SKU{Description: "N1 Custom Instance Core running in " + a.name, ResourceGroup: "CPU", UsageType: "OnDemand",
				Regions: a.regions, Unit: "h", USD: round(n1 * 1.05)})
			add(SKU{Description: "N1 Custom Instance Ram running in " + a.name, ResourceGroup: "RAM", UsageType: "OnDemand",
				Regions: a.regions, Unit: "GiBy.h", USD: round(a.ram["N1"] * 1.05)})
		}
		if a.micro > 0 {
			add(SKU{Description: "Micro Instance with burstable CPU running in " + a.name, ResourceGroup: "F1Micro", UsageType: "OnDemand",
				Regions: a.regions, Unit: "h", USD: a.micro})
			add(SKU{Description: "Small Instance with 1 VCPU running in " + a.name, ResourceGroup: "G1Small", UsageType: "OnDemand",
				Regions: a.regions, Unit: "h", USD: a.small})
			add(SKU{Description: "Preemptible Micro Instance with burstable CPU running in " + a.name, ResourceGroup: "F1Micro", UsageType: "Preemptible",
				Regions: a.regions, Unit: "h", USD: 0.0035})
		}
		add(SKU{Description: "Nvidia Tesla T4 GPU running in " + a.name, ResourceGroup: "GPU", UsageType: "OnDemand",
			Regions: a.regions, Unit: "h", USD: 0.35})
		add(SKU{Description: "Network Internet Egress from " + a.name + " to China", ResourceFamily: "Network", ResourceGroup: "PremiumInternetEgress",
			UsageType: "OnDemand", Regions: a.regions, Unit: "GiBy", USD: 0.23})
		add(SKU{Service: "95FF-2EF5-5EA1", Description: "Standard Storage " + a.name, ResourceFamily: "Storage", ResourceGroup: "RegionalStorage",
			UsageType: "OnDemand", Regions: a.regions, Unit: "GiBy.mo", USD: 0.02})
	}
	return out
}

func round(usd float64) float64 {
	const nano = 1e9
	return float64(int64(usd*nano+0.5)) / nano
}

// skuID makes a SKU id of the real ones' shape (three groups of four hex
// capitals) from what identifies the SKU, so that it is stable.
func skuID(service, description string) string {
	sum := sha256.Sum256([]byte(service + "\x00" + description))
	h := strings.ToUpper(fmt.Sprintf("%x", sum[:6]))
	return h[0:4] + "-" + h[4:8] + "-" + h[8:12]
}
