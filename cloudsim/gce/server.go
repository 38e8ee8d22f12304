package gce

import (
	"cmp"
	"context"
	"crypto/rsa"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"sync"

	"github.com/cloudtransit/transit/cloudsim"
)

// Image is a disk image the emulator knows.
type Image struct {
	Project, Name, Family string
	Deprecated            bool
}

// DefaultImages are Debian's public images, as debian-cloud publishes them.
func DefaultImages() []Image {
	return []Image{
		{Project: "debian-cloud", Name: "debian-12-bookworm-v20250101", Family: "debian-12", Deprecated: true},
		{Project: "debian-cloud", Name: "debian-12-bookworm-v20251111", Family: "debian-12"},
		{Project: "debian-cloud", Name: "debian-13-trixie-v20251111", Family: "debian-13"},
	}
}

// Options configure a Server.
type Options struct {
	// Accounts are the service accounts (client_email → public key of
	// their key file) whose tokens and self-signed JWTs are accepted;
	// nil accepts any bearer token.
	Accounts map[string]*rsa.PublicKey
	// Images (default DefaultImages).
	Images []Image
	// Networks are the VPC networks of every project (default
	// ["default"]).
	Networks []string
	// CPUs is the CPUS quota of each project in each region: the vCPUs
	// of its instances that are not TERMINATED (an insert beyond it is
	// refused with QUOTA_EXCEEDED); Firewalls the FIREWALLS quota of each
	// project. 0: unlimited (cmd/cloudsim sets DefaultCPUs and
	// DefaultFirewalls).
	CPUs, Firewalls int
}

// Compute Engine's quotas as new projects commonly get them: 24 CPUS per
// region, and a FIREWALLS quota Google does not document (projects show
// 100–500), taken as 100.
const (
	DefaultCPUs      = 24
	DefaultFirewalls = 100
)

// Server is the Compute Engine front end of a cloudsim.Sim.
type Server struct {
	*cloudsim.Front
	sim  *cloudsim.Sim
	opts Options

	mu        sync.Mutex
	seq       uint64
	instances map[string]*instance  // project/zone/name
	firewalls map[string]*firewall  // project/name
	ops       map[string]*operation // project/(zone|global)/name
	requests  map[string]*operation // project/requestId
	tokens    map[string]string     // access token → account
	regions   map[string]bool       // backed regions instances started in

	// allowMu orders Backer.Allow calls, so the last call carries the
	// last firewall state.
	allowMu sync.Mutex
}

var _ http.Handler = (*Server)(nil)

// New returns a Compute Engine front end for sim.
func New(sim *cloudsim.Sim, opts Options) *Server {
	if opts.Images == nil {
		opts.Images = DefaultImages()
	}
	if opts.Networks == nil {
		opts.Networks = []string{"default"}
	}
	opts.Accounts = maps.Clone(opts.Accounts)
	return &Server{
		Front: cloudsim.NewFront(sim, "gce"), sim: sim, opts: opts,
		instances: map[string]*instance{}, firewalls: map[string]*firewall{}, ops: map[string]*operation{},
		requests: map[string]*operation{}, tokens: map[string]string{}, regions: map[string]bool{},
	}
}

func (s *Server) nextSeq() uint64 {
	s.seq++
	return s.seq
}

// apiError is a Google JSON error.
type apiError struct {
	code    int
	status  string
	reason  string
	message string
}

func (e *apiError) Error() string { return fmt.Sprintf("%d %s: %s", e.code, e.reason, e.message) }

func notFound(resource string) *apiError {
	return &apiError{404, "NOT_FOUND", "notFound", fmt.Sprintf("The resource '%s' was not found", resource)}
}

func alreadyExists(resource string) *apiError {
	return &apiError{409, "ALREADY_EXISTS", "alreadyExists", fmt.Sprintf("The resource '%s' already exists", resource)}
}

func invalidField(field, value, why string) *apiError {
	msg := fmt.Sprintf("Invalid value for field '%s': '%s'.", field, value)
	if why != "" {
		msg += " " + why
	}
	return &apiError{400, "INVALID_ARGUMENT", "invalid", msg}
}

func badRequest(msg string) *apiError {
	return &apiError{400, "INVALID_ARGUMENT", "badRequest", msg}
}

func internalError() *apiError {
	return &apiError{500, "INTERNAL", "backendError", "Internal error. Please try again or contact Google Support."}
}

func rateLimited() *apiError {
	return &apiError{429, "RESOURCE_EXHAUSTED", "rateLimitExceeded",
		"Quota exceeded for quota metric 'Queries' and limit 'Queries per minute' of service 'compute.googleapis.com'."}
}

func quotaError(quota, region string) *apiError {
	if quota == "" {
		quota = "INSTANCES"
	}
	return overQuota(quota, 24, region)
}

// overQuota is Compute Engine's answer to a request beyond a quota of
// limit in region ("global" for a project's).
func overQuota(quota string, limit int, region string) *apiError {
	where := "in region " + region
	if region == "global" {
		where = "globally"
	}
	return &apiError{403, "PERMISSION_DENIED", "quotaExceeded", fmt.Sprintf("Quota '%s' exceeded.  Limit: %d.0 %s.", quota, limit, where)}
}

func unauthenticated() *apiError {
	return &apiError{401, "UNAUTHENTICATED", "authError",
		"Request had invalid authentication credentials. Expected OAuth 2 access token, login cookie or other valid authentication credential."}
}

func writeError(w http.ResponseWriter, err error) {
	var ae *apiError
	if !errors.As(err, &ae) {
		ae = internalError()
	}
	if ae.code == 401 {
		w.Header().Set("WWW-Authenticate", `Bearer realm="https://accounts.google.com/", error="invalid_token"`)
	}
	writeJSON(w, ae.code, map[string]any{"error": map[string]any{
		"code": ae.code, "message": ae.message, "status": ae.status,
		"errors": []map[string]string{{"message": ae.message, "domain": "global", "reason": ae.reason}},
	}})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=UTF-8")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// maxBody bounds a request body.
const maxBody = 1 << 20

// call is one API request being served.
type call struct {
	ctx     context.Context
	s       *Server
	base    string // the API's URL prefix for self links
	project string
	rest    []string // path after projects/{project}
	query   map[string][]string
	body    []byte
	// failed is a cloudsim.FaultFailed that hit the request: an insert
	// whose instance ends TERMINATED.
	failed *cloudsim.Fault
	// unreachable is a cloudsim.FaultUnreachable that hit the request:
	// an aggregated list that cannot reach a zone.
	unreachable *cloudsim.Fault
}

func (c *call) q(name string) string {
	if v := c.query[name]; len(v) > 0 {
		return v[0]
	}
	return ""
}

func (c *call) link(parts ...string) string {
	return c.base + "/projects/" + c.project + "/" + strings.Join(parts, "/")
}

type route struct {
	method string
	path   string // pattern, "*" a segment
	op     cloudsim.Op
	fn     func(c *call) (any, error)
}

var routes = []route{
	{"POST", "zones/*/instances", cloudsim.OpLaunch, (*call).insertInstance},
	{"GET", "zones/*/instances", cloudsim.OpList, (*call).listInstances},
	{"GET", "zones/*/instances/*", cloudsim.OpList, (*call).getInstance},
	{"DELETE", "zones/*/instances/*", cloudsim.OpTerminate, (*call).deleteInstance},
	{"GET", "zones/*/instances/*/getGuestAttributes", cloudsim.OpList, (*call).guestAttributes},
	{"POST", "zones/*/instances/*/stop", cloudsim.OpPower, (*call).stopInstance},
	{"POST", "zones/*/instances/*/start", cloudsim.OpPower, (*call).startInstance},
	{"GET", "zones/*/operations", cloudsim.OpList, (*call).listOperations},
	{"GET", "aggregated/instances", cloudsim.OpList, (*call).aggregatedInstances},
	{"GET", "zones/*/operations/*", cloudsim.OpList, (*call).getOperation},
	{"POST", "zones/*/operations/*/wait", cloudsim.OpList, (*call).waitOperation},
	{"GET", "global/operations/*", cloudsim.OpList, (*call).getOperation},
	{"POST", "global/operations/*/wait", cloudsim.OpList, (*call).waitOperation},
	{"POST", "global/firewalls", cloudsim.OpGroup, (*call).insertFirewall},
	{"GET", "global/firewalls", cloudsim.OpList, (*call).listFirewalls},
	{"GET", "global/firewalls/*", cloudsim.OpList, (*call).getFirewall},
	{"PATCH", "global/firewalls/*", cloudsim.OpGroup, (*call).patchFirewall},
	{"DELETE", "global/firewalls/*", cloudsim.OpGroup, (*call).deleteFirewall},
	{"GET", "global/images/family/*", cloudsim.OpList, (*call).imageFromFamily},
	{"GET", "global/images/*", cloudsim.OpList, (*call).getImage},
	{"GET", "zones/*/machineTypes/*", cloudsim.OpList, (*call).getMachineType},
}

func (r route) match(method string, rest []string) bool {
	pat := strings.Split(r.path, "/")
	if method != r.method || len(pat) != len(rest) {
		return false
	}
	for i, p := range pat {
		if p != "*" && p != rest[i] || rest[i] == "" {
			return false
		}
	}
	return true
}

const apiPrefix = "/compute/v1/projects/"

var projectName = regexp.MustCompile(`^[a-z][a-z0-9-]{4,28}[a-z0-9]$`)

// ServeHTTP answers one Compute Engine or token request.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
	if err != nil || len(body) > maxBody {
		writeError(w, badRequest("The request body is unreadable or too large."))
		return
	}
	if r.URL.Path == TokenPath {
		s.serveToken(w, r, body)
		return
	}
	if !s.Authorized(r) {
		writeError(w, unauthenticated())
		return
	}
	path, ok := strings.CutPrefix(r.URL.Path, apiPrefix)
	if !ok {
		writeError(w, notFound(r.URL.Path))
		return
	}
	parts := strings.Split(path, "/")
	if !projectName.MatchString(parts[0]) {
		writeError(w, invalidField("project", parts[0], "Must be a match of regex '(?:[-a-z0-9]{1,63}\\.)*(?:[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?):)?(?:[0-9]{1,19}|(?:[a-z0-9](?:[-a-z0-9]{0,61}[a-z0-9])?))'"))
		return
	}
	var rt *route
	for i := range routes {
		if routes[i].match(r.Method, parts[1:]) {
			rt = &routes[i]
			break
		}
	}
	if rt == nil {
		writeError(w, &apiError{404, "NOT_FOUND", "notFound", fmt.Sprintf("The requested URL %s was not found on this server.", r.URL.Path)})
		return
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	c := &call{ctx: r.Context(), s: s, base: scheme + "://" + r.Host + "/compute/v1", project: parts[0],
		rest: parts[1:], query: r.URL.Query(), body: body}

	lost := false
	f, faulted := s.sim.Faults.Take(rt.op)
	if !faulted {
		// Every request's token is checked: auth faults hit them all.
		f, faulted = s.sim.Faults.Take(cloudsim.OpAuth)
	}
	if faulted {
		switch f.Kind {
		case cloudsim.FaultThrottle:
			writeError(w, rateLimited())
			return
		case cloudsim.FaultQuota:
			writeError(w, quotaError(f.Quota, regionOf(c.rest)))
			return
		case cloudsim.FaultServer:
			writeError(w, internalError())
			return
		case cloudsim.FaultAuth:
			writeError(w, unauthenticated())
			return
		case cloudsim.FaultSlow:
			if err := cloudsim.SleepWall(r.Context(), f.Delay); err != nil {
				return
			}
		case cloudsim.FaultLost:
			lost = true
		case cloudsim.FaultFailed:
			c.failed = &f
		case cloudsim.FaultUnreachable:
			c.unreachable = &f
		}
	}
	s.tick()
	out, err := rt.fn(c)
	s.tick()
	if lost {
		// The work is done; only the answer is lost.
		writeError(w, internalError())
		return
	}
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, out)
}

// regionOf is the region of a zonal path's zone, or "global".
func regionOf(rest []string) string {
	if len(rest) > 1 && rest[0] == "zones" {
		return zoneRegion(rest[1])
	}
	return "global"
}

// decode reads a JSON request body into v, refusing what is not JSON.
func (c *call) decode(v any) error {
	if err := json.Unmarshal(c.body, v); err != nil {
		return badRequest("Invalid JSON payload received. " + err.Error())
	}
	return nil
}

// page cuts items by the call's pageToken and maxResults (or the forced
// page size).
func page[T any](c *call, items []T) ([]T, string, error) {
	from := 0
	if tok := c.q("pageToken"); tok != "" {
		n, err := parsePageToken(tok)
		if err != nil || n > len(items) {
			return nil, "", invalidField("pageToken", tok, "")
		}
		from = n
	}
	limit := 500
	if m := c.q("maxResults"); m != "" {
		var n int
		if _, err := fmt.Sscan(m, &n); err != nil || n < 0 || n > 500 {
			return nil, "", invalidField("maxResults", m, "Must be between 0 and 500.")
		}
		if n > 0 {
			limit = n
		}
	}
	if ps := c.s.PageSize(); ps > 0 {
		limit = ps
	}
	to := min(from+limit, len(items))
	next := ""
	if to < len(items) {
		next = pageToken(to)
	}
	return items[from:to], next, nil
}

func pageToken(n int) string { return fmt.Sprintf("Cg%08x", n) }

func parsePageToken(tok string) (int, error) {
	var n int
	if len(tok) != 10 || !strings.HasPrefix(tok, "Cg") {
		return 0, fmt.Errorf("bad token")
	}
	_, err := fmt.Sscanf(tok[2:], "%08x", &n)
	return n, err
}

// Resource is something that exists in the emulated project.
type Resource struct {
	Project string            `json:"project"`
	Zone    string            `json:"zone,omitempty"`
	Kind    string            `json:"kind"` // instance, firewall
	Name    string            `json:"name"`
	Status  string            `json:"status,omitempty"`
	Labels  map[string]string `json:"labels,omitempty"`
}

// Resources lists every instance (deleting ones included) and firewall
// that exists.
func (s *Server) Resources() []Resource {
	s.tick()
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.sim.Time()
	var out []Resource
	for _, in := range s.sortedInstances() {
		out = append(out, Resource{Project: in.project, Zone: in.zone, Kind: "instance", Name: in.name,
			Status: s.status(in, now), Labels: maps.Clone(in.labels)})
	}
	for _, f := range s.sortedFirewalls() {
		out = append(out, Resource{Project: f.project, Kind: "firewall", Name: f.name})
	}
	return out
}

func (s *Server) sortedInstances() []*instance {
	out := slices.Collect(maps.Values(s.instances))
	slices.SortFunc(out, func(a, b *instance) int { return cmp.Compare(a.seq, b.seq) })
	return out
}

func (s *Server) sortedOps() []*operation {
	out := slices.Collect(maps.Values(s.ops))
	slices.SortFunc(out, func(a, b *operation) int { return cmp.Compare(a.seq, b.seq) })
	return out
}

func (s *Server) sortedFirewalls() []*firewall {
	out := slices.Collect(maps.Values(s.firewalls))
	slices.SortFunc(out, func(a, b *firewall) int { return cmp.Compare(a.seq, b.seq) })
	return out
}
