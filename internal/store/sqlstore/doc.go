// Package sqlstore implements store.Store's data methods once over database/sql;
// the postgres and sqlite backends wrap it with their connections, migrations and
// wake-ups. Its SQL is portable: $n placeholders, no dialect-only functions.
package sqlstore
