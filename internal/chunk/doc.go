// Package chunk splits files into fixed-size SHA-256-addressed chunks in a blob store,
// skipping all-zero chunks, and restores them verified; it also holds the per-host LRU
// chunk cache and the garbage-collection sweep of unreachable chunk objects.
package chunk
