// Package image materializes an OCI image into a chunked root filesystem (enable's
// "materializing" stage): it pulls and flattens it (image/oci), builds a deterministic
// ext4 image populated in layer order (vmm/vmimage) and uploads its missing chunks (chunk).
package image
