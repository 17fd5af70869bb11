// Package connectortest is the conformance suite every integration's receiver passes (signatures, replays, bounds)
// and the fakes integration tests deliver through: the real pipeline (intake) over in-memory deliveries and runs.
// Imported only by tests.
package connectortest
