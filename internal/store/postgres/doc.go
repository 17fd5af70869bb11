// Package postgres is the production store.Store: Postgres through pgx, the
// shared SQL of store/sqlstore, embedded goose migrations, and LISTEN/NOTIFY
// wake-ups across coordinator replicas.
package postgres
