// Package snapshots moves machine state to and from chunks: snapshots, restores, image base captures,
// shared disks (root filesystems, harness bundles), the cached-snapshot bookkeeping and prefetch.
// Imported by package host only.
package snapshots
