// Package metrics holds the process's Prometheus registry, the engrams_ families (one method per
// thing measured; callers declare small interfaces of those they use) and the /healthz, /readyz and
// /metrics handlers. Imported by the measured parts (through those interfaces), cmd/, server and host.
package metrics
