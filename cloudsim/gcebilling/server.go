package gcebilling

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// MaxPageSize is the most SKUs a page holds, and the default.
const MaxPageSize = 5000

// Rates are the currencies besides USD the front end converts to, at a
// fixed rate per USD.
var Rates = map[string]float64{"EUR": 0.92, "GBP": 0.79}

// Options configure a Server; the zero value is usable.
type Options struct {
	// Services (default DefaultServices()) and SKUs (default
	// DefaultCatalogue()) are the catalogue.
	Services []Service
	SKUs     []SKU
	// Authorize says whether a request's credentials are good (the
	// Compute Engine front end's Authorized, in cloudsim/server); nil
	// accepts any bearer token.
	Authorize func(*http.Request) bool
	// PageSize, when between 1 and MaxPageSize, caps a page below what
	// pageSize asks, so that tests see several pages.
	PageSize int
}

// Server is the Cloud Billing Catalog API front end. It is safe for
// concurrent use.
type Server struct {
	services  []Service
	skus      []SKU
	authorize func(*http.Request) bool

	mu        sync.Mutex
	pageSize  int
	failPages int
}

var _ http.Handler = (*Server)(nil)

// New returns a Cloud Billing Catalog API front end.
func New(opts Options) *Server {
	if opts.Services == nil {
		opts.Services = DefaultServices()
	}
	if opts.SKUs == nil {
		opts.SKUs = DefaultCatalogue()
	}
	s := &Server{services: slices.Clone(opts.Services), skus: slices.Clone(opts.SKUs), authorize: opts.Authorize}
	s.SetPageSize(opts.PageSize)
	return s
}

// SetPageSize caps the items of a page (0 or out of range: MaxPageSize).
func (s *Server) SetPageSize(n int) {
	if n <= 0 || n > MaxPageSize {
		n = MaxPageSize
	}
	s.mu.Lock()
	s.pageSize = n
	s.mu.Unlock()
}

// FailPages makes the next n requests for a page after the first (those
// with a pageToken) answer 500.
func (s *Server) FailPages(n int) {
	s.mu.Lock()
	s.failPages = n
	s.mu.Unlock()
}

// IsRequest says r is meant for this API: its path is under /v1/services,
// where Compute Engine's (/compute/v1/) never is.
func IsRequest(r *http.Request) bool {
	return r.URL.Path == "/v1/services" || strings.HasPrefix(r.URL.Path, "/v1/services/")
}

// apiError is a Google JSON error.
type apiError struct {
	code           int
	status, reason string
	message        string
}

func (e *apiError) Error() string { return fmt.Sprintf("%d %s: %s", e.code, e.status, e.message) }

func invalidArgument(format string, args ...any) *apiError {
	return &apiError{400, "INVALID_ARGUMENT", "badRequest", fmt.Sprintf(format, args...)}
}

// ServeHTTP answers one request.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !s.authorized(r) {
		w.Header().Set("WWW-Authenticate", `Bearer realm="https://accounts.google.com/", error="invalid_token"`)
		writeError(w, &apiError{401, "UNAUTHENTICATED", "authError",
			"Request had invalid authentication credentials. Expected OAuth 2 access token, login cookie or other valid authentication credential."})
		return
	}
	if r.Method != http.MethodGet {
		writeError(w, &apiError{405, "UNIMPLEMENTED", "notImplemented", fmt.Sprintf("Method %s is not served by this emulator.", r.Method)})
		return
	}
	q := r.URL.Query()
	if q.Get("pageToken") != "" && s.takeFailure() {
		writeError(w, &apiError{500, "INTERNAL", "backendError", "Internal error encountered."})
		return
	}
	ints := strings.Contains(q.Get("$alt"), "enum-encoding=int")
	var out any
	var err *apiError
	switch parts := strings.Split(strings.TrimPrefix(r.URL.Path, "/v1/"), "/"); {
	case len(parts) == 1 && parts[0] == "services":
		out, err = s.listServices(q.Get("pageSize"), q.Get("pageToken"))
	case len(parts) == 3 && parts[0] == "services" && parts[2] == "skus":
		out, err = s.listSKUs(parts[1], q.Get("currencyCode"), q.Get("pageSize"), q.Get("pageToken"), ints)
	default:
		err = &apiError{404, "NOT_FOUND", "notFound", fmt.Sprintf("The requested URL %s was not found on this server.", r.URL.Path)}
	}
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) authorized(r *http.Request) bool {
	if s.authorize != nil {
		return s.authorize(r)
	}
	tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	return ok && tok != ""
}

func (s *Server) takeFailure() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failPages > 0 {
		s.failPages--
		return true
	}
	return false
}

type serviceJSON struct {
	Name               string `json:"name"`
	ServiceID          string `json:"serviceId"`
	DisplayName        string `json:"displayName"`
	BusinessEntityName string `json:"businessEntityName"`
}

func (s *Server) listServices(size, token string) (any, *apiError) {
	items, next, err := page(s, s.services, "services", size, token)
	if err != nil {
		return nil, err
	}
	out := struct {
		Services      []serviceJSON `json:"services"`
		NextPageToken string        `json:"nextPageToken,omitempty"`
	}{Services: []serviceJSON{}, NextPageToken: next}
	for _, sv := range items {
		out.Services = append(out.Services, serviceJSON{Name: "services/" + sv.ID, ServiceID: sv.ID, DisplayName: sv.DisplayName,
			BusinessEntityName: "businessEntities/GCP"})
	}
	return out, nil
}

// money is google.type.Money: units are an int64, so a string in JSON.
type money struct {
	CurrencyCode string `json:"currencyCode"`
	Units        string `json:"units"`
	Nanos        int32  `json:"nanos"`
}

type skuJSON struct {
	Name        string `json:"name"`
	SKUID       string `json:"skuId"`
	Description string `json:"description"`
	Category    struct {
		ServiceDisplayName string `json:"serviceDisplayName"`
		ResourceFamily     string `json:"resourceFamily"`
		ResourceGroup      string `json:"resourceGroup"`
		UsageType          string `json:"usageType"`
	} `json:"category"`
	ServiceRegions      []string      `json:"serviceRegions"`
	PricingInfo         []pricingInfo `json:"pricingInfo"`
	ServiceProviderName string        `json:"serviceProviderName"`
	GeoTaxonomy         struct {
		Type    any      `json:"type"`
		Regions []string `json:"regions"`
	} `json:"geoTaxonomy"`
}

type pricingInfo struct {
	Summary                string     `json:"summary"`
	PricingExpression      expression `json:"pricingExpression"`
	CurrencyConversionRate float64    `json:"currencyConversionRate"`
	EffectiveTime          string     `json:"effectiveTime"`
}

type expression struct {
	UsageUnit                string  `json:"usageUnit"`
	DisplayQuantity          float64 `json:"displayQuantity"`
	TieredRates              []rate  `json:"tieredRates"`
	UsageUnitDescription     string  `json:"usageUnitDescription"`
	BaseUnit                 string  `json:"baseUnit"`
	BaseUnitDescription      string  `json:"baseUnitDescription"`
	BaseUnitConversionFactor float64 `json:"baseUnitConversionFactor"`
}

type rate struct {
	StartUsageAmount float64 `json:"startUsageAmount"`
	UnitPrice        money   `json:"unitPrice"`
}

// units describe the usage units the catalogue uses: description, base
// unit, its description and the factor.
var units = map[string][4]string{
	"h":       {"hour", "s", "second", "3600"},
	"GiBy.h":  {"gibibyte hour", "By.s", "byte second", "13194139533312000"},
	"GiBy.mo": {"gibibyte month", "By.s", "byte second", "2853152143441920000"},
	"GiBy":    {"gibibyte", "By", "byte", "1073741824"},
}

func (s *Server) listSKUs(service, currency, size, token string, ints bool) (any, *apiError) {
	if !slices.ContainsFunc(s.services, func(sv Service) bool { return sv.ID == service }) {
		return nil, &apiError{404, "NOT_FOUND", "notFound", fmt.Sprintf("Service services/%s not found.", service)}
	}
	if currency == "" {
		currency = "USD"
	}
	conv := 1.0
	if currency != "USD" {
		var ok bool
		if conv, ok = Rates[currency]; !ok {
			return nil, invalidArgument("Invalid currency code: %s.", currency)
		}
	}
	var matched []SKU
	for _, k := range s.skus {
		if k.Service == service {
			matched = append(matched, k)
		}
	}
	items, next, err := page(s, matched, "skus|"+service+"|"+currency, size, token)
	if err != nil {
		return nil, err
	}
	display := ""
	for _, sv := range s.services {
		if sv.ID == service {
			display = sv.DisplayName
		}
	}
	out := struct {
		SKUs          []skuJSON `json:"skus"`
		NextPageToken string    `json:"nextPageToken,omitempty"`
	}{SKUs: []skuJSON{}, NextPageToken: next}
	for _, k := range items {
		var j skuJSON
		j.Name, j.SKUID, j.Description = "services/"+service+"/skus/"+k.ID, k.ID, k.Description
		j.Category.ServiceDisplayName, j.Category.ResourceFamily, j.Category.ResourceGroup, j.Category.UsageType = display, k.ResourceFamily, k.ResourceGroup, k.UsageType
		j.ServiceRegions = slices.Clone(k.Regions)
		j.ServiceProviderName = "Google"
		j.GeoTaxonomy.Regions = slices.Clone(k.Regions)
		switch {
		case len(k.Regions) > 1 && ints:
			j.GeoTaxonomy.Type = 3
		case len(k.Regions) > 1:
			j.GeoTaxonomy.Type = "MULTI_REGIONAL"
		case ints:
			j.GeoTaxonomy.Type = 2
		default:
			j.GeoTaxonomy.Type = "REGIONAL"
		}
		j.PricingInfo = make([]pricingInfo, 1)
		p := &j.PricingInfo[0]
		u := units[k.Unit]
		factor, _ := strconv.ParseFloat(u[3], 64)
		p.PricingExpression.UsageUnit, p.PricingExpression.DisplayQuantity = k.Unit, 1
		p.PricingExpression.UsageUnitDescription, p.PricingExpression.BaseUnit, p.PricingExpression.BaseUnitDescription = u[0], u[1], u[2]
		p.PricingExpression.BaseUnitConversionFactor = factor
		p.PricingExpression.TieredRates = []rate{{UnitPrice: toMoney(currency, k.USD*conv)}}
		p.CurrencyConversionRate = conv
		p.EffectiveTime = k.Effective.UTC().Format(time.RFC3339Nano)
		out.SKUs = append(out.SKUs, j)
	}
	return out, nil
}

// toMoney splits an amount into units and nanos, as google.type.Money
// does.
func toMoney(currency string, amount float64) money {
	nanos := int64(math.Round(amount * 1e9))
	return money{CurrencyCode: currency, Units: strconv.FormatInt(nanos/1e9, 10), Nanos: int32(nanos % 1e9)}
}

// page cuts items by the page token and size; the token says the offset
// and the query it belongs to.
func page[T any](s *Server, items []T, query, size, token string) ([]T, string, *apiError) {
	limit := MaxPageSize
	if size != "" {
		n, err := strconv.Atoi(size)
		if err != nil || n < 0 {
			return nil, "", invalidArgument("Invalid page size: %s.", size)
		}
		if n > 0 {
			limit = min(n, MaxPageSize)
		}
	}
	s.mu.Lock()
	limit = min(limit, s.pageSize)
	s.mu.Unlock()
	from := 0
	if token != "" {
		raw, err := base64.RawURLEncoding.DecodeString(token)
		q, off, ok := strings.Cut(string(raw), "@")
		n, aerr := strconv.Atoi(off)
		if err != nil || !ok || q != query || aerr != nil || n < 0 || n > len(items) {
			return nil, "", invalidArgument("Invalid page token: %s.", token)
		}
		from = n
	}
	to := min(from+limit, len(items))
	next := ""
	if to < len(items) {
		next = base64.RawURLEncoding.EncodeToString([]byte(query + "@" + strconv.Itoa(to)))
	}
	return items[from:to], next, nil
}

func writeError(w http.ResponseWriter, e *apiError) {
	writeJSON(w, e.code, map[string]any{"error": map[string]any{
		"code": e.code, "message": e.message, "status": e.status,
		"errors": []map[string]string{{"message": e.message, "domain": "global", "reason": e.reason}},
	}})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json; charset=UTF-8")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}
