// Package sqlite is the embedded store.Store for development: pure-Go SQLite
// (modernc.org/sqlite) in WAL mode behind the shared SQL of store/sqlstore,
// with embedded goose migrations and in-process wake-ups.
package sqlite
