package districts

import (
	"fmt"
	"maps"
	"net/netip"
	"net/url"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Providers transit has drivers for, in the order messages list them.
var Providers = []string{ProviderAWS, ProviderGCE, ProviderOpenStack, ProviderLocal}

// credentialProviders are the providers a credential can be for; local
// districts need none.
var credentialProviders = []string{ProviderAWS, ProviderGCE, ProviderOpenStack}

// Phases lists the node phases in order of a normal life.
var Phases = []Phase{PhaseLaunched, PhaseJoined, PhaseNotReady, PhaseCordoned, PhaseDraining, PhaseDrained, PhaseLeft, PhaseTerminating, PhaseStopped, PhaseFailed}

// MaxIDLength bounds cluster and district ids, which become part of
// machine names, labels and tags.
const MaxIDLength = 40

const idHint = `use 1 to 40 lowercase letters, digits and "-", starting with a letter and not ending with "-" (ids become part of machine names and tags)`

// ValidID reports whether s can be a cluster or district id: lowercase
// letters, digits and '-', starting with a letter, at most MaxIDLength.
func ValidID(s string) bool {
	if s == "" || len(s) > MaxIDLength || s[0] < 'a' || s[0] > 'z' || s[len(s)-1] == '-' {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-') {
			return false
		}
	}
	return true
}

// Validate checks a configuration as a whole: each file on its own and the
// references between them. Credential references are checked only when
// cfg.CredentialsLoaded. It returns Problems, or nil.
func Validate(cfg Config) error {
	l := cfg.Paths.labels()
	cc := newProblems(l.cluster, reflect.TypeFor[Cluster]())
	dc := newProblems(l.districts, reflect.TypeFor[[]District]())
	kc := newProblems(l.credentials, reflect.TypeFor[[]Credential]())
	pc := newProblems(l.prices, reflect.TypeFor[PriceList]())
	validateCluster(cc, cfg.Cluster, cfg.Districts, true, l.districts)
	validateDistricts(dc, cfg.Districts, cfg.Credentials, cfg.CredentialsLoaded, l.credentials)
	if cfg.CredentialsLoaded {
		validateCredentials(kc, cfg.Credentials)
	}
	if cfg.PricesLoaded {
		validatePriceList(pc, cfg.Prices, cfg.Districts, true, l.districts)
	}
	validatePricing(cc, dc, cfg, l)
	return collect(cc, dc, kc, pc).Err()
}

// ValidateResources checks a state as LoadResources does.
func ValidateResources(r Resources) error {
	c := newProblems("resources.json", reflect.TypeFor[Resources]())
	validateResources(c, r)
	return c.sorted().Err()
}

func collect(cs ...*problems) Problems {
	var all Problems
	for _, c := range cs {
		all = append(all, c.sorted()...)
	}
	return all
}

// checkType checks an object's "type". Top-level objects must carry it;
// nested ones may leave it out.
func checkType(c *problems, path, got, want string, required bool) {
	switch {
	case got == want:
	case got == "" && required:
		c.add(path, fmt.Sprintf("missing (must be %q)", want), "")
	case got == "":
	case required:
		c.add(path, fmt.Sprintf("must be %q, got %q", want, got), "")
	default:
		c.add(path, fmt.Sprintf("must be %q or left out, got %q", want, got), "")
	}
}

// checkID checks a cluster or district id.
func checkID(c *problems, path, id string) {
	switch {
	case id == "":
		c.add(path, "missing", idHint)
	case !ValidID(id):
		c.add(path, fmt.Sprintf("%q is not a valid id", id), idHint)
	}
}

func known(names []string) string {
	if len(names) == 0 {
		return "(none defined)"
	}
	return "(known: " + strings.Join(names, ", ") + ")"
}

func checkNotNegative[T int | float64 | Duration](c *problems, path string, v T) {
	if v < 0 {
		c.add(path, fmt.Sprintf("must not be negative, got %v", v), "")
	}
}

// validateCluster checks cluster.json. District references are checked
// only when districtsOK (districts.json decoded).
// Size limits. A cluster is at most MaxClusterNodes nodes: twice
// Kubernetes' own tested limit (its "considerations for large clusters":
// no more than 5,000 nodes), above what anyone runs a Swarm with, and what
// transit's benchmarks apply in linear time (control.BenchmarkApply). One deployment
// line is at most MaxDeploymentQuantity machines of one size in one
// region, already far beyond a cloud account's default quotas. Both
// limits make a typo (a quantity of a billion) an error instead of a
// plan that eats the host's memory.
const (
	MaxDeploymentQuantity = 1000
	MaxClusterNodes       = 10000
)

const quantityHint = "check the quantity for a typo; transit plans clusters up to 10,000 nodes"

func validateCluster(c *problems, cl Cluster, ds []District, districtsOK bool, districtsFile string) {
	checkType(c, "type", cl.Type, "cluster", true)
	checkID(c, "id", cl.ID)

	platforms := slices.Sorted(maps.Keys(PlatformRoles))
	roles, platformOK := PlatformRoles[cl.Platform]
	switch {
	case cl.Platform == "":
		c.add("platform", "missing "+known(platforms), "")
	case !platformOK:
		c.add("platform", fmt.Sprintf("%q is not a supported platform %s", cl.Platform, known(platforms)), "")
	}

	flavorAt := newFirsts("flavors", "defined")
	var flavors []string
	for i, f := range cl.Flavors {
		p := joinIndex("flavors", i)
		checkType(c, p+".type", f.Type, "flavor", false)
		switch {
		case f.Flavor == "":
			c.add(p+".flavor", "missing", "")
		case !ValidID(f.Flavor):
			c.add(p+".flavor", fmt.Sprintf("%q is not a valid flavor name", f.Flavor), strings.Replace(idHint, "ids", "flavor names", 1))
		}
		if f.Flavor != "" && flavorAt.add(c, p+".flavor", f.Flavor, i) {
			flavors = append(flavors, f.Flavor)
		}
		checkNotNegative(c, p+".cores", f.Cores)
		checkNotNegative(c, p+".memory_gb", f.MemoryGB)
		checkNotNegative(c, p+".disk_gb", f.DiskGB)
	}
	validateBudget(c, cl.Budget)
	validateAutoscaler(c, cl.Autoscaler)

	districtByID := make(map[string]District)
	var districtIDs []string
	for _, d := range ds {
		if _, dup := districtByID[d.ID]; !dup && d.ID != "" {
			districtByID[d.ID] = d
			districtIDs = append(districtIDs, d.ID)
		}
	}

	lineAt := make(map[DeploymentKey]int)
	total, masters := 0, 0
	for i, d := range cl.Deployments {
		p := joinIndex("deployments", i)
		checkType(c, p+".type", d.Type, "deployment", false)

		district, districtFound := districtByID[d.District]
		switch {
		case d.District == "":
			c.add(p+".district", "missing "+known(districtIDs), "")
		case districtsOK && !districtFound:
			c.add(p+".district", fmt.Sprintf("%q is not defined in %s %s", d.District, districtsFile, known(districtIDs)), didYouMean(d.District, districtIDs))
		}

		_, flavorFound := flavorAt.at[d.Flavor]
		switch {
		case d.Flavor == "":
			c.add(p+".flavor", "missing "+known(flavors), "")
		case !flavorFound:
			c.add(p+".flavor", fmt.Sprintf("%q is not defined in flavors %s", d.Flavor, known(flavors)), didYouMean(d.Flavor, flavors))
		case districtsOK && districtFound:
			if _, mapped := district.MachineType(d.Flavor); !mapped {
				var have []string
				for _, f := range district.Flavors {
					have = append(have, f.Flavor)
				}
				c.add(p+".flavor", fmt.Sprintf("%q is not mapped in district %q (mapped: %s)", d.Flavor, d.District, strings.Join(have, ", ")),
					fmt.Sprintf("add it to the flavors of district %q in %s", d.District, districtsFile))
			}
		}

		switch {
		case d.Role == "":
			c.add(p+".role", "missing", "")
		case platformOK && !slices.Contains(roles, d.Role):
			c.add(p+".role", fmt.Sprintf("%q is not a role of %s %s", d.Role, cl.Platform, known(roles)), "")
		}

		validateAutoscale(c, p, d)
		switch {
		case d.Quantity < 0:
			c.add(p+".quantity", fmt.Sprintf("must not be negative, got %d", d.Quantity), "")
		case d.Quantity > MaxDeploymentQuantity:
			c.add(p+".quantity", fmt.Sprintf("%d is more than %d, the most one deployment line may hold", d.Quantity, MaxDeploymentQuantity), quantityHint)
		case d.Autoscale != nil && d.Autoscale.Max >= 0 && d.Autoscale.Max <= MaxDeploymentQuantity:
			total += d.Autoscale.Max // the most it may grow to
		default:
			total += d.Quantity
			if d.Role == RoleMaster {
				masters += d.Quantity
			}
		}

		if d.District != "" && d.Flavor != "" && d.Role != "" {
			if j, dup := lineAt[d.Key()]; dup {
				c.add(p, fmt.Sprintf("deployments[%d] and deployments[%d] are both %s (district/flavor/role)", j, i, d.Key()), "merge them into one line")
			} else {
				lineAt[d.Key()] = i
			}
		}
		checkTags(c, p+".tags", d.Tags)
		if cl.Platform == "kubernetes" {
			checkLabels(c, p+".tags", d.Tags)
		}
	}
	validateKubernetes(c, cl, ds, districtsOK, districtsFile)
	validateNetwork(c, cl, ds, districtsOK, districtsFile)
	if total > MaxClusterNodes {
		c.add("deployments", fmt.Sprintf("the quantities add up to %d nodes, more than %d, the most one cluster may hold", total, MaxClusterNodes), quantityHint)
	}
	if total > 0 && masters == 0 {
		c.add("deployments", fmt.Sprintf("no master: a cluster with nodes needs at least one node with role %q", RoleMaster), "")
	}

	if cl.Platform == "swarm" && districtsOK {
		named := map[string]bool{}
		for i, dep := range cl.Deployments {
			for _, d := range ds {
				if d.ID == dep.District && len(d.APICIDRs) > 0 && !named[d.ID] {
					named[d.ID] = true
					c.add(joinIndex("deployments", i)+".district", fmt.Sprintf("district %q sets api_cidrs in %s, which open the Kubernetes API port: platform swarm has none", d.ID, districtsFile), "remove api_cidrs")
				}
			}
		}
	}
	if cl.Platform == "swarm" && len(cl.Addons) > 0 {
		c.add("addons", "addons are Kubernetes controllers: platform swarm runs none", `remove "addons" or use platform "kubernetes"`)
	}
	addonAt := newFirsts("addons", "listed")
	for i, a := range cl.Addons {
		p := joinIndex("addons", i)
		checkType(c, p+".type", a.Type, "addon", false)
		switch {
		case a.Name == "":
			c.add(p+".name", "missing "+known(KnownAddons), "")
		case !slices.Contains(KnownAddons, a.Name):
			c.add(p+".name", fmt.Sprintf("%q is not a known addon %s", a.Name, known(KnownAddons)), didYouMean(a.Name, KnownAddons))
		}
		if a.Name != "" {
			addonAt.add(c, p+".name", a.Name, i)
		}
		if _, ok := a.Settings[""]; ok {
			c.add(joinKey(p+".settings", ""), "empty key", "")
		}
		checkAddonSettings(c, p+".settings", a)
	}

	st := cl.Strategy
	if st.MaxUnavailable != nil {
		checkNotNegative(c, "strategy.max_unavailable", *st.MaxUnavailable)
	}
	if st.MaxSurge != nil {
		checkNotNegative(c, "strategy.max_surge", *st.MaxSurge)
	}
	if st.MaxUnavailable != nil && st.MaxSurge != nil && *st.MaxUnavailable == 0 && *st.MaxSurge == 0 {
		c.add("strategy", "max_surge and max_unavailable are both 0: no node could ever be replaced",
			"allow one of them to be at least 1 (max_surge 0 replaces in place, max_unavailable nodes at a time)")
	}
	checkNotNegative(c, "strategy.drain_timeout", st.DrainTimeout)
	checkNotNegative(c, "strategy.replace_unhealthy_after", st.ReplaceUnhealthyAfter)
}

// Tag limits: the tightest of the places tags go (AWS tags, Kubernetes and
// Swarm labels) that still allows the paper's free-text values.
const (
	maxTagKey   = 63
	maxTagValue = 255
)

// checkTags checks user tags, which become node labels and cloud tags.
func checkTags(c *problems, path string, tags map[string]string) {
	for _, k := range slices.Sorted(maps.Keys(tags)) {
		v := tags[k]
		p := joinKey(path, k)
		switch {
		case k == "":
			c.add(p, "empty tag key", "")
		case strings.HasPrefix(strings.ToLower(k), "transit-"):
			c.add(p, `tag keys starting with "transit-" are reserved for transit's identity tags`, "choose another key")
		case !validTagKey(k):
			c.add(p, fmt.Sprintf("%q is not a valid tag key", k),
				`use up to 63 letters, digits, "-", "_", "." and "/", starting and ending with a letter or digit`)
		}
		switch {
		case len(v) > maxTagValue:
			c.add(p, fmt.Sprintf("tag value is longer than %d bytes", maxTagValue), "")
		case !utf8.ValidString(v):
			c.add(p, "tag value is not valid UTF-8", "")
		case strings.IndexFunc(v, unicode.IsControl) >= 0:
			c.add(p, "tag value contains a control character", "")
		}
	}
}

func validTagKey(k string) bool {
	alnum := func(b byte) bool { return b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' || b >= '0' && b <= '9' }
	if k == "" || len(k) > maxTagKey || !alnum(k[0]) || !alnum(k[len(k)-1]) {
		return false
	}
	for i := range len(k) {
		if b := k[i]; !alnum(b) && b != '-' && b != '_' && b != '.' && b != '/' {
			return false
		}
	}
	return true
}

// keyOwner says which provider a provider-specific key belongs to.
func keyOwner(key string) string {
	switch key {
	case "instance_type":
		return ProviderAWS
	case "machine_type":
		return ProviderGCE
	}
	for prefix, p := range map[string]string{"aws_": ProviderAWS, "gce_": ProviderGCE, "os_": ProviderOpenStack, "local_": ProviderLocal} {
		if strings.HasPrefix(key, prefix) {
			return p
		}
	}
	return ""
}

// checkForeignKeys reports set keys of v (a struct) that belong to another
// provider than provider.
func checkForeignKeys(c *problems, path string, v any, provider, what string) {
	rv := reflect.ValueOf(v)
	fs := structFields(rv.Type())
	for _, name := range fs.names {
		owner := keyOwner(name)
		if owner == "" || owner == provider || rv.Field(fs.byName[name].index).IsZero() {
			continue
		}
		c.add(joinKey(path, name), fmt.Sprintf("belongs to provider %s, but %s is %s", owner, what, provider), "")
	}
}

// machineKey is the district flavor key naming a provider's machine type.
var machineKey = map[string]string{
	ProviderAWS:       "instance_type",
	ProviderGCE:       "machine_type",
	ProviderOpenStack: "os_flavor",
}

func flavorMachine(f DistrictFlavor, provider string) string {
	switch provider {
	case ProviderAWS:
		return f.InstanceType
	case ProviderGCE:
		return f.MachineType
	case ProviderOpenStack:
		return f.OSFlavor
	}
	return ""
}

// validateDistricts checks districts.json. Credential references are
// checked only when credsOK (credentials.json was read and decoded).
func validateDistricts(c *problems, ds []District, creds []Credential, credsOK bool, credsFile string) {
	credByID := make(map[string]Credential)
	var credIDs []string
	for _, cr := range creds {
		if _, dup := credByID[cr.ID]; !dup && cr.ID != "" {
			credByID[cr.ID] = cr
			credIDs = append(credIDs, cr.ID)
		}
	}

	type subnet struct {
		i      int
		prefix netip.Prefix
	}
	var subnets []subnet
	idAt := newFirsts("", "defined")
	for i, d := range ds {
		p := joinIndex("", i)
		checkType(c, p+".type", d.Type, "district", true)
		checkID(c, p+".id", d.ID)
		if d.ID != "" {
			idAt.add(c, p+".id", d.ID, i)
		}

		providerOK := slices.Contains(Providers, d.Provider)
		switch {
		case d.Provider == "":
			c.add(p+".provider", "missing "+known(Providers), "")
		case !providerOK:
			c.add(p+".provider", fmt.Sprintf("%q is not a supported provider %s", d.Provider, known(Providers)), "")
		}

		if d.CredentialID != "" && providerOK {
			cr, found := credByID[d.CredentialID]
			switch {
			case d.Provider == ProviderLocal:
				c.add(p+".credential_id", "local districts take no credential", "remove credential_id")
			case !credsOK:
			case !found:
				c.add(p+".credential_id", fmt.Sprintf("%q is not defined in %s %s", d.CredentialID, credsFile, known(credIDs)), didYouMean(d.CredentialID, credIDs))
			case cr.Provider != d.Provider && slices.Contains(credentialProviders, cr.Provider):
				c.add(p+".credential_id", fmt.Sprintf("credential %q is for %s, but district %q is %s", d.CredentialID, cr.Provider, d.ID, d.Provider), "")
			}
		}

		if providerOK {
			what := fmt.Sprintf("district %q", d.ID)
			checkForeignKeys(c, p, d, d.Provider, what)
			missing := func(key string) {
				c.add(joinKey(p, key), fmt.Sprintf("missing (%s districts need it)", d.Provider), "")
			}
			switch d.Provider {
			case ProviderAWS:
				if d.AWSRegion == "" {
					missing("aws_region")
				}
				checkZones(c, p+".aws_zones", d.AWSZones, d.AWSRegion, "")
				exclusive(c, p, "aws_image_id", d.AWSImageID != "", "aws_image_name", d.AWSImageName != "")
				needs(c, p, "aws_image_owner", d.AWSImageOwner != "", "aws_image_name", d.AWSImageName != "")
				exclusive(c, p, "aws_zones", len(d.AWSZones) > 0, "aws_subnet_ids", len(d.AWSSubnetIDs) > 0)
				checkURL(c, p+".aws_endpoint", d.AWSEndpoint)
			case ProviderGCE:
				if d.GCEProjectID == "" {
					missing("gce_project_id")
				}
				if d.GCERegion == "" {
					missing("gce_region")
				}
				if len(d.GCEZones) == 0 {
					missing("gce_zones")
				}
				checkZones(c, p+".gce_zones", d.GCEZones, d.GCERegion, "-")
				exclusive(c, p, "gce_image", d.GCEImage != "", "gce_image_family", d.GCEImageFamily != "")
				checkURL(c, p+".gce_endpoint", d.GCEEndpoint)
			case ProviderOpenStack:
				checkURL(c, p+".os_auth_url", d.OSAuthURL)
				if d.OSRegion == "" {
					missing("os_region")
				}
			case ProviderLocal:
				if d.LocalSubnet == "" {
					missing("local_subnet")
				} else if pfx, ok := checkSubnet(c, p+".local_subnet", d.LocalSubnet); ok {
					subnets = append(subnets, subnet{i, pfx})
				}
			}
		}

		for key, cidrs := range map[string][]string{"ssh_cidrs": d.SSHCIDRs, "api_cidrs": d.APICIDRs} {
			for j, cidr := range cidrs {
				if d.Provider == ProviderLocal {
					c.add(p+"."+key, "local nodes are reached from this host only", "remove "+key)
					break
				}
				if pfx, err := netip.ParsePrefix(cidr); err != nil || pfx != pfx.Masked() {
					c.add(joinIndex(p+"."+key, j), fmt.Sprintf("%q is not a CIDR such as \"203.0.113.0/24\"", cidr), "")
				}
			}
		}

		checkInstall(c, p+".kubernetes_install", d.KubernetesInstall)
		checkCurrency(c, p+".currency", d.Currency)

		flavorAt := newFirsts(p+".flavors", "mapped")
		for j, f := range d.Flavors {
			fp := joinIndex(p+".flavors", j)
			checkType(c, fp+".type", f.Type, "flavor", false)
			if f.Flavor == "" {
				c.add(fp+".flavor", "missing", "")
			} else {
				flavorAt.add(c, fp+".flavor", f.Flavor, j)
			}
			if f.HourlyPrice != nil {
				checkNotNegative(c, fp+".hourly_price", *f.HourlyPrice)
			}
			if !providerOK {
				continue
			}
			checkForeignKeys(c, fp, f, d.Provider, fmt.Sprintf("district %q", d.ID))
			if key, ok := machineKey[d.Provider]; ok {
				if flavorMachine(f, d.Provider) == "" {
					c.add(joinKey(fp, key), fmt.Sprintf("missing (%s districts need it for every flavor)", d.Provider), "")
				}
			}
		}
	}

	for b := range subnets {
		for a := range b {
			sa, sb := subnets[a], subnets[b]
			if sa.prefix.Overlaps(sb.prefix) {
				c.add(joinIndex("", sb.i)+".local_subnet",
					fmt.Sprintf("%s overlaps %s of district %q ([%d].local_subnet)", sb.prefix, sa.prefix, ds[sa.i].ID, sa.i), "")
			}
		}
	}
}

// exclusive reports the second of two keys that may not both be set.
func exclusive(c *problems, path, a string, aSet bool, b string, bSet bool) {
	if aSet && bSet {
		c.add(joinKey(path, b), fmt.Sprintf("set together with %s; set one of the two", a), "")
	}
}

// needs reports key a set without the key b it only makes sense with.
func needs(c *problems, path, a string, aSet bool, b string, bSet bool) {
	if aSet && !bSet {
		c.add(joinKey(path, a), fmt.Sprintf("only applies with %s", b), "")
	}
}

// checkURL checks an optional http or https URL.
func checkURL(c *problems, path, s string) {
	if s == "" {
		return
	}
	if u, err := url.Parse(s); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		c.add(path, fmt.Sprintf("%q is not an http or https URL", s), "")
	}
}

// checkZones checks a district's zones: non-empty, unique and in the
// region (a zone's name is the region's plus a suffix).
func checkZones(c *problems, path string, zones []string, region, sep string) {
	seen := make(map[string]bool)
	for i, z := range zones {
		p := joinIndex(path, i)
		switch {
		case z == "":
			c.add(p, "empty zone", "")
		case seen[z]:
			c.add(p, fmt.Sprintf("%q is listed twice", z), "")
		case region != "" && (!strings.HasPrefix(z, region+sep) || len(z) == len(region+sep)):
			c.add(p, fmt.Sprintf("%q is not a zone of region %q", z, region), "")
		}
		seen[z] = true
	}
}

// Local subnets: at least /28 leaves room for a bridge and a few nodes,
// at most /16 keeps districts from swallowing the host's address space.
const (
	minLocalPrefix = 16
	maxLocalPrefix = 28
)

func checkSubnet(c *problems, path, s string) (netip.Prefix, bool) {
	return checkCIDR(c, path, s, minLocalPrefix, maxLocalPrefix, `use a private range such as "10.10.0.0/24"`)
}

// checkCIDR checks an IPv4 CIDR whose prefix length lies in [minBits,
// maxBits]; notCIDRHint is the hint for a value that is no IPv4 CIDR.
func checkCIDR(c *problems, path, s string, minBits, maxBits int, notCIDRHint string) (netip.Prefix, bool) {
	pfx, err := netip.ParsePrefix(s)
	switch {
	case err != nil || !pfx.Addr().Is4():
		c.add(path, fmt.Sprintf("%q is not an IPv4 CIDR", s), notCIDRHint)
	case pfx.Bits() < minBits || pfx.Bits() > maxBits:
		c.add(path, fmt.Sprintf("prefix length /%d is not between /%d and /%d", pfx.Bits(), minBits, maxBits), "")
	case pfx != pfx.Masked():
		c.add(path, fmt.Sprintf("%q has host bits set", s), fmt.Sprintf("did you mean %q?", pfx.Masked().String()))
	default:
		return pfx, true
	}
	return netip.Prefix{}, false
}

// validateCredentials checks credentials.json. Messages name keys, never
// the values of secrets.
func validateCredentials(c *problems, creds []Credential) {
	idAt := newFirsts("", "defined")
	for i, cr := range creds {
		p := joinIndex("", i)
		checkType(c, p+".type", cr.Type, "credential", true)
		if cr.ID == "" {
			c.add(p+".id", "missing", "")
		} else {
			idAt.add(c, p+".id", cr.ID, i)
		}
		switch {
		case cr.Provider == "":
			c.add(p+".provider", "missing "+known(credentialProviders), "")
			continue
		case cr.Provider == ProviderLocal:
			c.add(p+".provider", "local districts need no credential", "remove this entry")
			continue
		case !slices.Contains(credentialProviders, cr.Provider):
			c.add(p+".provider", fmt.Sprintf("%q is not a supported provider %s", cr.Provider, known(credentialProviders)), "")
			continue
		}
		checkForeignKeys(c, p, cr, cr.Provider, fmt.Sprintf("credential %q", cr.ID))
		if cr.StateKey != "" && !strings.HasPrefix(cr.StateKey.Reveal(), "AGE-SECRET-KEY-1") {
			c.add(p+".state_key", "not an age identity (AGE-SECRET-KEY-1…)", "make one with `transit state keygen`")
		}
		pair := func(a string, aSet bool, b string, bSet bool) {
			if aSet && !bSet {
				c.add(joinKey(p, b), fmt.Sprintf("missing (%s is set)", a), "")
			}
			if bSet && !aSet {
				c.add(joinKey(p, a), fmt.Sprintf("missing (%s is set)", b), "")
			}
		}
		switch cr.Provider {
		case ProviderAWS:
			pair("aws_access_key_id", cr.AWSAccessKeyID != "", "aws_secret_access_key", cr.AWSSecretAccessKey != "")
			if cr.AWSSessionToken != "" && cr.AWSAccessKeyID == "" {
				c.add(p+".aws_access_key_id", "missing (aws_session_token is set)", "")
			}
		case ProviderOpenStack:
			pair("os_username", cr.OSUsername != "", "os_password", cr.OSPassword != "")
			pair("os_application_credential_id", cr.OSApplicationCredentialID != "",
				"os_application_credential_secret", cr.OSApplicationCredentialSecret != "")
		}
	}
}

// validateResources checks resources.json.
func validateResources(c *problems, r Resources) {
	checkType(c, "type", r.Type, "resources", true)
	checkVersion(c, r.Version)
	if r.Cluster == "" && (len(r.Nodes) > 0 || len(r.SecurityGroups) > 0) {
		c.add("cluster", "missing, but the state lists nodes or security groups", "")
	}
	sameCluster := func(path, cluster string) {
		if r.Cluster != "" && cluster != r.Cluster {
			c.add(path, fmt.Sprintf("%q does not match the state's cluster %q", cluster, r.Cluster), "")
		}
	}
	nodeAt := newFirsts("nodes", "listed")
	for i, n := range r.Nodes {
		p := joinIndex("nodes", i)
		checkType(c, p+".type", n.Type, "node", false)
		if n.ID == "" {
			c.add(p+".id", "missing", "")
		} else {
			nodeAt.add(c, p+".id", n.ID, i)
		}
		sameCluster(p+".cluster", n.Cluster)
		if n.Phase != "" && !slices.Contains(Phases, n.Phase) {
			names := make([]string, len(Phases))
			for i, ph := range Phases {
				names[i] = string(ph)
			}
			c.add(p+".phase", fmt.Sprintf("%q is not a node phase %s", n.Phase, known(names)), "")
		}
	}
	for role, n := range r.NodeNumbers {
		checkNotNegative(c, joinKey("node_numbers", role), n)
	}
	for k, f := range r.Failures {
		checkNotNegative(c, joinKey("failures", k)+".count", f.Count)
	}
	groupAt := newFirsts("security_groups", "listed")
	for i, g := range r.SecurityGroups {
		p := joinIndex("security_groups", i)
		checkType(c, p+".type", g.Type, "security_group", false)
		if g.ID == "" {
			c.add(p+".id", "missing", "")
		} else {
			groupAt.add(c, p+".id", g.ID, i)
		}
		sameCluster(p+".cluster", g.Cluster)
	}
}

// CheckStateDistricts refuses a districts.json that dropped a district
// while the state still has nodes or a security group there: transit could
// no longer reach them and would silently forget them.
func CheckStateDistricts(r Resources, ds []District, stateFile string) error {
	known := map[string]int{}
	for i, d := range ds {
		known[d.ID] = i
	}
	c := newProblems(stateFile, reflect.TypeFor[Resources]())
	const hint = "put the district back in districts.json, set its quantities to 0 and apply; remove it once transit has emptied it"
	used := map[string]bool{}
	for i, n := range r.Nodes {
		used[n.District] = true
		if _, ok := known[n.District]; !ok {
			c.add(joinIndex("nodes", i)+".district", fmt.Sprintf("node %s is in district %q, which districts.json no longer defines", n.ID, n.District), hint)
		}
	}
	for i, g := range r.SecurityGroups {
		used[g.District] = true
		if _, ok := known[g.District]; !ok {
			c.add(joinIndex("security_groups", i)+".district", fmt.Sprintf("security group %s is in district %q, which districts.json no longer defines", g.ID, g.District), hint)
		}
	}
	// A district that holds something stays where it is: a changed
	// region, project or endpoint would list nothing and read as "every
	// machine is gone".
	const moveHint = "to move nodes, add a new district with the new settings, move the quantities to it in cluster.json and apply (transit migrates), then set the old one's quantities to 0 and drop it once empty"
	moved := newProblems("districts.json", reflect.TypeFor[[]District]())
	for _, id := range slices.Sorted(maps.Keys(r.Districts)) {
		i, ok := known[id]
		if !ok || !used[id] {
			continue
		}
		was, now := r.Districts[id], ds[i].Identity()
		for _, k := range slices.Sorted(maps.Keys(joinKeys(was, now))) {
			if was[k] != now[k] {
				moved.add(joinKey(joinIndex("", i), k), fmt.Sprintf("district %q has nodes or a group where %s is %s (%s), but districts.json now says %s: refused before any action",
					id, k, quoteOrUnset(was[k]), stateFile, quoteOrUnset(now[k])), moveHint)
			}
		}
	}
	return collect(c, moved).Err()
}

func joinKeys(a, b map[string]string) map[string]bool {
	out := map[string]bool{}
	for k := range a {
		out[k] = true
	}
	for k := range b {
		out[k] = true
	}
	return out
}

func quoteOrUnset(v string) string {
	if v == "" {
		return "unset"
	}
	return strconv.Quote(v)
}

// firsts remembers where each name of a list was first met, so a repeat
// is reported with the place of the first.
type firsts struct {
	list string // the list's JSON path
	verb string // "defined", "listed", "mapped"
	at   map[string]int
}

func newFirsts(list, verb string) firsts {
	return firsts{list: list, verb: verb, at: make(map[string]int)}
}

// add records name at index i of the list. A repeat is reported at path,
// "<name> is <verb> twice (first at <list>[j])", and returns false.
func (f firsts) add(c *problems, path, name string, i int) bool {
	if j, dup := f.at[name]; dup {
		c.add(path, fmt.Sprintf("%q is %s twice (first at %s)", name, f.verb, joinIndex(f.list, j)), "")
		return false
	}
	f.at[name] = i
	return true
}

func checkVersion(c *problems, v int) {
	switch {
	case v > ResourcesVersion:
		c.add("version", fmt.Sprintf("written by a newer transit (version %d; this transit reads version %d)", v, ResourcesVersion), "upgrade transit")
	case v == 0:
		c.add("version", fmt.Sprintf("missing (this transit writes version %d)", ResourcesVersion), "")
	case v < 0:
		c.add("version", fmt.Sprintf("unsupported version %d", v), "")
	}
}
