// Package relay runs the per-machine helpers of machines with a harness (the event relay, the model gateway
// tunnels, the readiness check) hooked to the lifecycle, each bounded against a hostile guest, and reports to a
// session a guest stream over a bound (Exceeded) and its guest's egress (EgressReporter). Imported by package host only.
package relay
