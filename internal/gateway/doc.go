// Package gateway is the model gateway: session-scoped placeholders for model keys, and the
// host-link route that checks a guest's request, swaps in the real key and streams it to the
// provider. Imported by tasks (through an interface), the server's host-link mux and cmd/.
package gateway
