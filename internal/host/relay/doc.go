// Package relay runs the per-machine helpers of machines with a harness: the harness event relay, the
// model gateway tunnels and the harness readiness check, hooked to the lifecycle (Published, Ready, Stopped).
// Imported by package host only.
package relay
