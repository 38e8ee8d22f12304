package pricing

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/cloudtransit/transit/cloudsim/sigv4"
)

// Documentation example keys: what Options.Credentials defaults to (the
// EC2 front end's too).
const (
	DefaultAccessKeyID     = "AKIAIOSFODNN7EXAMPLE"
	DefaultSecretAccessKey = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
)

// TargetPrefix starts the X-Amz-Target of every request to the service.
const TargetPrefix = "AWSPriceListService."

// MaxResults is the most products a page holds, and the default.
const MaxResults = 100

// Regions are the regions whose endpoints serve the Price List Query API.
var Regions = []string{"us-east-1", "eu-central-1", "ap-south-1"}

// Credential is the secret half of an access key the front end accepts.
type Credential = sigv4.Credential

// Options configure a Server; the zero value is usable.
type Options struct {
	// Credentials maps access key ids to their secrets (default:
	// DefaultAccessKeyID with DefaultSecretAccessKey).
	Credentials map[string]Credential
	// Products is the catalogue (default DefaultCatalogue()).
	Products []Product
	// PageSize, when between 1 and MaxResults, caps a page below what
	// MaxResults asks, so that tests see several pages.
	PageSize int
	// Version is the price list's version the documents carry (default
	// "20251101000000").
	Version string
}

// Server is the Price List Query API front end. It is safe for concurrent
// use.
type Server struct {
	creds    map[string]sigv4.Credential
	products []Product
	fields   map[string]bool // attribute names of the catalogue
	version  string
	secret   []byte // signs the next tokens

	mu       sync.Mutex
	pageSize int
}

var _ http.Handler = (*Server)(nil)

// New returns a Price List Query API front end.
func New(opts Options) *Server {
	if opts.Credentials == nil {
		opts.Credentials = map[string]sigv4.Credential{DefaultAccessKeyID: {SecretAccessKey: DefaultSecretAccessKey}}
	}
	if opts.Products == nil {
		opts.Products = DefaultCatalogue()
	}
	if opts.Version == "" {
		opts.Version = "20251101000000"
	}
	s := &Server{creds: maps.Clone(opts.Credentials), products: slices.Clone(opts.Products), fields: map[string]bool{},
		version: opts.Version, secret: make([]byte, 32)}
	_, _ = rand.Read(s.secret)
	for _, p := range s.products {
		for k := range p.Attributes {
			s.fields[strings.ToLower(k)] = true
		}
	}
	s.SetPageSize(opts.PageSize)
	return s
}

// SetPageSize caps the products of a page (0 or out of range: MaxResults).
func (s *Server) SetPageSize(n int) {
	if n <= 0 || n > MaxResults {
		n = MaxResults
	}
	s.mu.Lock()
	s.pageSize = n
	s.mu.Unlock()
}

// IsRequest says r is meant for this service: its X-Amz-Target names it.
// EC2's Query API carries none, so one endpoint can serve both.
func IsRequest(r *http.Request) bool {
	return strings.HasPrefix(r.Header.Get("X-Amz-Target"), TargetPrefix)
}

// apiError is an answer of the service's JSON 1.1 protocol.
type apiError struct {
	status int
	code   string
	msg    string
}

func (e *apiError) Error() string { return e.code + ": " + e.msg }

func invalidParameter(format string, args ...any) *apiError {
	return &apiError{status: 400, code: "InvalidParameterException", msg: fmt.Sprintf(format, args...)}
}

const maxBody = 1 << 20

// ServeHTTP answers one request.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
	if err != nil || len(body) > maxBody {
		writeError(w, &apiError{status: 400, code: "SerializationException", msg: "The request body is unreadable or too large."})
		return
	}
	if r.Method != http.MethodPost {
		writeError(w, &apiError{status: 404, code: "UnknownOperationException", msg: "Only POST is served."})
		return
	}
	if aerr := s.verify(r, body); aerr != nil {
		writeError(w, aerr)
		return
	}
	op := strings.TrimPrefix(r.Header.Get("X-Amz-Target"), TargetPrefix)
	if op != "GetProducts" {
		writeError(w, &apiError{status: 400, code: "UnknownOperationException", msg: fmt.Sprintf("Operation %s is not served by this emulator.", op)})
		return
	}
	out, aerr := s.getProducts(body)
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	writeJSON(w, http.StatusOK, out)
}

// verify checks the signature, and that it is scoped to a region that
// serves the API.
func (s *Server) verify(r *http.Request, body []byte) *apiError {
	_, region, err := sigv4.Verify(r, body, "pricing", s.creds)
	var se *sigv4.Error
	switch {
	case err == nil:
		if !slices.Contains(Regions, region) {
			return &apiError{status: 403, code: "InvalidSignatureException", msg: "Credential should be scoped to a valid region."}
		}
		return nil
	case !errors.As(err, &se):
	case se.Reason == sigv4.UnknownKey:
		return &apiError{status: 403, code: "UnrecognizedClientException", msg: "The security token included in the request is invalid."}
	case se.Reason == sigv4.Expired:
		return &apiError{status: 403, code: "InvalidSignatureException", msg: "Signature expired."}
	case se.Reason == sigv4.Malformed:
		return &apiError{status: 403, code: "IncompleteSignatureException", msg: "The request signature is incomplete or scoped to another service."}
	}
	return &apiError{status: 403, code: "InvalidSignatureException",
		msg: "The request signature we calculated does not match the signature you provided. Check your AWS Secret Access Key and signing method."}
}

// filter is one of GetProducts' filters.
type filter struct {
	Type  string `json:"Type"`
	Field string `json:"Field"`
	Value string `json:"Value"`
}

type getProductsInput struct {
	ServiceCode   string   `json:"ServiceCode"`
	Filters       []filter `json:"Filters"`
	FormatVersion string   `json:"FormatVersion"`
	NextToken     string   `json:"NextToken"`
	MaxResults    *int     `json:"MaxResults"`
}

type getProductsOutput struct {
	FormatVersion string   `json:"FormatVersion"`
	NextToken     string   `json:"NextToken,omitempty"`
	PriceList     []string `json:"PriceList"`
}

func (s *Server) getProducts(body []byte) (getProductsOutput, *apiError) {
	var in getProductsInput
	dec := json.NewDecoder(strings.NewReader(string(body)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&in); err != nil {
		return getProductsOutput{}, &apiError{status: 400, code: "SerializationException", msg: err.Error()}
	}
	switch {
	case in.ServiceCode == "":
		return getProductsOutput{}, invalidParameter("Input parameter ServiceCode is required.")
	case in.ServiceCode != "AmazonEC2":
		return getProductsOutput{}, &apiError{status: 400, code: "NotFoundException", msg: fmt.Sprintf("Service %s was not found (the emulator's catalogue holds AmazonEC2 only).", in.ServiceCode)}
	case in.FormatVersion != "" && in.FormatVersion != "aws_v1":
		return getProductsOutput{}, invalidParameter("Input parameter FormatVersion has an invalid value %q: valid values are aws_v1.", in.FormatVersion)
	}
	limit := MaxResults
	if in.MaxResults != nil {
		if *in.MaxResults < 1 || *in.MaxResults > MaxResults {
			return getProductsOutput{}, invalidParameter("Input parameter MaxResults has an invalid value %d: it must be between 1 and %d.", *in.MaxResults, MaxResults)
		}
		limit = *in.MaxResults
	}
	s.mu.Lock()
	limit = min(limit, s.pageSize)
	s.mu.Unlock()
	for i, f := range in.Filters {
		if err := s.checkFilter(i, f); err != nil {
			return getProductsOutput{}, err
		}
	}
	query := queryKey(in)
	offset := 0
	if in.NextToken != "" {
		var ok bool
		if offset, ok = s.readToken(in.NextToken, query); !ok {
			return getProductsOutput{}, &apiError{status: 400, code: "InvalidNextTokenException", msg: "The pagination token is invalid. Try again without a pagination token."}
		}
	}
	var matched []Product
	for _, p := range s.products {
		if matches(p, in.Filters) {
			matched = append(matched, p)
		}
	}
	out := getProductsOutput{FormatVersion: "aws_v1", PriceList: []string{}}
	end := min(offset+limit, len(matched))
	for _, p := range matched[min(offset, len(matched)):end] {
		doc, err := json.Marshal(p.document(s.version))
		if err != nil {
			return getProductsOutput{}, &apiError{status: 500, code: "InternalErrorException", msg: err.Error()}
		}
		out.PriceList = append(out.PriceList, string(doc))
	}
	// A full page carries a token, as the service's does: the last page
	// may be empty.
	if end-offset == limit && limit > 0 {
		out.NextToken = s.token(end, query)
	}
	return out, nil
}

var filterTypes = []string{"TERM_MATCH", "EQUALS", "CONTAINS", "ANY_OF", "NONE_OF"}

func (s *Server) checkFilter(i int, f filter) *apiError {
	switch {
	case !slices.Contains(filterTypes, f.Type):
		return invalidParameter("Filters[%d].Type has an invalid value %q: valid values are %s.", i, f.Type, strings.Join(filterTypes, ", "))
	case f.Field == "":
		return invalidParameter("Filters[%d].Field is required.", i)
	case !strings.EqualFold(f.Field, "ServiceCode") && !s.fields[strings.ToLower(f.Field)]:
		return invalidParameter("Filters[%d].Field has an invalid value %q: it is not an attribute name of service AmazonEC2.", i, f.Field)
	}
	return nil
}

// matches says p passes every filter. Field names match whatever their
// case, TERM_MATCH values too; EQUALS is exact.
func matches(p Product, fs []filter) bool {
	for _, f := range fs {
		v, ok := "AmazonEC2", true
		if !strings.EqualFold(f.Field, "ServiceCode") {
			v, ok = attribute(p, f.Field)
		}
		var hit bool
		switch f.Type {
		case "TERM_MATCH":
			hit = ok && strings.EqualFold(v, f.Value)
		case "EQUALS":
			hit = ok && v == f.Value
		case "CONTAINS":
			hit = ok && strings.Contains(v, f.Value)
		case "ANY_OF":
			hit = ok && slices.Contains(splitValues(f.Value), v)
		case "NONE_OF":
			hit = !ok || !slices.Contains(splitValues(f.Value), v)
		}
		if !hit {
			return false
		}
	}
	return true
}

func attribute(p Product, field string) (string, bool) {
	for k, v := range p.Attributes {
		if strings.EqualFold(k, field) {
			return v, true
		}
	}
	return "", false
}

func splitValues(s string) []string {
	var out []string
	for v := range strings.SplitSeq(s, ",") {
		out = append(out, strings.TrimSpace(v))
	}
	return out
}

// queryKey identifies a query, so that a token is used with its own.
func queryKey(in getProductsInput) string {
	var b strings.Builder
	b.WriteString(in.ServiceCode)
	for _, f := range in.Filters {
		fmt.Fprintf(&b, "|%s\x00%s\x00%s", f.Type, strings.ToLower(f.Field), f.Value)
	}
	return b.String()
}

// token is an opaque next token: the offset, signed with the query.
func (s *Server) token(offset int, query string) string {
	o := strconv.Itoa(offset)
	return base64.StdEncoding.EncodeToString([]byte(o)) + ":" + s.mac(o, query)
}

func (s *Server) readToken(tok, query string) (int, bool) {
	enc, sum, ok := strings.Cut(tok, ":")
	if !ok {
		return 0, false
	}
	raw, err := base64.StdEncoding.DecodeString(enc)
	if err != nil || !hmac.Equal([]byte(sum), []byte(s.mac(string(raw), query))) {
		return 0, false
	}
	n, err := strconv.Atoi(string(raw))
	return n, err == nil && n >= 0
}

func (s *Server) mac(offset, query string) string {
	h := hmac.New(sha256.New, s.secret)
	h.Write([]byte(offset + "\x00" + query))
	return hex.EncodeToString(h.Sum(nil))
}

func writeError(w http.ResponseWriter, e *apiError) {
	w.Header().Set("X-Amzn-ErrorType", e.code)
	writeJSON(w, e.status, map[string]string{"__type": e.code, "Message": e.msg})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	id := make([]byte, 16)
	_, _ = rand.Read(id)
	w.Header().Set("Content-Type", "application/x-amz-json-1.1")
	w.Header().Set("X-Amzn-RequestId", hex.EncodeToString(id))
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(status)
	_, _ = w.Write(b)
}
