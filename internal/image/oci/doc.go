// Package oci pulls one OCI image (linux/amd64) from any registry, verifies every layer and
// flattens the layers into a tree within its Limits, refusing unsafe entries and leaving out
// device nodes and FIFOs (never created); imported by internal/image and its tests.
package oci
