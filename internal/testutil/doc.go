// Package testutil holds helpers shared by tests: capability skips that turn
// into failures under CI, and throwaway Postgres databases.
// It is imported only from _test.go files.
package testutil
