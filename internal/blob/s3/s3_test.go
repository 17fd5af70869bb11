package s3_test

import (
	"context"
	"errors"
	"fmt"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"
	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/engrams/engrams/internal/blob"
	"github.com/engrams/engrams/internal/blob/blobtest"
	"github.com/engrams/engrams/internal/blob/s3"
)

const (
	testAccessKey = "engrams-test"
	testSecretKey = "engrams-test-secret"
	// testPartSize is the S3 minimum, so 20 MiB test objects span parts.
	testPartSize = s3.MinPartSize
)

// server is an S3 endpoint on 127.0.0.1 the tests may create buckets on.
type server struct {
	endpoint string
	buckets  atomic.Int64
}

// newBucket makes a fresh bucket, so each store starts empty.
func (srv *server) newBucket(t testing.TB) string {
	t.Helper()
	c, err := minio.New(srv.endpoint, &minio.Options{
		Creds: credentials.NewStaticV4(testAccessKey, testSecretKey, ""),
	})
	if err != nil {
		t.Fatal(err)
	}
	name := fmt.Sprintf("blobtest-%d", srv.buckets.Add(1))
	if err := c.MakeBucket(context.Background(), name, minio.MakeBucketOptions{}); err != nil {
		t.Fatalf("make bucket %s: %v", name, err)
	}
	return name
}

func (srv *server) open(t testing.TB, bucket, prefix string) *s3.Store {
	t.Helper()
	s, err := s3.New(context.Background(), s3.Config{
		Endpoint:  srv.endpoint,
		Bucket:    bucket,
		AccessKey: testAccessKey,
		SecretKey: testSecretKey,
		Prefix:    prefix,
		PartSize:  testPartSize,
	}, s3.Deps{})
	if err != nil {
		t.Fatalf("s3.New: %v", err)
	}
	return s
}

func startGofakes3(t testing.TB) *server {
	t.Helper()
	ts := httptest.NewServer(gofakes3.New(s3mem.New()).Server())
	t.Cleanup(ts.Close)
	return &server{endpoint: strings.TrimPrefix(ts.URL, "http://")}
}

func TestConformanceGofakes3(t *testing.T) {
	srv := startGofakes3(t)
	blobtest.Run(t, func(t *testing.T) blob.Store {
		return srv.open(t, srv.newBucket(t), "")
	})
}

func BenchmarkGofakes3(b *testing.B) {
	srv := startGofakes3(b)
	blobtest.Bench(b, srv.open(b, srv.newBucket(b), ""))
}

// TestPrefixIsolation: stores on one bucket with different prefixes see
// only their own objects, and keys come back without the prefix.
func TestPrefixIsolation(t *testing.T) {
	t.Parallel()
	srv := startGofakes3(t)
	bucket := srv.newBucket(t)
	a, b := srv.open(t, bucket, "one"), srv.open(t, bucket, "one-two/")
	bare := srv.open(t, bucket, "")
	ctx := context.Background()
	for _, s := range []*s3.Store{a, b} {
		if err := s.Put(ctx, "k", strings.NewReader("v"), 1); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Delete(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Stat(ctx, "k"); err != nil {
		t.Errorf("a/k after deleting b/k: %v", err)
	}
	var keys []string
	_ = bare.List(ctx, "", func(i blob.Info) error { keys = append(keys, i.Key); return nil })
	if len(keys) != 1 || keys[0] != "one/k" {
		t.Errorf("bare List = %q, want [one/k]", keys)
	}
	keys = nil
	_ = a.List(ctx, "", func(i blob.Info) error { keys = append(keys, i.Key); return nil })
	if len(keys) != 1 || keys[0] != "k" {
		t.Errorf("prefixed List = %q, want [k]", keys)
	}
	// The prefix counts against S3's 1024-byte object names.
	long := strings.Repeat("x/", 510) + "xx" // 1022 bytes
	if err := a.Put(ctx, long, strings.NewReader("v"), 1); !errors.Is(err, blob.ErrInvalidKey) {
		t.Errorf("Put(1022-byte key) under prefix one/ = %v, want ErrInvalidKey", err)
	}
	if err := bare.Put(ctx, long, strings.NewReader("v"), 1); err != nil {
		t.Errorf("Put(1022-byte key) without prefix = %v", err)
	}
}

func TestNewErrors(t *testing.T) {
	t.Parallel()
	srv := startGofakes3(t)
	ctx := context.Background()
	bucket := srv.newBucket(t) // exists: only the half key pair is wrong
	for name, cfg := range map[string]s3.Config{
		"no endpoint":    {Bucket: "b"},
		"no bucket":      {Endpoint: srv.endpoint},
		"missing bucket": {Endpoint: srv.endpoint, Bucket: "absent", AccessKey: testAccessKey, SecretKey: testSecretKey},
		"half a key":     {Endpoint: srv.endpoint, Bucket: bucket, AccessKey: testAccessKey},
		"bad prefix":     {Endpoint: srv.endpoint, Bucket: "b", Prefix: "../x"},
		"tiny parts":     {Endpoint: srv.endpoint, Bucket: "b", PartSize: 1 << 20},
	} {
		if _, err := s3.New(ctx, cfg, s3.Deps{}); err == nil {
			t.Errorf("%s: New succeeded", name)
		}
	}
}
