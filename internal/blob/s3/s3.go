package s3

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/engrams/engrams/internal/blob"
)

// Part sizes. S3 refuses parts under 5 MiB (except the last).
const (
	DefaultPartSize = 16 << 20
	MinPartSize     = 5 << 20
)

// Config selects the bucket and how to reach it.
type Config struct {
	Endpoint string // host[:port], no scheme
	Region   string // empty: the client discovers it
	Bucket   string // must exist
	// AccessKey and SecretKey sign requests; both empty: the standard AWS
	// chain gives them (AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, the
	// shared credentials file, then the instance's IAM role).
	AccessKey string
	SecretKey string
	// Prefix is prepended to every key ("engrams/" keeps the store in one
	// folder of a shared bucket). A trailing "/" is added if missing. S3
	// caps object names at 1024 bytes, so with a prefix the longest key is
	// 1024 - len(Prefix) bytes; longer ones are blob.ErrInvalidKey.
	Prefix string
	UseTLS bool
	// PartSize is the multipart part size, and so the memory one Put
	// buffers; 0 means DefaultPartSize. Objects up to this size go in a
	// single PUT.
	PartSize int64
}

// Deps are the injected collaborators.
type Deps struct {
	Logger *slog.Logger
}

// Store is a blob.Store on one S3 bucket. Safe for concurrent use.
type Store struct {
	client   *minio.Client
	core     minio.Core
	bucket   string
	prefix   string
	partSize int64
	log      *slog.Logger
}

var _ blob.Store = (*Store)(nil)

// New checks the configuration, connects and verifies the bucket exists.
func New(ctx context.Context, cfg Config, deps Deps) (*Store, error) {
	if cfg.Endpoint == "" || cfg.Bucket == "" {
		return nil, errors.New("open s3 store: Endpoint and Bucket are required")
	}
	prefix := cfg.Prefix
	if prefix != "" && !strings.HasSuffix(prefix, "/") {
		prefix += "/"
	}
	if prefix != "" && !blob.ValidKey(strings.TrimSuffix(prefix, "/")) {
		return nil, fmt.Errorf("open s3 store: prefix %q: %w", cfg.Prefix, blob.ErrInvalidKey)
	}
	partSize := cfg.PartSize
	if partSize == 0 {
		partSize = DefaultPartSize
	}
	if partSize < MinPartSize {
		return nil, fmt.Errorf("open s3 store: PartSize %d is below the S3 minimum %d", partSize, MinPartSize)
	}
	creds, err := newCredentials(cfg)
	if err != nil {
		return nil, fmt.Errorf("open s3 store %s: %w", cfg.Endpoint, err)
	}
	client, err := minio.New(cfg.Endpoint, &minio.Options{
		Creds:  creds,
		Secure: cfg.UseTLS,
		Region: cfg.Region,
	})
	if err != nil {
		return nil, fmt.Errorf("open s3 store %s: %w", cfg.Endpoint, err)
	}
	ok, err := client.BucketExists(ctx, cfg.Bucket)
	if err != nil {
		return nil, fmt.Errorf("open s3 store: check bucket %s at %s: %w", cfg.Bucket, cfg.Endpoint, err)
	}
	if !ok {
		return nil, fmt.Errorf("open s3 store: bucket %s does not exist at %s", cfg.Bucket, cfg.Endpoint)
	}
	log := deps.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Store{
		client:   client,
		core:     minio.Core{Client: client},
		bucket:   cfg.Bucket,
		prefix:   prefix,
		partSize: partSize,
		log:      log.With("bucket", cfg.Bucket, "prefix", prefix),
	}, nil
}

// iamTimeout bounds each request to the instance metadata service.
const iamTimeout = 5 * time.Second

// newCredentials signs with the configured keys, or else with the first
// of the AWS chain that has some: the environment (AWS_ACCESS_KEY_ID,
// AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN), the shared credentials file
// (AWS_SHARED_CREDENTIALS_FILE or ~/.aws/credentials, profile AWS_PROFILE)
// and the instance's IAM role; none of them: anonymous requests.
func newCredentials(cfg Config) (*credentials.Credentials, error) {
	switch {
	case cfg.AccessKey != "" && cfg.SecretKey != "":
		return credentials.NewStaticV4(cfg.AccessKey, cfg.SecretKey, ""), nil
	case cfg.AccessKey != "" || cfg.SecretKey != "":
		return nil, errors.New("an access key needs its secret key: give both, or neither to use the AWS chain (environment, shared credentials file, instance role)")
	}
	return credentials.NewChainCredentials([]credentials.Provider{
		&credentials.EnvAWS{},
		&credentials.FileAWSCredentials{},
		&credentials.IAM{Client: &http.Client{Timeout: iamTimeout}},
	}), nil
}

// check validates key and ctx before a call.
func (s *Store) check(ctx context.Context, action, key string) error {
	if !blob.ValidKey(key) {
		return fmt.Errorf("%s %q: %w", action, key, blob.ErrInvalidKey)
	}
	if len(s.prefix)+len(key) > blob.MaxKeyLen {
		return fmt.Errorf("%s %s: with prefix %q the object name exceeds S3's %d bytes: %w",
			action, key, s.prefix, blob.MaxKeyLen, blob.ErrInvalidKey)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%s %s: %w", action, key, err)
	}
	return nil
}

// wrap adds the action and key, maps a missing object to blob.ErrNotFound
// and makes sure a cancelled call reports the context's error.
func (s *Store) wrap(ctx context.Context, action, key string, err error) error {
	if isNotFound(err) {
		return fmt.Errorf("%s %s: %w", action, key, blob.ErrNotFound)
	}
	if cerr := ctx.Err(); cerr != nil && !errors.Is(err, cerr) {
		return fmt.Errorf("%s %s: %w: %w", action, key, cerr, err)
	}
	return fmt.Errorf("%s %s: %w", action, key, err)
}

func isNotFound(err error) bool {
	r := minio.ToErrorResponse(err)
	switch r.Code {
	case minio.NoSuchKey, "NotFound":
		return true
	case minio.NoSuchBucket:
		return false
	}
	return r.StatusCode == http.StatusNotFound && r.Code == ""
}

// Put streams r to the object. Known sizes up to PartSize go in one PUT
// (the body streams, nothing is buffered); larger or unknown sizes go as a
// multipart upload, one part buffered at a time, aborted on any error. S3
// publishes an object only when its PUT or multipart upload completes, so
// a failed Put leaves the previous object (or none). An abort that fails
// (e.g. the context is already done) leaves an invisible incomplete
// upload: give the bucket an AbortIncompleteMultipartUpload lifecycle rule.
func (s *Store) Put(ctx context.Context, key string, r io.Reader, size int64) error {
	if err := s.check(ctx, "put", key); err != nil {
		return err
	}
	start := time.Now()
	body := blob.ContextReader(ctx, r)
	if size < 0 {
		var err error
		if body, size, err = peekEmpty(body); err != nil {
			return s.wrap(ctx, "put", key, err)
		}
	}
	if size >= 0 {
		body = &exactReader{r: io.LimitReader(body, size), left: size}
	}
	_, err := s.client.PutObject(ctx, s.bucket, s.prefix+key, body, size, minio.PutObjectOptions{
		PartSize:    uint64(s.partSize),
		NumThreads:  1,
		ContentType: "application/octet-stream",
		// Over plain HTTP minio-go would otherwise sign the body in
		// "aws-chunked" framing, which some S3-compatible servers store
		// verbatim in multipart parts (gofakes3 does). Over TLS it sends
		// unsigned payloads anyway; readers verify content hashes.
		DisableContentSha256: true,
	})
	if err != nil {
		return s.wrap(ctx, "put", key, err)
	}
	s.log.Debug("blob put", "key", key, "size", size, "duration", time.Since(start))
	return nil
}

// peekEmpty reads one byte of a stream of unknown size. An empty stream
// becomes a known size 0 (a multipart upload of one empty part is refused
// by some servers); otherwise the byte is put back and the size stays -1.
func peekEmpty(r io.Reader) (io.Reader, int64, error) {
	var b [1]byte
	for {
		n, err := r.Read(b[:])
		if n == 1 {
			return io.MultiReader(bytes.NewReader(b[:]), r), -1, nil
		}
		if err == io.EOF {
			return bytes.NewReader(nil), 0, nil
		}
		if err != nil {
			return nil, 0, err
		}
	}
}

// exactReader turns an early EOF into io.ErrUnexpectedEOF, so a short body
// fails the upload instead of being sent as a shorter object.
type exactReader struct {
	r    io.Reader
	left int64
}

func (e *exactReader) Read(p []byte) (int, error) {
	n, err := e.r.Read(p)
	e.left -= int64(n)
	if err == io.EOF && e.left > 0 {
		err = fmt.Errorf("short read: %d bytes missing: %w", e.left, io.ErrUnexpectedEOF)
	}
	return n, err
}

// Get sends the GET at once (no separate HEAD), so a missing object is
// blob.ErrNotFound from Get itself; the returned body streams and is bound
// to ctx.
func (s *Store) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	if err := s.check(ctx, "get", key); err != nil {
		return nil, err
	}
	rc, _, _, err := s.core.GetObject(ctx, s.bucket, s.prefix+key, minio.GetObjectOptions{})
	if err != nil {
		return nil, s.wrap(ctx, "get", key, err)
	}
	// The transport notices a cancelled ctx asynchronously; checking it on
	// every Read makes cancellation fail the next read deterministically.
	return blob.ContextReadCloser(ctx, rc), nil
}

// Stat is a HEAD request.
func (s *Store) Stat(ctx context.Context, key string) (blob.Info, error) {
	if err := s.check(ctx, "stat", key); err != nil {
		return blob.Info{}, err
	}
	oi, err := s.client.StatObject(ctx, s.bucket, s.prefix+key, minio.StatObjectOptions{})
	if err != nil {
		return blob.Info{}, s.wrap(ctx, "stat", key, err)
	}
	return blob.Info{Key: key, Size: oi.Size, ModTime: oi.LastModified}, nil
}

// Delete removes the object; S3 reports success for absent keys too.
func (s *Store) Delete(ctx context.Context, key string) error {
	if err := s.check(ctx, "delete", key); err != nil {
		return err
	}
	err := s.client.RemoveObject(ctx, s.bucket, s.prefix+key, minio.RemoveObjectOptions{})
	if err != nil && !isNotFound(err) {
		return s.wrap(ctx, "delete", key, err)
	}
	s.log.Debug("blob delete", "key", key)
	return nil
}

// List pages through ListObjectsV2 (recursive, so no delimiter), which S3
// returns in byte-wise key order. Objects under the prefix whose names are
// not valid keys (written by something else) are skipped. A prefix no
// valid key starts with matches nothing without a request.
func (s *Store) List(ctx context.Context, prefix string, fn func(blob.Info) error) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("list %q: %w", prefix, err)
	}
	if !blob.PrefixCanMatch(prefix) {
		return nil
	}
	lctx, cancel := context.WithCancel(ctx)
	ch := s.client.ListObjects(lctx, s.bucket, minio.ListObjectsOptions{
		Prefix:    s.prefix + prefix,
		Recursive: true,
	})
	defer func() {
		cancel()
		for range ch { // let the lister goroutine exit
		}
	}()
	for oi := range ch {
		if oi.Err != nil {
			return s.wrap(ctx, "list", fmt.Sprintf("%q", prefix), oi.Err)
		}
		key := strings.TrimPrefix(oi.Key, s.prefix)
		if !blob.ValidKey(key) {
			continue
		}
		if err := fn(blob.Info{Key: key, Size: oi.Size, ModTime: oi.LastModified}); err != nil {
			return fmt.Errorf("list %q: %w", prefix, err)
		}
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("list %q: %w", prefix, err)
		}
	}
	return nil
}
