// Package cli is the `engrams` command line: cobra commands over the API
// client for sessions, hosts and tokens, with config resolution from flags,
// environment and the file `engrams dev` writes.
package cli
