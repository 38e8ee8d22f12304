package ec2

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/xml"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/cloudtransit/transit/cloudsim"
	"github.com/cloudtransit/transit/cloudsim/sigv4"
)

// Documentation example keys: what Options.Credentials defaults to.
const (
	DefaultAccessKeyID     = "AKIAIOSFODNN7EXAMPLE"
	DefaultSecretAccessKey = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
	// DefaultAccountID owns what the emulator's callers create.
	DefaultAccountID = "123456789012"
	// DefaultRulesPerGroup is EC2's default quota of inbound rules per
	// security group.
	DefaultRulesPerGroup = 60
	// DefaultTerminatedVisible is how long (cloud time) a terminated
	// instance stays visible, as on EC2.
	DefaultTerminatedVisible = time.Hour
	// DefaultConsolePostDelay is how long (cloud time) after an
	// instance boots, stops or terminates EC2 posts its console output.
	DefaultConsolePostDelay = 3 * time.Minute
	// DefaultStatusCheckDelay is how long (cloud time) an instance's
	// status checks are initializing after it starts running: EC2 takes a
	// couple of minutes before they pass.
	DefaultStatusCheckDelay = 2 * time.Minute
)

// Credential is the secret half of an access key the emulator accepts
// (SessionToken, if set, must come with every request).
type Credential = sigv4.Credential

// Image is a machine image the emulator offers, in every region.
type Image struct {
	ID           string
	Name         string
	OwnerID      string
	OwnerAlias   string // "amazon" for Amazon's own; empty otherwise
	Architecture string // default x86_64
	CreationDate time.Time
}

// Options configure a Server; the zero value is usable.
type Options struct {
	// Credentials maps access key ids to their secrets (default:
	// DefaultAccessKeyID with DefaultSecretAccessKey).
	Credentials map[string]Credential
	// AccountID owns the caller's resources ("self"); default
	// DefaultAccountID.
	AccountID string
	// Images are the machine images (default DefaultImages()).
	Images []Image
	// Zones is how many availability zones each region has (a, b, c,
	// ...); default 3.
	Zones int
	// VCPULimit is the running On-Demand vCPU quota per region; 0 is
	// unlimited. RunInstances beyond it fails with VcpuLimitExceeded.
	VCPULimit int
	// RulesPerGroup is the inbound rule quota of a security group
	// (default DefaultRulesPerGroup); beyond it
	// RulesPerSecurityGroupLimitExceeded.
	RulesPerGroup int
	// TerminatedVisible is how long a terminated instance stays in
	// DescribeInstances (cloud time, scaled; default
	// DefaultTerminatedVisible).
	TerminatedVisible time.Duration
	// VisibilityLag is how long (cloud time, scaled) a new instance is
	// missing from DescribeInstances and GetConsoleOutput, which answer
	// InvalidInstanceID.NotFound for its id meanwhile: EC2 is eventually
	// consistent. Default 0.
	VisibilityLag time.Duration
	// ConsolePostDelay is how long (cloud time, scaled) after an instance
	// boots, stops or terminates EC2 posts its console output, which is
	// what GetConsoleOutput answers unless Latest is set (default
	// DefaultConsolePostDelay).
	ConsolePostDelay time.Duration
	// StatusCheckDelay is how long (cloud time, scaled) after an instance
	// starts running its status checks (DescribeInstanceStatus) are
	// initializing before they pass (default DefaultStatusCheckDelay).
	StatusCheckDelay time.Duration
}

// DefaultImages are a few Debian 12 and Ubuntu 24.04 images under their
// publishers' real owner ids, several builds each so that "the newest"
// means something.
func DefaultImages() []Image {
	day := func(s string) time.Time {
		t, err := time.Parse("2006-01-02", s)
		if err != nil {
			panic(err)
		}
		return t.Add(18 * time.Hour)
	}
	const debian, canonical = "136693071363", "099720109477"
	return []Image{
		{ID: "ami-0d1e0b1a2c3d4e5f6", Name: "debian-12-amd64-20250428-2096", OwnerID: debian, CreationDate: day("2025-04-28")},
		{ID: "ami-0d1e0b1a2c3d4e5f7", Name: "debian-12-amd64-20250814-2204", OwnerID: debian, CreationDate: day("2025-08-14")},
		{ID: "ami-0d1e0b1a2c3d4e5f8", Name: "debian-12-amd64-20250610-2140", OwnerID: debian, CreationDate: day("2025-06-10")},
		{ID: "ami-0d1e0b1a2c3d4e5f9", Name: "debian-12-arm64-20250814-2204", OwnerID: debian, Architecture: "arm64", CreationDate: day("2025-08-14")},
		{ID: "ami-0c0a0b1a2c3d4e5f6", Name: "ubuntu/images/hvm-ssd-gp3/ubuntu-noble-24.04-amd64-server-20250805", OwnerID: canonical, CreationDate: day("2025-08-05")},
	}
}

// Server is the EC2 front end of a cloudsim.Sim: an http.Handler for the
// EC2 Query API. It is safe for concurrent use.
type Server struct {
	*cloudsim.Front
	sim     *cloudsim.Sim
	creds   map[string]Credential
	account string
	images  []Image
	zones   int
	vcpus   int
	rules   int
	visible time.Duration
	lag     time.Duration
	posting time.Duration // Options.ConsolePostDelay
	checks  time.Duration // Options.StatusCheckDelay

	mu      sync.Mutex
	regions map[string]*region
	seq     uint64
	public  *pool

	// allowMu orders Backer.Allow calls, so the last call carries the
	// newest union of sources.
	allowMu sync.Mutex
}

var _ http.Handler = (*Server)(nil)

// New returns an EC2 front end for sim.
func New(sim *cloudsim.Sim, opts Options) *Server {
	if opts.Credentials == nil {
		opts.Credentials = map[string]Credential{DefaultAccessKeyID: {SecretAccessKey: DefaultSecretAccessKey}}
	}
	if opts.AccountID == "" {
		opts.AccountID = DefaultAccountID
	}
	if opts.Images == nil {
		opts.Images = DefaultImages()
	}
	if opts.Zones <= 0 {
		opts.Zones = 3
	}
	if opts.RulesPerGroup <= 0 {
		opts.RulesPerGroup = DefaultRulesPerGroup
	}
	if opts.TerminatedVisible <= 0 {
		opts.TerminatedVisible = DefaultTerminatedVisible
	}
	if opts.ConsolePostDelay <= 0 {
		opts.ConsolePostDelay = DefaultConsolePostDelay
	}
	if opts.StatusCheckDelay <= 0 {
		opts.StatusCheckDelay = DefaultStatusCheckDelay
	}
	images := slices.Clone(opts.Images)
	for i := range images {
		if images[i].Architecture == "" {
			images[i].Architecture = "x86_64"
		}
	}
	return &Server{
		Front: cloudsim.NewFront(sim, "aws"), sim: sim, creds: maps.Clone(opts.Credentials), account: opts.AccountID, images: images,
		zones: opts.Zones, vcpus: opts.VCPULimit, rules: opts.RulesPerGroup, visible: opts.TerminatedVisible,
		lag: opts.VisibilityLag, posting: opts.ConsolePostDelay, checks: opts.StatusCheckDelay,
		regions: map[string]*region{}, public: newPool(publicRange),
	}
}

func (s *Server) now() time.Time { return s.sim.Time() }

// sleep waits the wall time of a cloud duration.
func (s *Server) sleep(ctx context.Context, d time.Duration) error {
	return s.sim.Profile.Sleep(ctx, d)
}

// regionName accepts names shaped like AWS regions (eu-central-1,
// us-gov-west-1); any such region exists on first use.
var regionName = regexp.MustCompile(`^[a-z]{2}(-[a-z]+)+-[0-9]+$`)

// call is one request being served.
type call struct {
	ctx    context.Context
	s      *Server
	region string
	p      params
	// failed is a cloudsim.FaultFailed that hit the request: a launch
	// whose instances end failed.
	failed *cloudsim.Fault
}

type handler func(c *call) (requestIDSetter, error)

type action struct {
	op cloudsim.Op
	fn handler
}

// actions is the served subset of the EC2 API.
var actions = map[string]action{
	"DescribeAvailabilityZones":                  {cloudsim.OpList, (*call).describeZones},
	"DescribeImages":                             {cloudsim.OpList, (*call).describeImages},
	"DescribeVpcs":                               {cloudsim.OpList, (*call).describeVpcs},
	"DescribeSubnets":                            {cloudsim.OpList, (*call).describeSubnets},
	"ImportKeyPair":                              {cloudsim.OpKeys, (*call).importKeyPair},
	"DescribeKeyPairs":                           {cloudsim.OpKeys, (*call).describeKeyPairs},
	"DeleteKeyPair":                              {cloudsim.OpKeys, (*call).deleteKeyPair},
	"CreateSecurityGroup":                        {cloudsim.OpGroup, (*call).createSecurityGroup},
	"DescribeSecurityGroups":                     {cloudsim.OpList, (*call).describeSecurityGroups},
	"AuthorizeSecurityGroupIngress":              {cloudsim.OpGroup, (*call).authorizeIngress},
	"RevokeSecurityGroupIngress":                 {cloudsim.OpGroup, (*call).revokeIngress},
	"UpdateSecurityGroupRuleDescriptionsIngress": {cloudsim.OpGroup, (*call).updateIngressDescriptions},
	"DeleteSecurityGroup":                        {cloudsim.OpGroup, (*call).deleteSecurityGroup},
	"CreateTags":                                 {"tags", (*call).createTags},
	"DeleteTags":                                 {"tags", (*call).deleteTags},
	"RunInstances":                               {cloudsim.OpLaunch, (*call).runInstances},
	"DescribeInstances":                          {cloudsim.OpList, (*call).describeInstances},
	"TerminateInstances":                         {cloudsim.OpTerminate, (*call).terminateInstances},
	"StopInstances":                              {cloudsim.OpPower, (*call).stopInstances},
	"StartInstances":                             {cloudsim.OpPower, (*call).startInstances},
	"GetConsoleOutput":                           {cloudsim.OpList, (*call).getConsoleOutput},
	"DescribeInstanceStatus":                     {cloudsim.OpList, (*call).describeInstanceStatus},
	"DescribeTags":                               {cloudsim.OpList, (*call).describeTags},
	"DescribeSecurityGroupRules":                 {cloudsim.OpList, (*call).describeSecurityGroupRules},
}

// maxBody bounds a request body (RunInstances' user data is at most 16 KiB
// before base64).
const maxBody = 1 << 20

// ServeHTTP answers one EC2 Query API request.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	reqID := newRequestID()
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
	if err != nil || len(body) > maxBody {
		writeError(w, reqID, &apiError{status: 400, code: "InvalidParameterValue", msg: "The request body is unreadable or too large."})
		return
	}
	_, region, aerr := s.verify(r, body)
	if aerr != nil {
		writeError(w, reqID, aerr)
		return
	}
	form, err := parseForm(r, body)
	if err != nil {
		writeError(w, reqID, &apiError{status: 400, code: "MalformedQueryString", msg: err.Error()})
		return
	}
	p := newParams(form)
	name := p.get("Action")
	act, ok := actions[name]
	switch {
	case name == "":
		writeError(w, reqID, &apiError{status: 400, code: "MissingAction", msg: "The request must contain the parameter Action"})
		return
	case !ok:
		writeError(w, reqID, &apiError{status: 400, code: "InvalidAction", msg: fmt.Sprintf("The action %s is not valid for this web service.", name)})
		return
	case !regionName.MatchString(region):
		writeError(w, reqID, authFailure())
		return
	}
	c := &call{ctx: r.Context(), s: s, region: region, p: p}
	if dry, err := p.bool("DryRun"); err != nil || dry {
		if err == nil {
			err = &apiError{status: 412, code: "DryRunOperation", msg: "Request would have succeeded, but DryRun flag is set."}
		}
		writeError(w, reqID, err)
		return
	}

	f, faulted := s.sim.Faults.Take(act.op)
	if !faulted {
		// Every EC2 request checks credentials: auth faults hit them all.
		f, faulted = s.sim.Faults.Take(cloudsim.OpAuth)
	}
	lost := false
	if faulted {
		switch f.Kind {
		case cloudsim.FaultThrottle:
			writeError(w, reqID, &apiError{status: 503, code: "RequestLimitExceeded", msg: "Request limit exceeded."})
			return
		case cloudsim.FaultQuota:
			writeError(w, reqID, quotaError(f.Quota))
			return
		case cloudsim.FaultServer:
			writeError(w, reqID, internalError())
			return
		case cloudsim.FaultAuth:
			writeError(w, reqID, authFailure())
			return
		case cloudsim.FaultSlow:
			if err := cloudsim.SleepWall(r.Context(), f.Delay); err != nil {
				return
			}
		case cloudsim.FaultLost:
			lost = true
		case cloudsim.FaultFailed:
			c.failed = &f
		}
	}
	out, err := act.fn(c)
	if lost {
		// The work is done; only the answer is lost.
		writeError(w, reqID, internalError())
		return
	}
	if err != nil {
		writeError(w, reqID, err)
		return
	}
	out.setRequestID(reqID)
	writeXML(w, http.StatusOK, xml.StartElement{
		Name: xml.Name{Local: name + "Response"},
		Attr: []xml.Attr{{Name: xml.Name{Local: "xmlns"}, Value: xmlns}},
	}, out)
}

// parseForm reads the Query parameters from the URL and, for a
// form-encoded POST, the body.
func parseForm(r *http.Request, body []byte) (map[string][]string, error) {
	form, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return nil, err
	}
	if r.Method == http.MethodPost {
		bf, err := url.ParseQuery(string(body))
		if err != nil {
			return nil, err
		}
		for k, v := range bf {
			form[k] = append(form[k], v...)
		}
	}
	return form, nil
}

func internalError() *apiError {
	return &apiError{status: 500, code: "InternalError", msg: "An internal error has occurred"}
}

// quotaError is EC2's answer to a create beyond a quota; name is the
// quota (an EC2 error code such as VcpuLimitExceeded, or any name, which
// the message then carries).
func quotaError(name string) *apiError {
	switch name {
	case "", "InstanceLimitExceeded":
		return &apiError{status: 400, code: "InstanceLimitExceeded",
			msg: "Your quota allows for 0 more running instance(s). You requested at least 1."}
	case "VcpuLimitExceeded":
		return &apiError{status: 400, code: "VcpuLimitExceeded",
			msg: "You have requested more vCPU capacity than your current vCPU limit allows for the instance bucket that the specified instance type belongs to. Please visit http://aws.amazon.com/contact-us/ec2-request to request an adjustment to this limit."}
	}
	return &apiError{status: 400, code: "InstanceLimitExceeded",
		msg: fmt.Sprintf("You have reached your quota of %s. Please visit http://aws.amazon.com/contact-us/ec2-request to request an adjustment to this limit.", name)}
}

func writeError(w http.ResponseWriter, reqID string, err error) {
	ae, ok := err.(*apiError) //nolint:errorlint // handlers return *apiError itself, never a wrapped one
	if !ok {
		ae = internalError()
	}
	doc := errorDoc{Code: ae.code, Message: ae.msg, RequestID: reqID}
	writeXML(w, ae.status, xml.StartElement{Name: xml.Name{Local: "Response"}}, doc)
}

func writeXML(w http.ResponseWriter, status int, start xml.StartElement, v any) {
	var buf bytes.Buffer
	buf.WriteString(xml.Header)
	enc := xml.NewEncoder(&buf)
	if err := enc.EncodeElement(v, start); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/xml;charset=UTF-8")
	w.Header().Set("Content-Length", strconv.Itoa(buf.Len()))
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// newRequestID makes a request id shaped like EC2's (a UUID).
func newRequestID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	h := hex.EncodeToString(b)
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}

// newID makes a resource id: prefix, "-" and 17 hex digits, like EC2's.
func newID(prefix string) string {
	b := make([]byte, 9)
	_, _ = rand.Read(b)
	return prefix + "-" + hex.EncodeToString(b)[:17]
}

// cursor is where an item sits in a listing's order: its sequence
// number, then, for listings with several items per sequence number
// (DescribeTags: a resource's tags), a key.
type cursor struct {
	seq uint64
	key string
}

func (a cursor) after(b cursor) bool { return a.seq > b.seq || a.seq == b.seq && a.key > b.key }

// pageToken is an opaque NextToken: the cursor of the last item
// returned, so paging is stable while items come and go.
func pageToken(at cursor) string {
	tok := "v1:" + strconv.FormatUint(at.seq, 10)
	if at.key != "" {
		tok += ":" + at.key
	}
	return base64.RawURLEncoding.EncodeToString([]byte(tok))
}

func parsePageToken(tok string) (cursor, error) {
	if tok == "" {
		return cursor{}, nil
	}
	raw, err := base64.RawURLEncoding.DecodeString(tok)
	if err == nil {
		if rest, ok := bytes.CutPrefix(raw, []byte("v1:")); ok {
			num, key, _ := bytes.Cut(rest, []byte(":"))
			if n, err := strconv.ParseUint(string(num), 10, 64); err == nil {
				return cursor{seq: n, key: string(key)}, nil
			}
		}
	}
	return cursor{}, &apiError{status: 400, code: "InvalidPaginationToken", msg: "The specified pagination token is not valid or is expired."}
}

// page cuts items (in sequence order) after the NextToken to one page of
// at most limit items (0: all, unless SetPageSize says less).
func page[T any](c *call, items []T, seq func(T) uint64, limit int) ([]T, string, error) {
	return pageBy(c, items, func(it T) cursor { return cursor{seq: seq(it)} }, limit)
}

// pageBy is page for items in cursor order.
func pageBy[T any](c *call, items []T, at func(T) cursor, limit int) ([]T, string, error) {
	after, err := parsePageToken(c.p.get("NextToken"))
	if err != nil {
		return nil, "", err
	}
	ps := c.s.PageSize()
	if ps > 0 && (limit == 0 || ps < limit) {
		limit = ps
	}
	start := 0
	if after != (cursor{}) {
		start = len(items)
		for i, it := range items {
			if at(it).after(after) {
				start = i
				break
			}
		}
	}
	items = items[start:]
	if limit == 0 || len(items) <= limit {
		return items, "", nil
	}
	items = items[:limit]
	return items, pageToken(at(items[len(items)-1])), nil
}

// maxResults reads MaxResults within EC2's bounds for the action.
// describing reads what every paged Describe action takes: its filters
// and its MaxResults (5–1000, as EC2 bounds it; 0 when not given).
func (c *call) describing() ([]filter, int, error) {
	fs, err := c.p.filters()
	if err != nil {
		return nil, 0, err
	}
	limit, err := c.maxResults(5, 1000)
	return fs, limit, err
}

func (c *call) maxResults(lo, hi int) (int, error) {
	n, err := c.p.int("MaxResults", 0)
	if err != nil {
		return 0, err
	}
	if c.p.has("MaxResults") && (n < lo || n > hi) {
		return 0, &apiError{status: 400, code: "InvalidParameterValue",
			msg: fmt.Sprintf("Value ( %d ) for parameter maxResults is invalid. Expecting a value between %d and %d.", n, lo, hi)}
	}
	return n, nil
}

// Resource is something that exists in the emulator, for tests and tools
// that check what is left.
type Resource struct {
	Region string
	// Kind is "instance", "security-group" or "key-pair".
	Kind  string
	ID    string
	Name  string // group or key pair name
	State string // an instance's state name
	Tags  map[string]string
}

// Resources lists every instance that is not terminated and every
// security group and key pair callers created, in all regions (not the
// default VPC, its subnets and default groups, which every region has).
func (s *Server) Resources() []Resource {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	var out []Resource
	for _, name := range sortedKeys(s.regions) {
		rg := s.regions[name]
		s.sweep(rg, now)
		for _, in := range rg.sortedInstances() {
			if st := s.state(in, now); st != stateTerminated {
				out = append(out, Resource{Region: name, Kind: "instance", ID: in.id, State: st.name, Tags: maps.Clone(in.tags)})
			}
		}
		for _, g := range rg.sortedGroups() {
			if !g.isDefault {
				out = append(out, Resource{Region: name, Kind: "security-group", ID: g.id, Name: g.name, Tags: maps.Clone(g.tags)})
			}
		}
		for _, k := range rg.sortedKeys() {
			out = append(out, Resource{Region: name, Kind: "key-pair", ID: k.id, Name: k.name, Tags: maps.Clone(k.tags)})
		}
	}
	return out
}

// Remove terminates an instance outside any client (someone deleting it
// in the console): what Plant made, or a node killed behind transit's
// back.
func (s *Server) Remove(ctx context.Context, region, id string) error {
	c := &call{ctx: ctx, s: s, region: region, p: params{"InstanceId.1": id}}
	_, err := c.terminateInstances()
	return err
}

// Plant creates a running-to-be instance in region as another tool (or a
// crash between create and tag) would leave it: the first image, no key,
// the first zone's default subnet, exactly tags (keys with the reserved
// "aws:" prefix allowed, as AWS services set them). It returns the
// instance id.
func (s *Server) Plant(ctx context.Context, region string, tags map[string]string) (string, error) {
	if !regionName.MatchString(region) {
		return "", fmt.Errorf("cloudsim/ec2: %q is not a region name", region)
	}
	if len(s.images) == 0 {
		return "", fmt.Errorf("cloudsim/ec2: no image to plant an instance from")
	}
	var list []params
	for _, k := range sortedKeys(tags) {
		list = append(list, params{"Key": k, "Value": tags[k]})
	}
	t, err := readTags(list, true)
	if err != nil {
		return "", err
	}
	c := &call{ctx: ctx, s: s, region: region, p: params{}}
	res, err := c.launch(launchRequest{image: s.images[0].ID, instanceType: "t3.micro", min: 1, max: 1, tags: t})
	if err != nil {
		return "", err
	}
	return res.instances[0].id, nil
}
