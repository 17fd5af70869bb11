// Package intake is the one delivery pipeline every receiver runs through: bounded, verified by its integration,
// deduplicated on what the signature covers, admitted per trigger, recorded, started (or recorded refused or skipped).
// The API mounts it; the server wires the receivers into it.
package intake
