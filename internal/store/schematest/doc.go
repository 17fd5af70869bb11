// Package schematest holds only a test: after migrating, the Postgres and SQLite schemas
// have the same tables, columns, keys and indexes. It imports both backends, so nothing
// imports it.
package schematest
