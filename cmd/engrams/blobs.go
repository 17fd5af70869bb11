package main

import (
	"context"

	"fmt"
	"log/slog"
	"path/filepath"

	"github.com/spf13/pflag"

	"github.com/engrams/engrams/internal/blob"
	"github.com/engrams/engrams/internal/blob/localdir"
	"github.com/engrams/engrams/internal/blob/s3"
	"github.com/engrams/engrams/internal/chunk"
	"github.com/engrams/engrams/internal/host"
	"github.com/engrams/engrams/internal/metrics"
)

// blobFlags pick the blob store snapshots' chunks live in: a local
// directory, or an S3-compatible bucket (which every host and the
// coordinator must share for sessions to resume on any host).
type blobFlags struct {
	dir                                string
	s3Endpoint, s3Bucket, s3Region     string
	s3AccessKey, s3SecretKey, s3Prefix string
	s3SecretKeyFile                    string
	s3TLS                              bool
}

func (f *blobFlags) register(fs *pflag.FlagSet, defDir string) {
	fs.StringVar(&f.dir, "blob-dir", env("BLOB_DIR", defDir), "directory of the local blob store for snapshot chunks (ignored with --s3-endpoint)")
	fs.StringVar(&f.s3Endpoint, "s3-endpoint", env("S3_ENDPOINT", ""), "S3-compatible endpoint host[:port] for snapshot chunks")
	fs.StringVar(&f.s3Bucket, "s3-bucket", env("S3_BUCKET", ""), "S3 bucket (must exist)")
	fs.StringVar(&f.s3Region, "s3-region", env("S3_REGION", ""), "S3 region")
	fs.StringVar(&f.s3AccessKey, "s3-access-key", env("S3_ACCESS_KEY", ""), "S3 access key (without keys: AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, ~/.aws/credentials or the instance's role)")
	fs.StringVar(&f.s3SecretKey, "s3-secret-key", env("S3_SECRET_KEY", ""), "S3 secret key")
	fs.StringVar(&f.s3SecretKeyFile, "s3-secret-key-file", env("S3_SECRET_KEY_FILE", ""), "file holding --s3-secret-key (its trailing newline dropped), which keeps it out of the process list")
	fs.StringVar(&f.s3Prefix, "s3-prefix", env("S3_PREFIX", ""), "key prefix inside the bucket")
	fs.BoolVar(&f.s3TLS, "s3-tls", env("S3_TLS", "true") == "true", "use HTTPS for S3")
}

// open returns the configured store, or nil when none is configured.
func (f *blobFlags) open(ctx context.Context, log *slog.Logger) (blob.Store, error) {
	if f.s3Endpoint != "" {
		secretKey, err := secretFlag("s3-secret-key", f.s3SecretKey, f.s3SecretKeyFile, log)
		if err != nil {
			return nil, err
		}
		st, err := s3.New(ctx, s3.Config{Endpoint: f.s3Endpoint, Bucket: f.s3Bucket, Region: f.s3Region,
			AccessKey: f.s3AccessKey, SecretKey: secretKey, Prefix: f.s3Prefix, UseTLS: f.s3TLS}, s3.Deps{Logger: log})
		if err != nil {
			return nil, fmt.Errorf("blob store: %w", err)
		}
		return st, nil
	}
	if f.dir == "" {
		return nil, nil
	}
	st, err := localdir.New(localdir.Config{Dir: f.dir}, localdir.Deps{Logger: log})
	if err != nil {
		return nil, fmt.Errorf("blob store: %w", err)
	}
	return st, nil
}

// memoryParallel is how many memory chunks a host moves at once (about 4
// MiB of buffers).
const memoryParallel = 32

// hostChunks builds what a host needs to capture and restore snapshots:
// one chunk store per chunk size over one blob store and one local cache
// (its hits and misses counted in reg).
func hostChunks(bs blob.Store, dataDir string, cacheMiB int64, reg *metrics.Registry, log *slog.Logger) (host.Deps, func(), error) {
	d := host.Deps{Metrics: reg}
	if bs == nil {
		return d, func() {}, nil
	}
	cache, err := chunk.NewCache(chunk.CacheConfig{Dir: filepath.Join(dataDir, "chunk-cache"), MaxBytes: cacheMiB << 20},
		chunk.CacheDeps{Logger: log, Reads: reg})
	if err != nil {
		return d, nil, fmt.Errorf("chunk cache: %w", err)
	}
	// Memory chunks are small (64 KiB): a suspend or restore of them is
	// bound by round trips to the blob store, not by the CPU (hashing is
	// capped at GOMAXPROCS whatever this is), so more are kept in flight,
	// and one this host never saw is put without asking first.
	mem, err := chunk.New(chunk.Config{ChunkSize: chunk.MemoryChunkSize, Parallel: memoryParallel, BlindPut: true}, chunk.Deps{Blob: bs, Cache: cache, Logger: log})
	if err != nil {
		return d, nil, fmt.Errorf("memory chunk store: %w", err)
	}
	disk, err := chunk.New(chunk.Config{ChunkSize: chunk.DiskChunkSize}, chunk.Deps{Blob: bs, Cache: cache, Logger: log})
	if err != nil {
		mem.Close()
		return d, nil, fmt.Errorf("disk chunk store: %w", err)
	}
	d.MemoryChunks, d.DiskChunks, d.ChunkCache = mem, disk, cache
	return d, func() { mem.Close(); disk.Close() }, nil
}
