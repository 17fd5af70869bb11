// Package image materializes an OCI image into a chunked root filesystem: it pulls and
// flattens the image (image/oci), builds a deterministic ext4 image populated in layer
// order (vmm/vmimage) and uploads its missing chunks (chunk) — the "materializing" stage
// of enable.
package image
