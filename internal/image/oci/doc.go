// Package oci pulls one OCI image (the linux/amd64 manifest) from any registry, verifies
// every layer and flattens the layers into a directory tree, refusing unsafe entries,
// stopping at the first of its Limits a layer passes (decompression bombs, too many
// entries, oversized metadata), leaving out device nodes and FIFOs (never created) and
// leaving nothing half-written; it reports the digest, config, what was left out and
// whether /bin/sh exists.
package oci
