// Package pager serves lazily restored guest memory. One FUSE file system
// per host agent holds one file per lazily restored machine, as long as
// the snapshot's memory: its chunks come from the chunk store (cache, blob
// store, deltas rebuilt and verified) on the guest's first touch, kept in
// a local overlay, while the snapshot's recorded working set is fetched
// ahead in that order, then the rest. The VMM maps the file shared as
// guest RAM, so the guest runs before its memory is local.
//
// A file records what a snapshot needs next: the chunks the guest touched
// since the restore, in first-touch order (the next restore's working
// set), and the chunks written since the last capture (a capture reads
// those and keeps every other chunk's ref unread).
//
// Imported by internal/host/snapshots (restore and capture) and cmd/engrams
// (the mount's wiring); it imports chunk's manifest types only.
package pager
