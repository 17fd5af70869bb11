// Package testutil holds helpers shared by tests: capability skips that turn
// into failures under CI, throwaway Postgres databases and clusters of a test's own.
// It is imported only from _test.go files.
package testutil
