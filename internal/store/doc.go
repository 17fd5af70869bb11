// Package store is the database contract: the rows the coordinator keeps and
// the fenced writes that change them. Backends live in store/postgres and
// store/sqlite; store/storetest is the one conformance suite both run.
package store
