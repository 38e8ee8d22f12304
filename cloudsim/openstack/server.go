package openstack

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cloudtransit/transit/cloudsim"
)

// User is a Keystone user with a password, scoped to one project.
type User struct {
	Name, Password, Project string
	// Domain of the user and the project (default "Default").
	Domain string
}

// AppCredential is a Keystone application credential.
type AppCredential struct {
	ID, Secret, Project string
}

// Image is a Glance image.
type Image struct{ ID, Name string }

// Flavor is a Nova flavor.
type Flavor struct {
	ID, Name   string
	VCPUs, RAM int // RAM in MiB
	Disk       int // GiB
}

// Options configure a Server.
type Options struct {
	// Users and AppCredentials are who may get a token; both nil accept
	// any password or application credential (project "demo").
	Users          []User
	AppCredentials []AppCredential
	// Regions are the catalog's regions (default ["RegionOne"]); Zones
	// Nova's availability zones in each (default ["nova"]).
	Regions, Zones []string
	// Images (default DefaultImages) and Flavors (default
	// DefaultFlavors).
	Images  []Image
	Flavors []Flavor
	// TokenLife is how long a token is valid (default an hour) by the
	// sim's clock; a request with an expired one answers 401, as
	// Keystone's does.
	TokenLife time.Duration
	// ReclaimInterval is Nova's reclaim_instance_interval (cloud time):
	// set, a DELETE soft-deletes a server that was ever ACTIVE
	// (SOFT_DELETED until it has passed; forceDelete deletes it now).
	// Zero: a DELETE deletes, as in most clouds.
	ReclaimInterval time.Duration
	// Quotas are Neutron's quotas of each project (by name) in each
	// region; a project without an entry, or a zero field, has
	// DefaultQuotas'.
	Quotas map[string]Quotas
	// ProjectQuotas are the quotas of a project without an entry in
	// Quotas (a zero field: Neutron's default).
	ProjectQuotas Quotas
}

// Quotas are a project's Neutron quotas in a region: how many security
// groups (the project's default group counts), security group rules (the
// rules Neutron gives every group count: the default group's four, each
// other group's two egress rules) and floating IPs it may hold. Zero is
// Neutron's default, negative unlimited (Neutron's -1).
type Quotas struct {
	SecurityGroups     int
	SecurityGroupRules int
	FloatingIPs        int
}

// DefaultQuotas are Neutron's defaults: quota_security_group 10,
// quota_security_group_rule 100, quota_floatingip 50.
func DefaultQuotas() Quotas {
	return Quotas{SecurityGroups: 10, SecurityGroupRules: 100, FloatingIPs: 50}
}

// DefaultImages are what a fresh DevStack-like cloud offers.
func DefaultImages() []Image {
	return []Image{
		{ID: "6d1b0c0e-7f3a-4a38-9d0c-2f1c5b1e0a01", Name: "debian-12"},
		{ID: "6d1b0c0e-7f3a-4a38-9d0c-2f1c5b1e0a02", Name: "cirros-0.6.2-x86_64-disk"},
	}
}

// DefaultFlavors are Nova's classic m1 flavors.
func DefaultFlavors() []Flavor {
	return []Flavor{
		{ID: "1", Name: "m1.tiny", VCPUs: 1, RAM: 512, Disk: 1},
		{ID: "2", Name: "m1.small", VCPUs: 1, RAM: 2048, Disk: 20},
		{ID: "3", Name: "m1.medium", VCPUs: 2, RAM: 4096, Disk: 40},
		{ID: "4", Name: "m1.large", VCPUs: 4, RAM: 8192, Disk: 80},
	}
}

// The networks every region has: a tenant network and the external one
// floating IPs come from.
const (
	PrivateNetwork   = "private"
	PublicNetwork    = "public"
	privateNetworkID = "3a0c5e1d-0000-4000-8000-000000000001"
	publicNetworkID  = "3a0c5e1d-0000-4000-8000-000000000002"
)

// Server is the OpenStack front end of a cloudsim.Sim.
type Server struct {
	*cloudsim.Front
	sim  *cloudsim.Sim
	opts Options

	mu       sync.Mutex
	seq      uint64
	tokens   map[string]token
	servers  map[string]*server
	keypairs map[string]*keypair // project/name
	groups   map[string]*secGroup
	rules    map[string]*rule
	fips     map[string]*floatingIP
	quotas   map[string]Quotas // by project, as set
	regions  map[string]bool   // backed regions machines started in
	allowMu  sync.Mutex
}

var _ http.Handler = (*Server)(nil)

// New returns an OpenStack front end for sim.
func New(sim *cloudsim.Sim, opts Options) *Server {
	if len(opts.Regions) == 0 {
		opts.Regions = []string{"RegionOne"}
	}
	if len(opts.Zones) == 0 {
		opts.Zones = []string{"nova"}
	}
	if opts.Images == nil {
		opts.Images = DefaultImages()
	}
	if opts.Flavors == nil {
		opts.Flavors = DefaultFlavors()
	}
	if opts.TokenLife <= 0 {
		opts.TokenLife = time.Hour
	}
	return &Server{Front: cloudsim.NewFront(sim, "openstack"), sim: sim, opts: opts, tokens: map[string]token{}, servers: map[string]*server{},
		keypairs: map[string]*keypair{}, groups: map[string]*secGroup{}, rules: map[string]*rule{},
		fips: map[string]*floatingIP{}, quotas: maps.Clone(opts.Quotas), regions: map[string]bool{}}
}

// SetQuotas sets a project's Neutron quotas (as an operator's "openstack
// quota set" does), for requests from now on; what the project holds
// already stays, over them or not.
func (s *Server) SetQuotas(project string, q Quotas) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.quotas == nil {
		s.quotas = map[string]Quotas{}
	}
	s.quotas[project] = q
}

// newID returns a random UUID.
func newID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// apiError is an OpenStack error answer. Nova wraps it as {"<kind>":
// {"code", "message"}}, Neutron as {"NeutronError": {"type", "message",
// "detail"}}, Keystone as {"error": {"code", "title", "message"}}.
type apiError struct {
	status  int
	kind    string // Nova's wrapper key or Neutron's type
	message string
}

func (e *apiError) Error() string { return fmt.Sprintf("%d %s: %s", e.status, e.kind, e.message) }

func badRequest(msg string) *apiError     { return &apiError{400, "badRequest", msg} }
func itemNotFound(msg string) *apiError   { return &apiError{404, "itemNotFound", msg} }
func conflict(kind, msg string) *apiError { return &apiError{409, kind, msg} }

func internalError() *apiError {
	return &apiError{500, "computeFault", "Unexpected API Error. Please report this at http://bugs.launchpad.net/nova/ and attach the Nova API log if possible."}
}

func overLimit() *apiError {
	return &apiError{429, "overLimit", "This request was rate-limited."}
}

// quotaExceeded is an injected quota fault as the API answers it: Nova's
// 403 "Quota exceeded for instances: ...", Neutron's 409 OverQuota
// naming the resource (default the one the request would make).
func quotaExceeded(svc service, quota, resource string) *apiError {
	if svc == network {
		return overQuota(cmp.Or(quota, resource, "port"))
	}
	if quota == "" {
		quota = "instances"
	}
	return &apiError{403, "forbidden", fmt.Sprintf("Quota exceeded for %s: Requested 1, but already used 10 of 10 %s.", quota, quota)}
}

func unauthorized() *apiError {
	return &apiError{401, "Unauthorized", "The request you have made requires authentication."}
}

// service is which API a request is for; errors are shaped by it.
type service int

const (
	identity service = iota
	compute
	network
	image
)

func writeError(w http.ResponseWriter, svc service, err error) {
	var ae *apiError
	if !errors.As(err, &ae) {
		ae = internalError()
	}
	if ae.status == 429 {
		w.Header().Set("Retry-After", "1")
	}
	switch {
	case svc == identity || ae.status == 401:
		if ae.status == 401 {
			w.Header().Set("WWW-Authenticate", `Keystone uri="/identity"`)
		}
		writeJSON(w, ae.status, map[string]any{"error": map[string]any{
			"code": ae.status, "title": http.StatusText(ae.status), "message": ae.message}})
	case svc == network:
		writeJSON(w, ae.status, map[string]any{"NeutronError": map[string]any{
			"type": ae.kind, "message": ae.message, "detail": ""}})
	case svc == image:
		w.Header().Set("Content-Type", "text/html; charset=UTF-8")
		w.WriteHeader(ae.status)
		fmt.Fprintf(w, "<html><head><title>%d %s</title></head><body><h1>%d %s</h1>%s<br /><br /></body></html>",
			ae.status, http.StatusText(ae.status), ae.status, http.StatusText(ae.status), ae.message)
	default:
		writeJSON(w, ae.status, map[string]any{ae.kind: map[string]any{"code": ae.status, "message": ae.message}})
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Openstack-Request-Id", "req-"+newID())
	w.WriteHeader(status)
	if v != nil {
		_ = json.NewEncoder(w).Encode(v)
	}
}

const maxBody = 1 << 20

// call is one request being served.
type call struct {
	ctx     context.Context
	s       *Server
	base    string // scheme://host
	region  string
	project string
	rest    []string
	query   map[string][]string
	body    []byte
	// failed is a cloudsim.FaultFailed that hit the request: a create
	// whose server ends ERROR.
	failed *cloudsim.Fault
}

func (c *call) q(name string) string {
	if v := c.query[name]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// decode reads the JSON body into v.
func (c *call) decode(v any) error {
	if err := json.Unmarshal(c.body, v); err != nil {
		return badRequest("Malformed request body: " + err.Error())
	}
	return nil
}

// reply is a successful answer: its status and body.
type reply struct {
	status int
	body   any
}

type route struct {
	svc    service
	method string
	path   string // "*" is one segment
	op     cloudsim.Op
	fn     func(c *call) (reply, error)
}

var routes = []route{
	{compute, "GET", "flavors/detail", cloudsim.OpList, (*call).listFlavors},
	{compute, "POST", "os-keypairs", cloudsim.OpKeys, (*call).createKeypair},
	{compute, "GET", "os-keypairs/*", cloudsim.OpKeys, (*call).getKeypair},
	{compute, "DELETE", "os-keypairs/*", cloudsim.OpKeys, (*call).deleteKeypair},
	{compute, "POST", "servers", cloudsim.OpLaunch, (*call).createServer},
	{compute, "GET", "servers/detail", cloudsim.OpList, (*call).listServers},
	{compute, "GET", "servers/*", cloudsim.OpList, (*call).getServer},
	{compute, "DELETE", "servers/*", cloudsim.OpTerminate, (*call).deleteServer},
	{compute, "POST", "servers/*/action", cloudsim.OpList, (*call).serverAction},
	{network, "GET", "networks", cloudsim.OpList, (*call).listNetworks},
	{network, "GET", "ports", cloudsim.OpList, (*call).listPorts},
	{network, "GET", "security-groups", cloudsim.OpList, (*call).listGroups},
	{network, "POST", "security-groups", cloudsim.OpGroup, (*call).createGroup},
	{network, "GET", "security-groups/*", cloudsim.OpList, (*call).getGroup},
	{network, "PUT", "security-groups/*", cloudsim.OpGroup, (*call).updateGroup},
	{network, "DELETE", "security-groups/*", cloudsim.OpGroup, (*call).deleteGroup},
	{network, "GET", "security-group-rules", cloudsim.OpList, (*call).listRules},
	{network, "POST", "security-group-rules", cloudsim.OpGroup, (*call).createRules},
	{network, "DELETE", "security-group-rules/*", cloudsim.OpGroup, (*call).deleteRule},
	{network, "GET", "floatingips", cloudsim.OpList, (*call).listFloatingIPs},
	{network, "POST", "floatingips", cloudsim.OpLaunch, (*call).createFloatingIP},
	{network, "DELETE", "floatingips/*", cloudsim.OpTerminate, (*call).deleteFloatingIP},
	{image, "GET", "images", cloudsim.OpList, (*call).listImages},
}

func (r route) match(svc service, method string, rest []string) bool {
	pat := strings.Split(r.path, "/")
	if svc != r.svc || method != r.method || len(pat) != len(rest) {
		return false
	}
	for i, p := range pat {
		if p != "*" && p != rest[i] || rest[i] == "" {
			return false
		}
	}
	return true
}

// servicePrefixes are each API's path under /REGION/, up to its version.
var servicePrefixes = []struct {
	svc             service
	root, versioned string
}{
	{compute, "compute", "compute/v2.1/"},
	{network, "network", "network/v2.0/"},
	{image, "image", "image/v2/"},
}

// ServeHTTP answers one Keystone, Nova, Neutron or Glance request.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
	if err != nil || len(body) > maxBody {
		writeError(w, compute, &apiError{413, "badRequest", "Request is too large."})
		return
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	base := scheme + "://" + r.Host
	if path, ok := strings.CutPrefix(r.URL.Path, "/identity"); ok {
		s.serveIdentity(w, r, base, path, body)
		return
	}
	region, path, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/")
	if !slices.Contains(s.opts.Regions, region) {
		writeError(w, compute, itemNotFound("The resource could not be found."))
		return
	}
	svc, rest, found := compute, "", false
	for _, p := range servicePrefixes {
		if path == p.root || path == p.root+"/" {
			// Version discovery needs no token.
			s.serveVersions(w, base+"/"+region+"/", p.svc)
			return
		}
		if r, ok := strings.CutPrefix(path, p.versioned); ok {
			svc, rest, found = p.svc, r, true
			break
		}
	}
	if !found {
		writeError(w, compute, itemNotFound("The resource could not be found."))
		return
	}
	project, ok := s.project(r.Header.Get("X-Auth-Token"))
	if !ok {
		writeError(w, svc, unauthorized())
		return
	}
	parts := strings.Split(strings.TrimSuffix(rest, "/"), "/")
	var rt *route
	for i := range routes {
		if routes[i].match(svc, r.Method, parts) {
			rt = &routes[i]
			break
		}
	}
	if rt == nil {
		writeError(w, svc, itemNotFound(fmt.Sprintf("The resource could not be found: %s %s", r.Method, r.URL.Path)))
		return
	}
	c := &call{ctx: r.Context(), s: s, base: base, region: region, project: project, rest: parts,
		query: r.URL.Query(), body: body}
	op := rt.op
	if rt.path == "servers/*/action" {
		op = actionOp(body)
	}
	lost, failed, ok := s.fault(r.Context(), w, svc, op, neutronResource(parts[0]))
	if !ok {
		return
	}
	c.failed = failed
	s.tick()
	out, err := rt.fn(c)
	s.tick()
	switch {
	case lost:
		writeError(w, svc, internalError())
	case err != nil:
		writeError(w, svc, err)
	default:
		writeJSON(w, out.status, out.body)
	}
}

// fault applies an injected fault to a request of class op (on a Neutron
// resource, or ""): it either answers (ok false), or lets the request
// run, maybe with its answer lost or its server failing (failed).
func (s *Server) fault(ctx context.Context, w http.ResponseWriter, svc service, op cloudsim.Op, resource string) (lost bool, failed *cloudsim.Fault, ok bool) {
	f, faulted := s.sim.Faults.Take(op)
	if !faulted && op != cloudsim.OpAuth {
		// Every request's token is checked: auth faults hit them all.
		f, faulted = s.sim.Faults.Take(cloudsim.OpAuth)
	}
	if !faulted {
		return false, nil, true
	}
	switch f.Kind {
	case cloudsim.FaultThrottle:
		writeError(w, svc, overLimit())
	case cloudsim.FaultQuota:
		writeError(w, svc, quotaExceeded(svc, f.Quota, resource))
	case cloudsim.FaultServer:
		writeError(w, svc, internalError())
	case cloudsim.FaultAuth:
		writeError(w, svc, unauthorized())
	case cloudsim.FaultSlow:
		return false, nil, cloudsim.SleepWall(ctx, f.Delay) == nil
	case cloudsim.FaultLost:
		return true, nil, true
	case cloudsim.FaultFailed:
		return false, &f, true
	default:
		return false, nil, true
	}
	return false, nil, false
}

// serveVersions answers a service's version discovery document.
func (s *Server) serveVersions(w http.ResponseWriter, regionBase string, svc service) {
	switch svc {
	case network:
		writeJSON(w, 200, map[string]any{"versions": []map[string]any{{"id": "v2.0", "status": "CURRENT",
			"links": []map[string]string{{"rel": "self", "href": regionBase + "network/v2.0/"}}}}})
	case image:
		writeJSON(w, 300, map[string]any{"versions": []map[string]any{{"id": "v2.16", "status": "CURRENT",
			"links": []map[string]string{{"rel": "self", "href": regionBase + "image/v2/"}}}}})
	default:
		writeJSON(w, 200, map[string]any{"versions": []map[string]any{{"id": "v2.1", "status": "CURRENT",
			"version": "2.96", "min_version": "2.1", "updated": "2013-07-23T11:33:21Z",
			"links": []map[string]string{{"rel": "self", "href": regionBase + "compute/v2.1/"}}}}})
	}
}

// sleep waits the wall time of cloud latency d while serving c.
func (c *call) sleep(d time.Duration) error {
	if err := cloudsim.SleepWall(c.ctx, c.s.sim.Wall(d)); err != nil {
		return internalError()
	}
	return nil
}

// listReply answers a list: the page of items (in order) that limit and
// marker choose, rendered, as {key: [...]}, with key_links naming the
// next page when there is more. Call with s.mu held.
func listReply[T any](c *call, items []T, id func(T) string, self, key string, render func(T) map[string]any) (reply, error) {
	from := 0
	if m := c.q("marker"); m != "" {
		i := slices.IndexFunc(items, func(t T) bool { return id(t) == m })
		if i < 0 {
			return reply{}, badRequest(fmt.Sprintf("marker [%s] not found", m))
		}
		from = i + 1
	}
	limit := len(items)
	if l := c.q("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 0 {
			return reply{}, badRequest(fmt.Sprintf("Invalid input for field/attribute limit. Value: %s.", l))
		}
		if n > 0 {
			limit = n
		}
	}
	if ps := c.s.PageSize(); ps > 0 {
		limit = min(limit, ps)
	}
	to := min(from+limit, len(items))
	out := []map[string]any{}
	for _, it := range items[from:to] {
		out = append(out, render(it))
	}
	body := map[string]any{key: out}
	if to < len(items) && to > from {
		q := url.Values(maps.Clone(c.query))
		q.Set("marker", id(items[to-1]))
		q.Set("limit", strconv.Itoa(limit))
		body[key+"_links"] = []map[string]string{{"rel": "next", "href": self + "?" + q.Encode()}}
	}
	return reply{200, body}, nil
}

func (c *call) url(svc string, parts ...string) string {
	return c.base + "/" + c.region + "/" + svc + "/" + strings.Join(parts, "/")
}

// Resource is something that exists in the emulated cloud.
type Resource struct {
	Region string            `json:"region"`
	Kind   string            `json:"kind"` // server, security-group, floating-ip, key-pair
	ID     string            `json:"id"`
	Name   string            `json:"name,omitempty"`
	Status string            `json:"status,omitempty"`
	Tags   map[string]string `json:"metadata,omitempty"`
}

// Resources lists every server (deleting ones included), security group
// (but a project's default one), floating IP and key pair.
func (s *Server) Resources() []Resource {
	s.tick()
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.sim.Time()
	var out []Resource
	for _, sv := range sortedBySeq(s.servers, func(v *server) uint64 { return v.seq }) {
		out = append(out, Resource{Region: sv.region, Kind: "server", ID: sv.id, Name: sv.name,
			Status: s.status(sv, now), Tags: maps.Clone(sv.metadata)})
	}
	for _, g := range sortedBySeq(s.groups, func(v *secGroup) uint64 { return v.seq }) {
		if g.name == "default" {
			continue // every project has it
		}
		out = append(out, Resource{Region: g.region, Kind: "security-group", ID: g.id, Name: g.name})
	}
	for _, f := range sortedBySeq(s.fips, func(v *floatingIP) uint64 { return v.seq }) {
		out = append(out, Resource{Region: f.region, Kind: "floating-ip", ID: f.id, Name: f.address})
	}
	for _, k := range sortedBySeq(s.keypairs, func(v *keypair) uint64 { return v.seq }) {
		out = append(out, Resource{Kind: "key-pair", ID: k.name, Name: k.name})
	}
	return out
}

func sortedBySeq[T any](m map[string]T, seq func(T) uint64) []T {
	out := slices.Collect(maps.Values(m))
	slices.SortFunc(out, func(a, b T) int { return cmp.Compare(seq(a), seq(b)) })
	return out
}

func (s *Server) nextSeq() uint64 {
	s.seq++
	return s.seq
}
