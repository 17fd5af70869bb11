// Package coordinatortest runs a real coordinator on a SQLite store against fake hosts in memory
// (they keep epochs, apply outboxes, take and restore snapshots, capture images), for the tests of
// the coordinator and of the packages built on it. Imported only by _test.go files.
package coordinatortest
