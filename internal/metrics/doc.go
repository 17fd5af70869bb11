// Package metrics holds the process's Prometheus registry and the engrams_ families: one method
// per thing measured, so callers declare small interfaces of the methods they use. Imported by
// the parts that are measured (through those interfaces) and by cmd/ and the server, which serve it.
package metrics
