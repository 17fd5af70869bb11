// Package blob is the object storage contract: get, put, stat, delete and
// list by key. Backends (blob/localdir, blob/s3) live in sub-packages and
// pass the one conformance suite in blob/blobtest.
package blob
