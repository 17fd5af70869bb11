// Package imagetest builds OCI test images in Go (busybox, multi-layer, Alpine-like, malicious,
// debootstrapped Debian) and serves them from an in-process registry on 127.0.0.1 with optional
// basic or bearer auth and blob corruption. It is imported only from _test.go files.
package imagetest
