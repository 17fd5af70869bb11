// Package store is the database contract: the fenced reads and writes of the domain's rows, with
// typed fields over its JSON columns. Backends live in store/postgres and store/sqlite; storetest is
// the one conformance suite both run. Imported by the coordinator side (never by api, cli or host).
package store
