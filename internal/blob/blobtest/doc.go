// Package blobtest is the one conformance suite for blob.Store backends:
// every backend's tests call Run with a fresh store per subtest, and Bench
// for throughput numbers.
package blobtest
