// Package s3store is the state store in a bucket of any S3-compatible
// service — AWS S3, Google Cloud Storage through its S3-compatible XML API,
// OpenStack Swift's S3 API, Ceph, MinIO, versitygw — through
// aws-sdk-go-v2's S3 client, so that CI runners and team members share one
// state, one lock and the cluster's keys.
//
// Objects live under the URL's prefix ("s3://bucket/prefix/resources.json");
// a version is the object's ETag. Every write is conditional: a create
// with If-None-Match: *, a replace with If-Match: <etag>; the service
// answers 412 (or 409 ConditionalRequestConflict) when another writer came
// first, or 404 when the object a replace names is gone, and the store
// returns a *statestore.ConflictError. The lock is statestore's lease lock
// on the object "lock" (a conditional create, renewed while the run
// lives). A service that ignored the conditions would let two writers
// win: the conformance suite, run against a real server, proves they hold.
//
// # Deletes
//
// S3's conditional delete (DeleteObject with If-Match) cannot say who
// deleted: a delete of a missing object succeeds, so of two runs deleting
// one version both would be told they did; and some services (versitygw)
// check the condition and remove the file in two steps, so a write landing
// between them would be lost. A delete is therefore a conditional write,
// which services make one step: the object is first replaced, If-Match:
// <version>, by a tombstone (a small object with the metadata
// x-amz-meta-transit-deleted), which exactly one deleter wins; then the
// tombstone is deleted, If-Match: <its ETag>. A tombstone is a missing
// object to Get, Stat and List, and a create replaces it, so a deleter
// that died between its two steps leaves nothing anyone sees, and
// deleted objects do not pile up. What is left: on a service whose
// conditional delete is two steps (versitygw), a create that replaces a
// tombstone in the microseconds between those two steps of its deleter
// is removed with it. In a versioned bucket, the version before a deleted
// object's delete marker is its tombstone.
//
// Errors name the bucket and what to do: a missing bucket, a refused
// permission (with the S3 action refused), refused credentials. 500s and
// throttling (503 SlowDown) are retried, a bounded number of times.
//
// # Tested against versitygw
//
// The tests run a real S3-compatible server on loopback, versitygw
// (github.com/versity/versitygw, `make s3-server`; package s3test). It is
// one `go install` of a single Go binary whose posix backend needs only a
// directory; MinIO's module carries replace directives that `go install`
// refuses, and its server is far heavier to build. versitygw v1.8.0 makes
// PutObject's If-None-Match: * and If-Match: <etag> one step under a
// per-object lock (412 PreconditionFailed; 404 NoSuchKey for an If-Match
// on a missing object, as AWS); it honours DeleteObject's If-Match (412 on
// a mismatch) but checks it apart from the removal, and deletes a missing
// object with success (as AWS); it has bucket versioning (given a
// versioning directory) and users with bucket policies (given an IAM
// directory), so a refused action is tested too. It does not implement
// If-None-Match with an ETag, nor If-Match and If-None-Match together
// (501), which the store does not use.
package s3store

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"
	"github.com/aws/smithy-go/logging"
	"github.com/aws/smithy-go/middleware"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/cloudtransit/transit/awsbody"
	"github.com/cloudtransit/transit/statestore"
)

// Options say how to reach the service.
type Options struct {
	// Endpoint is the service's URL (MinIO, Ceph, GCS's
	// https://storage.googleapis.com, Swift's S3 API); empty is AWS S3.
	Endpoint string
	// Region is the bucket's region; empty is us-east-1.
	Region string
	// PathStyle addresses buckets as endpoint/bucket rather than
	// bucket.endpoint (most services but AWS need it).
	PathStyle bool
	// AccessKeyID and SecretAccessKey (and SessionToken) are static
	// credentials; empty uses the SDK's default chain (environment,
	// shared files, instance role).
	AccessKeyID, SecretAccessKey, SessionToken string
	// Profile is a shared-config profile for the default chain.
	Profile string
	// MaxAttempts bounds the tries of one request (500s, throttling,
	// lost connections); 0 is 5. MaxBackoff bounds the wait between two
	// (0 is the SDK's 20 s).
	MaxAttempts int
	MaxBackoff  time.Duration
	// HTTPClient sends the requests; nil is the SDK's.
	HTTPClient *http.Client
	// Logger gets the SDK's own log lines (a response without a checksum
	// to validate, which some S3-compatible services send on every GET; a
	// retry) at debug level, whatever the SDK calls them; nil drops them.
	// The SDK would print them on stderr.
	Logger *slog.Logger
}

// Store is a prefix of a bucket.
type Store struct {
	client *s3.Client
	bucket string
	prefix string // "" or ending in "/"
	url    string

	// probed holds the answer of the probe for conditional writes, made
	// before the first write (enforcing).
	probeMu sync.Mutex
	probed  bool
	refused error
}

// LockName is the lease lock's object.
const LockName = "lock"

// New opens the store at bucket/prefix.
func New(ctx context.Context, bucket, prefix string, o Options) (*Store, error) {
	if bucket == "" {
		return nil, errors.New("no bucket: want s3://bucket/prefix")
	}
	if o.Region == "" {
		o.Region = "us-east-1"
	}
	if o.MaxAttempts == 0 {
		o.MaxAttempts = 5
	}
	load := []func(*config.LoadOptions) error{
		config.WithRegion(o.Region),
		config.WithLogger(sdkLogger(o.Logger)),
		config.WithClientLogMode(0),
		config.WithRetryer(func() aws.Retryer {
			return retry.NewStandard(func(so *retry.StandardOptions) {
				so.MaxAttempts = o.MaxAttempts
				if o.MaxBackoff > 0 {
					so.MaxBackoff = o.MaxBackoff
				}
			})
		}),
	}
	if o.AccessKeyID != "" {
		load = append(load, config.WithCredentialsProvider(credentials.NewStaticCredentialsProvider(o.AccessKeyID, o.SecretAccessKey, o.SessionToken)))
	}
	if o.Profile != "" {
		load = append(load, config.WithSharedConfigProfile(o.Profile))
	}
	if o.HTTPClient != nil {
		load = append(load, config.WithHTTPClient(o.HTTPClient))
	}
	cfg, err := config.LoadDefaultConfig(ctx, load...)
	if err != nil {
		return nil, fmt.Errorf("s3://%s: load the AWS configuration: %w", bucket, err)
	}
	client := s3.NewFromConfig(cfg, func(so *s3.Options) {
		so.HTTPClient = awsbody.Wrap(so.HTTPClient)
		so.UsePathStyle = o.PathStyle
		if o.Endpoint != "" {
			so.BaseEndpoint = aws.String(o.Endpoint)
		}
	})
	prefix = strings.Trim(prefix, "/")
	if prefix != "" {
		if err := statestore.CheckName(prefix); err != nil {
			return nil, fmt.Errorf("s3://%s/%s: %w", bucket, prefix, err)
		}
		prefix += "/"
	}
	return &Store{client: client, bucket: bucket, prefix: prefix, url: "s3://" + bucket + "/" + strings.TrimSuffix(prefix, "/")}, nil
}

// sdkLogger hands the SDK's log lines to l at debug level: they are the
// SDK's notes, not the store's (whose errors say what failed).
func sdkLogger(l *slog.Logger) logging.Logger {
	if l == nil {
		return logging.Nop{}
	}
	return logging.LoggerFunc(func(c logging.Classification, format string, v ...any) {
		l.Debug(fmt.Sprintf(format, v...), "from", "aws-sdk", "sdk_level", string(c))
	})
}

// Location is the store's URL, without its settings.
func (s *Store) Location() string { return strings.TrimSuffix(s.url, "/") }

func (s *Store) key(name string) (string, error) {
	if err := statestore.CheckName(name); err != nil {
		return "", err
	}
	return s.prefix + name, nil
}

// Get reads an object.
func (s *Store) Get(ctx context.Context, name string) (statestore.Object, error) {
	key, err := s.key(name)
	if err != nil {
		return statestore.Object{}, err
	}
	out, err := s.client.GetObject(ctx, &s3.GetObjectInput{Bucket: &s.bucket, Key: &key})
	if err != nil {
		return statestore.Object{}, s.explain("s3:GetObject", name, err)
	}
	defer func() { _ = out.Body.Close() }()
	if isTombstone(out.Metadata) {
		return statestore.Object{}, s.notFound(name)
	}
	data, err := io.ReadAll(out.Body)
	if err != nil {
		return statestore.Object{}, fmt.Errorf("%s/%s: read: %w", s.Location(), name, err)
	}
	return statestore.Object{Data: data, Version: aws.ToString(out.ETag), Modified: aws.ToTime(out.LastModified), Served: served(out.ResultMetadata)}, nil
}

// served is the service's time of an answer, its Date header (zero when
// it sent none): with the object's Last-Modified, from the same clock, it
// tells the object's age without this machine's clock.
func served(md middleware.Metadata) time.Time {
	raw, ok := awsmiddleware.GetRawResponse(md).(*smithyhttp.Response)
	if !ok {
		return time.Time{}
	}
	t, err := http.ParseTime(raw.Header.Get("Date"))
	if err != nil {
		return time.Time{}
	}
	return t
}

// Stat returns an object's entry: a HEAD request.
func (s *Store) Stat(ctx context.Context, name string) (statestore.Entry, error) {
	key, err := s.key(name)
	if err != nil {
		return statestore.Entry{}, err
	}
	head, err := s.client.HeadObject(ctx, &s3.HeadObjectInput{Bucket: &s.bucket, Key: &key})
	if notFound(err) {
		// A HEAD's 404 has no body to say whether the object or the
		// bucket is missing: ask the bucket.
		if _, berr := s.client.HeadBucket(ctx, &s3.HeadBucketInput{Bucket: &s.bucket}); notFound(berr) {
			return statestore.Entry{}, s.explain("s3:GetObject", name, &smithy.GenericAPIError{Code: "NoSuchBucket"})
		}
	}
	if err != nil {
		return statestore.Entry{}, s.explain("s3:GetObject", name, err)
	}
	if isTombstone(head.Metadata) {
		return statestore.Entry{}, s.notFound(name)
	}
	return statestore.Entry{Name: name, Version: aws.ToString(head.ETag), Size: aws.ToInt64(head.ContentLength), Modified: aws.ToTime(head.LastModified)}, nil
}

// Put writes an object if its version is still ifVersion.
func (s *Store) Put(ctx context.Context, name string, data []byte, ifVersion string) (string, error) {
	key, err := s.key(name)
	if err != nil {
		return "", err
	}
	if err := s.enforcing(ctx); err != nil {
		return "", err
	}
	if ifVersion != statestore.NoVersion {
		v, err := s.put(ctx, key, data, nil, ifVersion)
		switch {
		case err == nil:
			return v, nil
		case conflict(err) || notFound(err): // changed, or deleted
			return "", s.conflictError(ctx, name, key, ifVersion)
		}
		return "", s.explain("s3:PutObject", name, err)
	}
	// A create. A tombstone in the way (a delete under way, or one whose
	// deleter died) is a missing object: replace it. Other creates and
	// deletes may come first, a few times at most.
	const tries = 3
	vanished := 0
	for range tries {
		v, err := s.put(ctx, key, data, nil, statestore.NoVersion)
		if err == nil {
			return v, nil
		}
		if !conflict(err) {
			return "", s.explain("s3:PutObject", name, err)
		}
		head, err := s.client.HeadObject(ctx, &s3.HeadObjectInput{Bucket: &s.bucket, Key: &key})
		switch {
		case notFound(err):
			vanished++
			continue // deleted meanwhile
		case err != nil:
			return "", s.explain("s3:GetObject", name, err)
		case !isTombstone(head.Metadata):
			return "", &statestore.ConflictError{Store: s.Location(), Name: name, Want: statestore.NoVersion, Have: aws.ToString(head.ETag)}
		}
		v, err = s.put(ctx, key, data, nil, aws.ToString(head.ETag))
		switch {
		case err == nil:
			return v, nil
		case !conflict(err) && !notFound(err):
			return "", s.explain("s3:PutObject", name, err)
		}
	}
	if vanished == tries {
		// Not a race: the service refuses to create an object it says
		// does not exist. versitygw v1.8.0 does, after a delete, in a
		// bucket whose versioning is or was ever on (its delete marker
		// keeps the deleted object's ETag). Failing here, rather than
		// with a conflict, keeps a lock's waiter from trying forever.
		return "", fmt.Errorf("%s/%s: the service refuses to create it (412 Precondition Failed, If-None-Match: *) though it says no such object exists; "+
			"some services (versitygw) do so after a delete in a bucket with versioning: use a bucket that never had versioning turned on", s.Location(), name)
	}
	return "", &statestore.ConflictError{Store: s.Location(), Name: name, Want: statestore.NoVersion}
}

// ErrNoConditions says a service does not enforce conditional writes:
// transit cannot keep one writer at a time on it.
var ErrNoConditions = errors.New("the service does not enforce conditional writes")

// enforcing probes, once per store, that the service refuses what a
// conditional write must refuse: a create (If-None-Match: *) of an
// object that exists, and a replace (If-Match) naming a version that is
// not the object's. A service that writes either (some gateways and
// proxies drop the headers, older S3 layers ignore them) would let two
// runs hold the lock and overwrite each other's state: it is refused.
func (s *Store) enforcing(ctx context.Context) error {
	s.probeMu.Lock()
	defer s.probeMu.Unlock()
	if s.probed {
		return s.refused
	}
	b := make([]byte, 8)
	if _, err := rand.Read(b); err != nil {
		return err
	}
	key := s.prefix + "transit-probe/" + hex.EncodeToString(b)
	defer func() {
		_, _ = s.client.DeleteObject(context.WithoutCancel(ctx), &s3.DeleteObjectInput{Bucket: &s.bucket, Key: &key})
	}()
	v, err := s.put(ctx, key, []byte("first"), nil, statestore.NoVersion)
	if err != nil {
		return s.explain("s3:PutObject", "transit-probe/…", err)
	}
	var wrote []string
	switch _, err := s.put(ctx, key, []byte("second"), nil, statestore.NoVersion); {
	case err == nil:
		wrote = append(wrote, "a create (If-None-Match: *) of an object that exists")
	case !conflict(err):
		return s.explain("s3:PutObject", "transit-probe/…", err)
	}
	wrong := `"` + strings.Repeat("0", 32) + `"`
	if wrong == v {
		wrong = `"` + strings.Repeat("1", 32) + `"`
	}
	switch _, err := s.put(ctx, key, []byte("third"), nil, wrong); {
	case err == nil:
		wrote = append(wrote, "a replace (If-Match) naming another version than the object's")
	case !conflict(err) && !notFound(err):
		return s.explain("s3:PutObject", "transit-probe/…", err)
	}
	s.probed = true
	if len(wrote) > 0 {
		s.refused = fmt.Errorf("%s: %w: it wrote %s, which it must refuse; on it two runs could hold the lock and overwrite each other's state, so transit does not use it: use a service that enforces If-None-Match and If-Match on PutObject (AWS S3, versitygw, MinIO do), or remove what strips those headers (a proxy, a gateway)",
			s.Location(), ErrNoConditions, strings.Join(wrote, " and "))
	}
	return s.refused
}

// put is a conditional PutObject: If-None-Match: * for NoVersion, else
// If-Match: ifVersion.
func (s *Store) put(ctx context.Context, key string, data []byte, meta map[string]string, ifVersion string) (string, error) {
	in := &s3.PutObjectInput{Bucket: &s.bucket, Key: &key, Body: bytes.NewReader(data), ContentLength: aws.Int64(int64(len(data))), Metadata: meta}
	if ifVersion == statestore.NoVersion {
		in.IfNoneMatch = aws.String("*")
	} else {
		in.IfMatch = aws.String(ifVersion)
	}
	var out *s3.PutObjectOutput
	var err error
	for range 3 {
		in.Body = bytes.NewReader(data)
		out, err = s.client.PutObject(ctx, in)
		if !isCode(err, "ExistingObjectIsDirectory") {
			break
		}
		// A file-system gateway (versitygw) that removes the empty
		// directories a delete leaves may remove the one this write
		// was making (another prefix's delete, racing): nothing was
		// written, so write again. A directory in the object's place
		// stays and fails.
	}
	if err != nil {
		return "", err
	}
	return aws.ToString(out.ETag), nil
}

func isCode(err error, code string) bool {
	var api smithy.APIError
	return errors.As(err, &api) && api.ErrorCode() == code
}

// conflictError is the conflict of a write that named version want, with
// the version stored now when a HEAD tells it.
func (s *Store) conflictError(ctx context.Context, name, key, want string) error {
	c := &statestore.ConflictError{Store: s.Location(), Name: name, Want: want}
	head, err := s.client.HeadObject(ctx, &s3.HeadObjectInput{Bucket: &s.bucket, Key: &key})
	if err == nil && !isTombstone(head.Metadata) {
		c.Have = aws.ToString(head.ETag)
	}
	return c
}

// Delete removes an object if its version is still ifVersion: it replaces
// it with a tombstone, If-Match: ifVersion, which one deleter wins, then
// deletes the tombstone (see the package doc).
func (s *Store) Delete(ctx context.Context, name, ifVersion string) error {
	key, err := s.key(name)
	if err != nil {
		return err
	}
	if ifVersion == statestore.NoVersion {
		return &statestore.ConflictError{Store: s.Location(), Name: name, Want: ifVersion}
	}
	if err := s.enforcing(ctx); err != nil {
		return err
	}
	body, nonce, err := newTombstone()
	if err != nil {
		return err
	}
	tomb, err := s.put(ctx, key, body, map[string]string{tombstoneMeta: nonce}, ifVersion)
	switch {
	case notFound(err):
		return s.notFound(name)
	case conflict(err):
		head, herr := s.client.HeadObject(ctx, &s3.HeadObjectInput{Bucket: &s.bucket, Key: &key})
		switch {
		case notFound(herr):
			return s.notFound(name)
		case herr != nil:
			return &statestore.ConflictError{Store: s.Location(), Name: name, Want: ifVersion}
		case head.Metadata[tombstoneMeta] == nonce:
			// This delete's own tombstone, written by an attempt whose
			// answer was lost.
			tomb = aws.ToString(head.ETag)
		case isTombstone(head.Metadata):
			return s.notFound(name) // another delete's
		default:
			return &statestore.ConflictError{Store: s.Location(), Name: name, Want: ifVersion, Have: aws.ToString(head.ETag)}
		}
	case err != nil:
		return s.explain("s3:PutObject", name, err)
	}
	// The object is deleted now: the tombstone is a missing object to
	// every reader. A create that replaced the tombstone meanwhile makes
	// this answer 412, which is right: it came after this delete.
	_, err = s.client.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: &s.bucket, Key: &key, IfMatch: aws.String(tomb)})
	if err != nil && !conflict(err) && !notFound(err) {
		return fmt.Errorf("%w (the object is deleted, but its tombstone, a small object every reader takes for none, stays)", s.explain("s3:DeleteObject", name, err))
	}
	return nil
}

// A tombstone is an object being deleted, marked by this metadata, whose
// value is its deleter's nonce. Its content is tombstoneSize bytes, so
// that List looks twice only at objects of that size.
const (
	tombstoneMeta = "transit-deleted"
	tombstoneSize = int64(len("deleted by transit \n") + 32)
)

func newTombstone() (body []byte, nonce string, err error) {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return nil, "", fmt.Errorf("a delete's nonce: %w", err)
	}
	nonce = hex.EncodeToString(b)
	return []byte("deleted by transit " + nonce + "\n"), nonce, nil
}

func isTombstone(meta map[string]string) bool { return meta[tombstoneMeta] != "" }

func (s *Store) notFound(name string) error {
	return fmt.Errorf("%s/%s: %w", s.Location(), name, statestore.ErrNotFound)
}

// List returns the objects under prefix, sorted by name (S3 lists keys in
// byte order), tombstones left out.
func (s *Store) List(ctx context.Context, prefix string) ([]statestore.Entry, error) {
	var out []statestore.Entry
	p := s3.NewListObjectsV2Paginator(s.client, &s3.ListObjectsV2Input{Bucket: &s.bucket, Prefix: aws.String(s.prefix + prefix)})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, s.explain("s3:ListBucket", prefix, err)
		}
		for _, o := range page.Contents {
			name := strings.TrimPrefix(aws.ToString(o.Key), s.prefix)
			if statestore.CheckName(name) != nil {
				continue
			}
			e := statestore.Entry{Name: name, Version: aws.ToString(o.ETag), Size: aws.ToInt64(o.Size), Modified: aws.ToTime(o.LastModified)}
			if e.Size == tombstoneSize {
				// Perhaps a tombstone: a listing shows no metadata.
				var err error
				e, err = s.Stat(ctx, name)
				if errors.Is(err, statestore.ErrNotFound) {
					continue
				}
				if err != nil {
					return nil, err
				}
			}
			out = append(out, e)
		}
	}
	return out, nil
}

// Lock takes the store's lease lock.
func (s *Store) Lock(ctx context.Context, o statestore.LockOptions) (statestore.Lock, error) {
	return statestore.AcquireLease(ctx, s, LockName, o)
}

// ForceUnlock frees the lease lock whose ID is id.
func (s *Store) ForceUnlock(ctx context.Context, id string) error {
	return statestore.ForceUnlockLease(ctx, s, LockName, id)
}

// conflict says the service refused a conditional request: 412
// PreconditionFailed, or 409 ConditionalRequestConflict (a concurrent
// conditional write on the same key).
func conflict(err error) bool {
	var api smithy.APIError
	if errors.As(err, &api) {
		switch api.ErrorCode() {
		case "PreconditionFailed", "ConditionalRequestConflict":
			return true
		}
	}
	var re interface{ HTTPStatusCode() int }
	if errors.As(err, &re) {
		return re.HTTPStatusCode() == http.StatusPreconditionFailed
	}
	return false
}

// notFound says the object (or the object a condition names) is missing.
// A service that keeps objects as files (versitygw) answers a name below
// an object's, "a/b" below "a", with ObjectParentIsFile: no such object
// either.
func notFound(err error) bool {
	var api smithy.APIError
	if errors.As(err, &api) {
		switch api.ErrorCode() {
		case "NoSuchKey", "NotFound", "ObjectParentIsFile":
			return true
		}
	}
	return false
}

// explain turns a service's error into one naming the bucket and what to
// do about it.
func (s *Store) explain(action, name string, err error) error {
	where := s.Location() + "/" + name
	var api smithy.APIError
	code := ""
	if errors.As(err, &api) {
		code = api.ErrorCode()
	}
	status := 0
	var re interface{ HTTPStatusCode() int }
	if errors.As(err, &re) {
		status = re.HTTPStatusCode()
	}
	switch {
	case code == "NoSuchKey" || code == "NotFound" && action != "s3:ListBucket":
		return s.notFound(name)
	case code == "InvalidBucketName":
		return fmt.Errorf("bucket name %q is not valid: 3 to 63 lowercase letters, digits, dots and hyphens; fix the state URL", s.bucket)
	case code == "ObjectParentIsFile" || code == "ExistingObjectIsDirectory":
		return fmt.Errorf("%s: the service keeps objects as files (a file-system gateway) and cannot hold both an object and one below its name (%s)", where, code)
	case code == "NoSuchBucket":
		return fmt.Errorf("bucket %s does not exist (%s): create it, or fix the state URL", s.bucket, s.endpointHint())
	case code == "AccessDenied" || status == http.StatusForbidden && code != "InvalidAccessKeyId" && code != "SignatureDoesNotMatch":
		return fmt.Errorf("%s: access denied: the credentials lack %s on bucket %s (the state store needs s3:GetObject, s3:PutObject, s3:DeleteObject and s3:ListBucket)", where, action, s.bucket)
	case code == "InvalidAccessKeyId" || code == "SignatureDoesNotMatch" || code == "InvalidClientTokenId" || code == "ExpiredToken":
		return fmt.Errorf("%s: the service refused the credentials (%s): check the state URL's credential_id in credentials.json, or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY", where, code)
	case status >= 500 || code == "SlowDown":
		return fmt.Errorf("%s: the service kept failing (%s), after the retries: try again later: %w", where, strings.TrimSpace(code+" "+strconv.Itoa(status)), err)
	}
	return fmt.Errorf("%s: %s: %w", where, action, err)
}

func (s *Store) endpointHint() string {
	if ep := s.client.Options().BaseEndpoint; ep != nil {
		return "at " + *ep
	}
	return "in region " + s.client.Options().Region
}

// FromURL opens the store a URL names:
//
//	s3://bucket/prefix?endpoint=http://127.0.0.1:9000&region=eu-central-1&path_style=true
//
// credential_id names the credential the caller resolved into o's keys;
// any other setting is refused.
func FromURL(ctx context.Context, u *url.URL, o Options) (*Store, error) {
	if u.Scheme != "s3" {
		return nil, fmt.Errorf("%s: not an s3:// URL", u.Redacted())
	}
	if u.User != nil {
		return nil, errors.New("the state URL must not hold credentials: name a credential of credentials.json with credential_id=…")
	}
	q := u.Query()
	for k := range q {
		switch k {
		case "endpoint", "region", "path_style", "credential_id":
		default:
			return nil, fmt.Errorf("state URL setting %q is unknown (known: endpoint, region, path_style, credential_id)", k)
		}
	}
	if v := q.Get("endpoint"); v != "" {
		o.Endpoint = v
	}
	if v := q.Get("region"); v != "" {
		o.Region = v
	}
	if v := q.Get("path_style"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return nil, fmt.Errorf("state URL setting path_style=%q: want true or false", v)
		}
		o.PathStyle = b
	}
	return New(ctx, u.Host, u.Path, o)
}
