// Package s3store is the state store in a bucket of any S3-compatible
// service — AWS S3, Google Cloud Storage through its S3-compatible XML API,
// OpenStack Swift's S3 API, Ceph, MinIO, versitygw — through
// aws-sdk-go-v2's S3 client, so that CI runners and team members share one
// state, one lock and the cluster's keys.
//
// Objects live under the URL's prefix ("s3://bucket/prefix/resources.json");
// a version is the object's ETag. Every write is conditional: a create
// with If-None-Match: *, a replace or delete with If-Match: <etag>; the
// service answers 412 when another writer came first, and the store
// returns a *statestore.ConflictError. The lock is statestore's lease lock
// on the object "lock" (a conditional create, renewed while the run
// lives). A service that ignored the conditions would let two writers
// win: the conformance suite, run against a real server, proves they hold.
//
// Errors name the bucket and what to do: a missing bucket, a refused
// permission (with the S3 action refused), refused credentials. 500s and
// throttling (503 SlowDown) are retried, a bounded number of times.
package s3store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"

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
}

// Store is a prefix of a bucket.
type Store struct {
	client *s3.Client
	bucket string
	prefix string // "" or ending in "/"
	url    string
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
	data, err := io.ReadAll(out.Body)
	if err != nil {
		return statestore.Object{}, fmt.Errorf("%s/%s: read: %w", s.Location(), name, err)
	}
	return statestore.Object{Data: data, Version: aws.ToString(out.ETag)}, nil
}

// Put writes an object if its version is still ifVersion.
func (s *Store) Put(ctx context.Context, name string, data []byte, ifVersion string) (string, error) {
	key, err := s.key(name)
	if err != nil {
		return "", err
	}
	in := &s3.PutObjectInput{Bucket: &s.bucket, Key: &key, Body: bytes.NewReader(data), ContentLength: aws.Int64(int64(len(data)))}
	if ifVersion == statestore.NoVersion {
		in.IfNoneMatch = aws.String("*")
	} else {
		in.IfMatch = aws.String(ifVersion)
	}
	out, err := s.client.PutObject(ctx, in)
	if err != nil {
		if conflict(err) {
			return "", &statestore.ConflictError{Store: s.Location(), Name: name, Want: ifVersion}
		}
		return "", s.explain("s3:PutObject", name, err)
	}
	return aws.ToString(out.ETag), nil
}

// Delete removes an object if its version is still ifVersion. The check
// is made twice: by reading the object's ETag first (a service that
// ignores If-Match on a delete still refuses a stale version, in all but
// a race of milliseconds), and by the If-Match the delete carries.
func (s *Store) Delete(ctx context.Context, name, ifVersion string) error {
	key, err := s.key(name)
	if err != nil {
		return err
	}
	head, err := s.client.HeadObject(ctx, &s3.HeadObjectInput{Bucket: &s.bucket, Key: &key})
	if err != nil {
		return s.explain("s3:GetObject", name, err)
	}
	if have := aws.ToString(head.ETag); have != ifVersion {
		return &statestore.ConflictError{Store: s.Location(), Name: name, Want: ifVersion, Have: have}
	}
	_, err = s.client.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: &s.bucket, Key: &key, IfMatch: aws.String(ifVersion)})
	if err != nil {
		if conflict(err) {
			return &statestore.ConflictError{Store: s.Location(), Name: name, Want: ifVersion}
		}
		return s.explain("s3:DeleteObject", name, err)
	}
	return nil
}

// List returns the objects under prefix, sorted by name (S3 lists keys in
// byte order).
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
			out = append(out, statestore.Entry{Name: name, Version: aws.ToString(o.ETag), Size: aws.ToInt64(o.Size), Modified: aws.ToTime(o.LastModified)})
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
		return fmt.Errorf("%s: %w", where, statestore.ErrNotFound)
	case code == "InvalidBucketName":
		return fmt.Errorf("bucket name %q is not valid: 3 to 63 lowercase letters, digits, dots and hyphens; fix the state URL", s.bucket)
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
