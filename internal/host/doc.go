// Package host is the host agent: it dials the coordinator, heartbeats under a lease (pausing machines
// when cut off) and runs sessions' machines through a vmm.Backend, wiring the registry (machines),
// the snapshot parts (snapshots) and the per-machine helpers (relay). Imported by cmd/ and tests.
package host
