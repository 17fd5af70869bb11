// Package localdir is the blob.Store backend on a local directory: one file
// per object, written to a temp file and renamed into place, so a crash
// never leaves a partial object. Used by `engrams dev` and single hosts.
package localdir
