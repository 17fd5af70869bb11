// Package s3 is the blob.Store backend on S3-compatible storage (AWS S3,
// MinIO, versitygw, ...) through minio-go: streamed Puts, at most one part
// buffered in memory, keys under an optional prefix of one bucket.
package s3
