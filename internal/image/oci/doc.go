// Package oci pulls one OCI image (the linux/amd64 manifest) from any registry, verifies
// every layer and flattens the layers into a directory tree, refusing unsafe entries and
// leaving nothing half-written; it reports the digest, config and whether /bin/sh exists.
package oci
